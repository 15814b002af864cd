"""NER: CoNLL reading and scheme conversion, malformed records, label alignment, decoding, metrics."""

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForTokenClassification, BertTokenizerFast

from tasks.core.errors import SourceError
from tasks.core.quality import Issues
from tasks.downstream.finetune import predict
from tasks.downstream.conll import NerSentence, entity_counts, label_list, read_conll
from tasks.downstream.ner import EncodedNer, decode, ner_metrics
from tasks.training.batching import IGNORE_INDEX


def write(tmp_path, text: str, name: str = "f.txt", newline: str = "\n"):
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))
    return path


# --- reading and scheme conversion -------------------------------------------------------------

def test_bmes_to_bio_crlf_and_tabs(tmp_path):
    # MSRA-style BMES, CRLF line ends, tab and space separators, a BOM, no final blank line.
    text = ("\ufeff中 B-ORG\n国\tM-ORG\n银 M-ORG\n行 E-ORG\n在 O\n北 B-LOC\n京 E-LOC\n，  O\n张 S-PER\n说 O\n"
            "\n\n好 O\n")
    sents = read_conll(write(tmp_path, text, newline="\r\n"), "bmes", Issues("fail"))
    assert [s.tokens for s in sents] == [list("中国银行在北京，张说"), ["好"]]
    assert sents[0].tags == ["B-ORG", "I-ORG", "I-ORG", "I-ORG", "O", "B-LOC", "I-LOC", "O", "B-PER", "O"]
    assert sents[1].tags == ["O"]
    assert [s.id for s in sents] == ["f-000000", "f-000001"]


def test_bioes_to_bio(tmp_path):
    text = "张 B-PER\n三 E-PER\n去 O\n京 S-LOC\n中 B-ORG\n国 I-ORG\n队 E-ORG\n"
    (sent,) = read_conll(write(tmp_path, text), "bioes", Issues("fail"), id_prefix="dev")
    assert sent.tags == ["B-PER", "I-PER", "O", "B-LOC", "B-ORG", "I-ORG", "I-ORG"]
    assert sent.id == "dev-000000"


def test_tokens_are_normalised_and_stay_aligned(tmp_path):
    text = "Ｉ B-ORG\nＢＭ I-ORG\n\u3000 O\n好 O\n"  # full-width letters, an ideographic-space token
    (sent,) = read_conll(write(tmp_path, text), "bio", Issues("fail"))
    assert sent.tokens == ["I", "BM", "", "好"] and sent.tags == ["B-ORG", "I-ORG", "O", "O"]


def test_label_list_and_entity_counts():
    sents = [NerSentence("a", list("张三在京"), ["B-PER", "I-PER", "O", "B-LOC"]),
             NerSentence("b", list("京"), ["B-LOC"])]
    assert label_list(sents) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    assert entity_counts(sents) == {"LOC": 2, "PER": 1}


def test_bad_encoding_names_file_and_line(tmp_path):
    path = tmp_path / "f.txt"
    path.write_bytes("好 O\n".encode() + b"\xc3\x28 O\n")
    with pytest.raises(SourceError, match=r"f.txt:2: not valid UTF-8"):
        read_conll(path, "bio", Issues("repair"))


def test_unknown_scheme(tmp_path):
    with pytest.raises(ValueError, match="unknown tagging scheme"):
        read_conll(write(tmp_path, "好 O\n"), "iob1", Issues("fail"))


