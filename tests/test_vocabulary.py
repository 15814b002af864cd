"""Vocabulary adaptation: coverage, extension for uncovered scripts (old ids unchanged, marks
kept), embedding resize (old rows unchanged, mean init), pruning (same logits on kept text)."""

import numpy as np
import torch
from transformers import BertConfig, BertForMaskedLM

from tasks.corpus.tokenize import SPECIAL_TOKENS
from tasks.multilingual.embeddings import parameter_count, prune_masked_lm, resize_embeddings
from tasks.multilingual.vocabulary import coverage, extension_tokens, multilingual_tokenizer, used_token_ids, vocabulary

BASE = SPECIAL_TOKENS + list("我们今天很好的人中国") + ["##们"]
TIBETAN = ["འགྲོ་བ་མིའི་ཁྱིམ་ཚང་", "འགྲོ་བ་མི་ཡོངས་ལ་", "ཁྱིམ་ཚང་ཁག་གི་ནང་མི་"] * 5


def model(vocab_size: int, seed: int = 0) -> BertForMaskedLM:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32)
    return BertForMaskedLM(config).eval()


def test_coverage_counts_unk_and_tokens_per_char():
    tok = multilingual_tokenizer(BASE)
    c = coverage(tok, ["我们很好", "ཁྱིམ"])
    # 我 们 很 好 -> 4 tokens; the Tibetan word -> one [UNK]
    assert c == {"characters": 8, "tokens": 5, "unk_rate": 0.2, "tokens_per_char": 5 / 8}


def test_extension_appends_new_tokens_and_removes_unk():
    base = multilingual_tokenizer(BASE)
    new = extension_tokens.fn(BASE, TIBETAN, vocab_size=60, min_frequency=2)
    assert new and not set(new) & set(BASE)
    extended = multilingual_tokenizer(BASE + new)
    assert vocabulary(extended)[: len(BASE)] == BASE  # every old id keeps its token
    assert coverage(base, TIBETAN)["unk_rate"] == 1.0
    assert coverage(extended, TIBETAN)["unk_rate"] == 0.0
    # Tibetan vowel signs are kept: decoding gives the text back
    ids = extended(TIBETAN[0], add_special_tokens=False)["input_ids"]
    assert extended.decode(ids).replace(" ", "") == TIBETAN[0]
    assert extended("我们", add_special_tokens=False)["input_ids"] == base("我们", add_special_tokens=False)["input_ids"]



def test_literal_special_token_strings_are_counted_as_text():
    # "[MASK]" written in the text is word-pieced ([ mask ]), never the mask id, for coverage and pruning.
    tok = multilingual_tokenizer(BASE + ["[", "]", "mask"])
    pieces = {tok.convert_tokens_to_ids(t) for t in ("[", "mask", "]")}
    assert coverage(tok, ["我们[MASK]很好"]) == {"characters": 10, "tokens": 7, "unk_rate": 0.0,
                                                "tokens_per_char": 0.7}  # 我 们 [ mask ] 很 好
    assert pieces <= set(used_token_ids(tok, ["我们[MASK]很好"]).tolist())

def test_resize_keeps_old_rows_and_starts_new_rows_near_the_mean():
    m = model(len(BASE))
    old_emb = m.bert.embeddings.word_embeddings.weight.detach().clone()
    old_bias = m.cls.predictions.bias.detach().clone()
    resize_embeddings(m, len(BASE) + 5, seed=1)
    emb = m.bert.embeddings.word_embeddings.weight.detach()
    assert emb.shape[0] == len(BASE) + 5 and torch.equal(emb[: len(BASE)], old_emb)
    assert torch.allclose(emb[len(BASE):], old_emb.mean(0).expand(5, -1), atol=1e-3)
    assert torch.allclose(m.cls.predictions.bias[len(BASE):], old_bias.mean().expand(5))
    assert m.cls.predictions.decoder.weight.data_ptr() == emb.data_ptr()  # still tied


def test_pruned_model_gives_the_same_logits_on_kept_text():
    tok = multilingual_tokenizer(BASE)
    m = model(len(BASE))
    with torch.no_grad():
        m.cls.predictions.bias.normal_()  # a non-zero bias must be sliced too
    keep = used_token_ids(tok, ["我们很好"])
    assert set(keep.tolist()) >= {tok.pad_token_id, tok.unk_token_id, tok.mask_token_id}
    assert tok.convert_tokens_to_ids("中") not in keep
    pruned = prune_masked_lm(m, keep)
    assert pruned.config.vocab_size == len(keep)
    assert parameter_count(pruned) == parameter_count(m) - (len(BASE) - len(keep)) * (16 + 1)
    small_tok = multilingual_tokenizer([vocabulary(tok)[i] for i in keep])
    full_ids = tok("我们很好", return_tensors="pt")["input_ids"]
    small_ids = small_tok("我们很好", return_tensors="pt")["input_ids"]
    new_id = {old: new for new, old in enumerate(keep.tolist())}
    assert small_ids[0].tolist() == [new_id[i] for i in full_ids[0].tolist()]
    with torch.no_grad():
        full = m(input_ids=full_ids).logits[..., torch.from_numpy(keep)]
        small = pruned(input_ids=small_ids).logits
    assert torch.allclose(full, small, atol=1e-6)


def test_prune_rejects_unsorted_ids():
    import pytest

    with pytest.raises(ValueError, match="strictly ascending"):
        prune_masked_lm(model(len(BASE)), np.array([3, 1]))
