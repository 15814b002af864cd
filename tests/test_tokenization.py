"""Vocabularies (packaged and trained), token-to-word alignment."""

from collections import Counter

import pytest

from tasks.core.errors import SourceError
from tasks.corpus.tokenize import SPECIAL_TOKENS, load_vocab_tokenizer, random_token_ids, tokenize_words, \
    train_tokenizer
from tasks.corpus.wordpiece import train_wordpiece

TEXTS = ["今天天气很好，我们去公园。", "Windows 98 和 windows 2000 都是系统。", "天气预报说明天下雨。"] * 20


def test_vocab_file_with_unicode_line_separators(tmp_path):
    # U+2028 and U+0085 are vocabulary entries of the Chinese BERT vocab; str.splitlines()
    # would split on them and shift every later id by one.
    tokens = SPECIAL_TOKENS + ["\u2028", "\x85", "好", "天"]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tok = load_vocab_tokenizer(tmp_path / "vocab.txt")
    assert tok.convert_tokens_to_ids(["好", "天"]) == [7, 8]
    assert tok.mask_token_id == 4 and tok.pad_token_id == 0


def test_vocab_without_special_tokens_is_rejected(tmp_path):
    (tmp_path / "vocab.txt").write_text("[PAD]\n好\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"lacks special token\(s\) \[UNK\], \[CLS\], \[SEP\], \[MASK\]"):
        load_vocab_tokenizer(tmp_path / "vocab.txt")


def test_wordpiece_training_is_deterministic_and_merges_frequent_words():
    counts = Counter({"windows": 10, "window": 4, "wind": 3, "好": 50, "x": 1})
    vocab = train_wordpiece(counts, 100, 2, SPECIAL_TOKENS)
    assert vocab[:5] == SPECIAL_TOKENS
    assert vocab == train_wordpiece(Counter(dict(reversed(list(counts.items())))), 100, 2, SPECIAL_TOKENS)
    assert "windows" in vocab and "wind" in vocab
    assert {"w", "##i", "##s", "好", "x"} <= set(vocab)
    # w+##i, ##i+##n and ##n+##d all occur 17 times: the tie goes to the pair that sorts first
    alphabet = {"w", "##i", "##n", "##d", "##o", "##w", "##s", "好", "x"}
    first_merge = vocab[len(SPECIAL_TOKENS) + len(alphabet)]
    assert set(vocab[len(SPECIAL_TOKENS):len(SPECIAL_TOKENS) + len(alphabet)]) == alphabet
    assert first_merge == "##in"


def test_wordpiece_respects_min_frequency_and_size():
    counts = Counter({"ab": 1, "cd": 5})
    vocab = train_wordpiece(counts, 100, 2)
    assert "cd" in vocab and "ab" not in vocab
    assert len(train_wordpiece(Counter({"abcdef": 10}), 8)) == 8


def test_trained_tokenizer_covers_its_corpus():
    tok = train_tokenizer(TEXTS, 200, 2)
    ids = tok(TEXTS, add_special_tokens=False)["input_ids"]
    assert all(tok.unk_token_id not in x for x in ids)
    assert train_tokenizer(TEXTS, 200, 2).get_vocab() == tok.get_vocab()


def test_token_to_word_alignment():
    tok = train_tokenizer(TEXTS, 200, 2)
    words = [["今天", "天气", "很", "好", "，"], ["Windows", " ", "98", " ", "和"]]
    texts = ["".join(w) for w in words]
    ids, word_ids = tokenize_words(tok, texts, words)
    assert tok.convert_ids_to_tokens(ids[0].tolist()) == ["今", "天", "天", "气", "很", "好", "，"]
    assert word_ids[0].tolist() == [0, 0, 1, 1, 2, 3, 4]
    pieces = tok.convert_ids_to_tokens(ids[1].tolist())
    assert pieces[0] == "windows" and pieces[-1] == "和"
    assert word_ids[1].tolist() == [0, 2, 4]  # the spaces (words 1 and 3) have no tokens


def test_random_token_ids_exclude_special_and_unused(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(SPECIAL_TOKENS + ["[unused1]", "好", "天"]), encoding="utf-8")
    tok = load_vocab_tokenizer(tmp_path / "vocab.txt")
    assert tok.convert_ids_to_tokens(random_token_ids(tok).tolist()) == ["好", "天"]


def test_special_token_strings_in_text_are_word_pieced(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(SPECIAL_TOKENS + ["[", "]", "mask", "sep", "cls", "unk", "pad", "用",
                                                                    "替", "换", "，", "再", "接", "。"]), encoding="utf-8")
    tok = load_vocab_tokenizer(tmp_path / "vocab.txt")
    words = [["用", "[MASK]", "替换", "，", "再", "接", "[SEP]", "[CLS]", "[UNK]", "[PAD]", "。"]]
    ids, word_ids = tokenize_words(tok, ["".join(words[0])], words)
    assert not set(ids[0].tolist()) & set(tok.all_special_ids)  # not even [UNK]: every piece is in the vocabulary
    assert tok.convert_ids_to_tokens(ids[0].tolist()) == (
        ["用", "[", "mask", "]", "替", "换", "，", "再", "接"]
        + [p for name in ("sep", "cls", "unk", "pad") for p in ("[", name, "]")] + ["。"])
    assert word_ids[0].tolist() == [0, 1, 1, 1, 2, 2, 3, 4, 5, 6, 6, 6, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10]


def test_ordinary_text_tokenizes_as_before():
    tok = train_tokenizer(TEXTS, 200, 2)
    texts = TEXTS[:3]
    ids, _ = tokenize_words(tok, texts, [[t] for t in texts])
    assert [x.tolist() for x in ids] == tok(texts, add_special_tokens=False)["input_ids"]