# --- malformed records under each policy ---------------------------------------------------------
# Each file: a bad first sentence (problem on the given line), then a good sentence "好 O".
MALFORMED = {
    # kind: (scheme, labels, text, bad line, tags of the first sentence when repaired or None if dropped)
    "columns": ("bio", None, "张 B-PER\n三\n\n好 O\n", 2, None),
    "columns_extra": ("bio", None, "张 B-PER x\n\n好 O\n", 1, None),
    "tag": ("bio", None, "张 B-PER\n三 E-PER\n\n好 O\n", 2, None),  # E- is not a BIO prefix
    "bio": ("bio", None, "在 O\n京 I-LOC\n\n好 O\n", 2, ["O", "B-LOC"]),
    "bio_type_change": ("bio", None, "张 B-PER\n京 I-LOC\n\n好 O\n", 2, ["B-PER", "B-LOC"]),
    # Broken BMES/BIOES sequences; repaired as conlleval reads them.
    "sequence_lone_end": ("bmes", None, "在 O\n京 E-LOC\n\n好 O\n", 2, ["O", "B-LOC"]),
    "sequence_lone_middle": ("bmes", None, "在 O\n北 M-LOC\n京 E-LOC\n\n好 O\n", 2, ["O", "B-LOC", "I-LOC"]),
    "sequence_begin_begin": ("bmes", None, "张 B-PER\n李 B-PER\n四 E-PER\n\n好 O\n", 2,
                             ["B-PER", "B-PER", "I-PER"]),
    "sequence_begin_outside": ("bmes", None, "张 B-PER\n说 O\n\n好 O\n", 2, ["B-PER", "O"]),
    "sequence_end_end": ("bmes", None, "张 B-PER\n三 E-PER\n丰 E-PER\n\n好 O\n", 3, ["B-PER", "I-PER", "B-PER"]),
    "sequence_single_middle": ("bmes", None, "京 S-LOC\n北 M-LOC\n城 E-LOC\n\n好 O\n", 2,
                               ["B-LOC", "B-LOC", "I-LOC"]),
    "sequence_type_change": ("bmes", None, "张 B-PER\n京 E-LOC\n\n好 O\n", 2, ["B-PER", "B-LOC"]),
    "sequence_open_at_end": ("bmes", None, "在 O\n张 B-PER\n\n好 O\n", 2, ["O", "B-PER"]),
    "sequence_bioes_inside_after_single": ("bioes", None, "京 S-LOC\n城 I-LOC\n市 E-LOC\n\n好 O\n", 2,
                                           ["B-LOC", "B-LOC", "I-LOC"]),
    "label": ("bio", ["O", "B-PER", "I-PER"], "北 B-LOC\n京 I-LOC\n张 B-PER\n\n好 O\n", 1, ["O", "O", "B-PER"]),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_fail_names_file_and_line(tmp_path, case):
    scheme, labels, text, line, _ = MALFORMED[case]
    with pytest.raises(SourceError, match=rf"f.txt:{line}: "):
        read_conll(write(tmp_path, text), scheme, Issues("fail"), labels=labels)


@pytest.mark.parametrize("case, pair", [
    ("sequence_begin_begin", "B-PER B-PER"), ("sequence_begin_outside", "B-PER O"),
    ("sequence_end_end", "E-PER E-PER"), ("sequence_single_middle", "S-LOC M-LOC"),
    ("sequence_lone_middle", "O M-LOC"), ("sequence_type_change", "B-PER E-LOC")])
def test_broken_sequence_message_shows_the_two_tags(tmp_path, case, pair):
    scheme, labels, text, line, _ = MALFORMED[case]
    with pytest.raises(SourceError, match=rf"f.txt:{line}: broken BMES sequence '{pair}'"):
        read_conll(write(tmp_path, text), scheme, Issues("fail"), labels=labels)


def test_sequences_do_not_continue_across_sentences(tmp_path):
    path = write(tmp_path, "北 B-LOC\n\n京 E-LOC\n")
    with pytest.raises(SourceError, match="f.txt:1: broken BMES sequence: B-LOC is not closed by E-LOC before the "
                                          "sentence end"):
        read_conll(path, "bmes", Issues("fail"))
    issues = Issues("skip")
    assert read_conll(path, "bmes", issues) == [] and issues.counts == {"sequence_skipped": 2}


def test_valid_sequences_read_as_the_plain_prefix_mapping(tmp_path):
    # Every legal transition of each scheme; no problem is reported and tags map prefix by prefix.
    files = {"bmes": "中 B-ORG\n国 M-ORG\n银 M-ORG\n行 E-ORG\n张 B-PER\n三 E-PER\n京 S-LOC\n沪 S-LOC\n"
                     "在 O\n李 S-PER\n北 B-LOC\n京 E-LOC\n\n王 B-PER\n五 E-PER\n",
             "bioes": "中 B-ORG\n国 I-ORG\n队 E-ORG\n京 S-LOC\n张 B-PER\n三 E-PER\n在 O\n\n沪 S-LOC\n",
             "bio": "张 B-PER\n李 B-PER\n四 I-PER\n京 B-LOC\n在 O\n沪 B-LOC\n城 I-LOC\n市 I-LOC\n"}
    to_bio = {"B": "B", "M": "I", "I": "I", "E": "I", "S": "B"}
    for scheme, text in files.items():
        issues = Issues("fail")
        sents = read_conll(write(tmp_path, text), scheme, issues)
        expected = [[t if t == "O" else f"{to_bio[t[0]]}{t[1:]}" for t in block.split()[1::2]]
                    for block in text.strip().split("\n\n")]
        assert [s.tags for s in sents] == expected and not issues.counts


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_skip_drops_and_counts(tmp_path, case):
    scheme, labels, text, line, _ = MALFORMED[case]
    issues = Issues("skip")
    sents = read_conll(write(tmp_path, text), scheme, issues, labels=labels)
    assert [(s.id, s.tokens) for s in sents] == [("f-000001", ["好"])]  # ids do not shift
    kind = case.split("_")[0]
    assert issues.counts == {f"{kind}_skipped": 1}
    assert issues.messages[0].startswith(f"{tmp_path / 'f.txt'}:{line}: ")


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_repair_fixes_or_drops_and_counts(tmp_path, case):
    scheme, labels, text, line, repaired = MALFORMED[case]
    issues = Issues("repair")
    sents = read_conll(write(tmp_path, text), scheme, issues, labels=labels)
    kind = case.split("_")[0]
    if repaired is None:  # no repair known: the sentence is dropped
        assert [s.tokens for s in sents] == [["好"]]
        assert issues.counts == {f"{kind}_skipped": 1}
    else:
        assert [s.tags for s in sents] == [repaired, ["O"]]
        assert issues.counts == {f"{kind}_repaired": 2 if kind == "label" else 1}


# --- encoding: first-sub-token labels ------------------------------------------------------------

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "张", "三", "在", "北", "京", "new", "##york"]
LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(VOCAB)}, do_lower_case=True,
                             tokenize_chinese_chars=True)


def sentences():
    # "NewYork" -> new ##york (two sub-tokens); " " -> no sub-token at all.
    return [NerSentence("a", ["张", "三", "在", "NewYork", " ", "北", "京"],
                        ["B-PER", "I-PER", "O", "B-LOC", "O", "B-LOC", "I-LOC"]),
            NerSentence("b", ["在", "京"], ["O", "B-LOC"])]


def test_labels_on_first_subtoken_only(tokenizer):
    enc = EncodedNer.encode(sentences(), tokenizer, LABELS, max_length=32)
    b = enc.batch(np.array([0, 1]))
    assert set(b) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert all(t.dtype == torch.int64 and t.shape == (2, 9) for t in b.values())
    #                        [CLS] 张 三 在 new ##york 北 京 [SEP]
    assert b["input_ids"][0].tolist() == [2, 5, 6, 7, 10, 11, 8, 9, 3]
    assert b["labels"][0].tolist() == [-100, 3, 4, 0, 1, -100, 1, 2, -100]
    assert b["input_ids"][1].tolist() == [2, 7, 9, 3, 0, 0, 0, 0, 0]
    assert b["labels"][1].tolist() == [-100, 0, 1, -100, -100, -100, -100, -100, -100]
    assert b["attention_mask"][1].tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert (b["token_type_ids"] == 0).all()
    assert enc.lengths.tolist() == [9, 4] and len(enc) == 2
    assert enc.words[:9].tolist() == [-1, 0, 1, 2, 3, -1, 5, 6, -1]
    assert enc.stats == {"examples": 2, "tokens": 9, "empty_tokens": 1, "truncated_tokens": 0,
                         "truncated_examples": 0}



def test_literal_special_token_is_word_pieced(tokenizer):
    # A token "[MASK]" is text: [UNK] [UNK] [UNK] ("[", "mask", "]" are not in VOCAB), never the mask id;
    # its label sits on its first piece.
    sents = [NerSentence("m", ["张", "[MASK]", "在"], ["B-PER", "O", "O"])]
    enc = EncodedNer.encode(sents, tokenizer, LABELS, max_length=32)
    b = enc.batch(np.array([0]))
    assert b["input_ids"][0].tolist() == [2, 5, 1, 1, 1, 7, 3]
    assert b["labels"][0].tolist() == [-100, 3, 0, -100, -100, 0, -100]
    assert enc.words.tolist() == [-1, 0, 1, -1, -1, 2, -1]

def test_truncation_is_counted(tokenizer):
    # max_length 6: [CLS] 张 三 在 new [SEP]; "NewYork" keeps its first sub-token, 北 京 are cut.
    enc = EncodedNer.encode(sentences(), tokenizer, LABELS, max_length=6)
    assert enc.batch(np.array([0]))["labels"].tolist() == [[-100, 3, 4, 0, 1, -100]]
    assert enc.stats == {"examples": 2, "tokens": 9, "empty_tokens": 1, "truncated_tokens": 2,
                         "truncated_examples": 1}


def test_tag_outside_label_list_is_an_error(tokenizer):
    with pytest.raises(SourceError, match=r"sentence a: tag 'B-LOC'"):
        EncodedNer.encode(sentences(), tokenizer, ["O", "B-PER", "I-PER"], max_length=32)


# --- decoding -------------------------------------------------------------------------------------

def one_hot_logits(enc: EncodedNer, batches: list[np.ndarray]) -> list[np.ndarray]:
    """Logits that pick the gold label at scored positions and B-PER (a wrong label) elsewhere."""
    out = []
    for index in batches:
        labels = enc.batch(index)["labels"].numpy()
        chosen = np.where(labels == IGNORE_INDEX, LABELS.index("B-PER"), labels)
        out.append(np.eye(len(LABELS), dtype=np.float32)[chosen])
    return out


@pytest.mark.parametrize("batches", [[np.array([0, 1])], [np.array([0]), np.array([1])]])
def test_decode_round_trip(tokenizer, batches):
    sents = sentences()
    enc = EncodedNer.encode(sents, tokenizer, LABELS, max_length=32)
    assert decode(one_hot_logits(enc, batches), enc, LABELS) == [s.tags for s in sents]


def test_decode_predicts_o_for_truncated_tokens(tokenizer):
    enc = EncodedNer.encode(sentences(), tokenizer, LABELS, max_length=6)
    tags = decode(one_hot_logits(enc, [np.array([0, 1])]), enc, LABELS)
    assert tags == [["B-PER", "I-PER", "O", "B-LOC", "O", "O", "O"], ["O", "B-LOC"]]


def test_decode_rejects_logits_that_do_not_fit(tokenizer):
    enc = EncodedNer.encode(sentences(), tokenizer, LABELS, max_length=32)
    with pytest.raises(ValueError, match="cover 1 examples"):
        decode(one_hot_logits(enc, [np.array([0])]), enc, LABELS)
    with pytest.raises(ValueError, match="do not match"):
        decode([np.zeros((2, 9, 3), np.float32)], enc, LABELS)


def test_batches_fit_a_token_classification_head(tokenizer):
    """The batch dict is accepted by a Hugging Face token-classification head, and
    ``finetune.predict``'s logits decode to one tag per original token."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                        intermediate_size=16, max_position_embeddings=32, num_labels=len(LABELS))
    model = BertForTokenClassification(config)
    enc = EncodedNer.encode(sentences(), tokenizer, LABELS, max_length=32)
    assert torch.isfinite(model(**enc.batch(np.array([0, 1]))).loss)
    logits = predict(model, enc, batch_size=1, device=torch.device("cpu"))["logits"]
    assert [x.shape for x in logits] == [(1, 9, 5), (1, 4, 5)]
    tags = decode(logits, enc, LABELS)
    assert [len(t) for t in tags] == [7, 2] and tags[0][4] == "O"


# --- metrics --------------------------------------------------------------------------------------

def test_metrics_hand_worked():
    gold = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]]
    pred = [["B-PER", "I-PER", "O", "B-ORG", "I-ORG"]]  # PER exact; LOC predicted as ORG: wrong
    m = ner_metrics(gold, pred)
    assert (m["precision"], m["recall"], m["f1"], m["support"]) == (0.5, 0.5, 0.5, 2)
    assert m["per_type"] == {"LOC": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1},
                             "ORG": {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0},
                             "PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}}


def test_metrics_strict_boundaries():
    gold = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O"], ["B-LOC", "O"]]
    # PER starts with I- (not an entity in strict IOB2); first LOC too short; second LOC exact.
    pred = [["I-PER", "I-PER", "O", "B-LOC", "O", "O"], ["B-LOC", "O"]]
    m = ner_metrics(gold, pred)
    assert m["precision"] == pytest.approx(1 / 2) and m["recall"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(2 * (1 / 2) * (1 / 3) / (1 / 2 + 1 / 3))
    assert m["per_type"]["LOC"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5, "support": 2}
    assert m["per_type"]["PER"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}


@pytest.mark.parametrize("policy", ["skip", "repair"])
def test_a_file_in_another_scheme_is_refused_naming_the_tags_and_the_scheme_that_fits(tmp_path, policy):
    """BIO read as BMES would skip every I- tag and so lose most entities (rc 0 before): past a few stray tags the
    file is refused under every policy; a few stray tags are still skipped one by one."""
    sentence = "张 B-PER\n三 I-PER\n在 O\n北 B-LOC\n京 I-LOC\n\n"
    with pytest.raises(SourceError, match=r"f.txt: tagged B- 24, I- 24, not in the declared scheme bmes "
                                          r"\(B/M/E/S/O\): declare scheme: bio or bioes"):
        read_conll(write(tmp_path, sentence * 12), "bmes", Issues(policy))
    stray = "张 B-PER\n三 E-PER\n\n" * 200 + sentence  # 2 of 404 entity tags: skipped, counted
    issues = Issues(policy)
    assert len(read_conll(write(tmp_path, stray), "bmes", issues)) == 200 and issues.counts == {"tag_skipped": 1}
