"""Span-extraction reading comprehension: loading, NER->MRC, windows, decoding, metric round trip."""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import BertTokenizerFast

from tasks.core.errors import ParamsError, SourceError
from tasks.core.quality import Issues
from tasks.downstream.cmrc_metric import evaluate, gold_answers
from tasks.downstream.mrc import MrcFeatures
from tasks.downstream.squad import UNLOCATED, MrcExample, gold_texts, located, read_squad
from tasks.downstream.mrc_decode import decode, write_predictions
from tasks.downstream.ner_mrc import DEFAULT_QUERIES, bio_spans, ner_to_mrc

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_tokenizer(text: str) -> BertTokenizerFast:
    """A character-level BERT tokenizer whose vocabulary is the characters of ``text``."""
    chars = sorted(set(text) - set(" \t\n"))
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(SPECIAL + chars)}, do_lower_case=True,
                             tokenize_chinese_chars=True)


def squad(*paragraphs) -> dict:
    """A SQuAD-format document from ``(context, [(qid, question, [(text, start), ...]), ...])``."""
    return {"version": "v1.0", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": [{"id": qid, "question": q,
                                      "answers": [{"text": t, "answer_start": s} for t, s in answers]}
                                     for qid, q, answers in qas]}
        for context, qas in paragraphs]}]}


def write(tmp_path: Path, doc) -> Path:
    path = tmp_path / "dev.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------------------------
# read_squad

CTX = "北京是中国的首都，上海是中国的经济中心，北京有故宫。"  # "北京" at 0 and 20


def bad_start_doc() -> dict:
    return squad((CTX, [("q1", "首都是哪里？", [("北京", 0)]),            # fine
                        ("q2", "故宫在哪里？", [("北京", 19)]),           # off by one: nearest is 20, not 0
                        ("q3", "经济中心？", [("上海", 3), ("上海", 9)]),  # first wrong but repairable, second fine
                        ("q4", "哪里？", [("广州", 5)])]))                 # text not in context: unrepairable


def test_read_squad_clean_file(tmp_path):
    path = write(tmp_path, squad((CTX, [(" q1 ", "首都是哪里？", [("北京", 0), ("北京", 20)])])))
    issues = Issues("fail")
    assert read_squad(path, issues) == [MrcExample("q1", "首都是哪里？", CTX, (("北京", 0), ("北京", 20)))]
    assert not issues.counts


def test_answer_start_repair_relocates_to_nearest_occurrence(tmp_path):
    issues = Issues("repair")
    examples = read_squad(write(tmp_path, bad_start_doc()), issues)
    assert [(e.id, e.answers) for e in examples] == [
        ("q1", (("北京", 0),)), ("q2", (("北京", 20),)), ("q3", (("上海", 9), ("上海", 9)))]
    for e in examples:
        assert all(e.context[s:s + len(t)] == t for t, s in e.answers)
    assert issues.counts == {"answer_start_repaired": 2, "answer_start_skipped": 1, "no_answer_skipped": 1}
    assert any("dev.json#q4" in m and "does not occur" in m for m in issues.messages)


def test_answer_start_skip_drops_answers_and_emptied_questions(tmp_path):
    issues = Issues("skip")
    examples = read_squad(write(tmp_path, bad_start_doc()), issues)
    assert [(e.id, e.answers) for e in examples] == [("q1", (("北京", 0),)), ("q3", (("上海", 9),))]
    assert issues.counts == {"answer_start_skipped": 3, "no_answer_skipped": 2}


def test_answer_start_fail_names_file_and_question(tmp_path):
    with pytest.raises(SourceError, match=r"dev\.json#q2: .*does not start at answer_start 19"):
        read_squad(write(tmp_path, bad_start_doc()), Issues("fail"))


def test_structural_errors_raise_source_error(tmp_path):
    with pytest.raises(SourceError, match=r"dev\.json: invalid JSON"):
        read_squad(write(tmp_path, '{"data": ['), Issues("repair"))
    with pytest.raises(SourceError, match=r"dev\.json: missing key 'data'"):
        read_squad(write(tmp_path, {"version": "1"}), Issues("repair"))
    doc = squad((CTX, [("q7", "首都？", [("北京", 0)])]))
    del doc["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"]
    with pytest.raises(SourceError, match=r"dev\.json#q7: answers\[0\]: missing key 'answer_start'"):
        read_squad(write(tmp_path, doc), Issues("repair"))
    with pytest.raises(SourceError, match="file not found"):
        read_squad(tmp_path / "absent.json", Issues("repair"))


def test_duplicate_ids_and_unlabelled_questions(tmp_path):
    doc = squad((CTX, [("q1", "首都？", [("北京", 0)]), ("q1", "首都？", [("北京", 0)]), ("q2", "哪里？", [])]))
    issues = Issues("skip")
    assert [e.id for e in read_squad(write(tmp_path, doc), issues)] == ["q1"]
    assert issues.counts == {"duplicate_id_skipped": 1, "no_answer_skipped": 1}
    examples = read_squad(write(tmp_path, doc), Issues("skip"), require_answers=False)
    assert [(e.id, e.answers) for e in examples] == [("q1", (("北京", 0),)), ("q2", ())]


# ------------------------------------------------------------------------------------------------------------------
# NER -> MRC


@dataclass
class Sentence:
    id: str
    tokens: list
    tags: list


def test_bio_spans():
    assert bio_spans(["B-PER", "I-PER", "O", "I-LOC", "B-LOC", "B-LOC", "I-ORG"]) == [
        ("PER", 0, 2), ("LOC", 3, 4), ("LOC", 4, 5), ("LOC", 5, 6), ("ORG", 6, 7)]


def test_ner_to_mrc_single_and_multiple_answers():
    text = "张三在北京和上海见了李四"
    tags = ["B-PER", "I-PER", "O", "B-LOC", "I-LOC", "O", "B-LOC", "I-LOC", "O", "O", "B-PER", "I-PER"]
    sentences = [Sentence("s1", list(text), tags), Sentence("s2", list("新华社报道"), ["B-ORG", "I-ORG", "I-ORG", "O", "O"])]
    single = ner_to_mrc(sentences, DEFAULT_QUERIES)
    # s1 has two PER and two LOC (ambiguous), no ORG; s2 has exactly one ORG
    assert single == [MrcExample("s2-ORG", DEFAULT_QUERIES["ORG"], "新华社报道", (("新华社", 0),))]
    multi = ner_to_mrc(sentences, DEFAULT_QUERIES, single_answer=False)
    assert [(e.id, e.answers) for e in multi] == [
        ("s1-PER", (("张三", 0), ("李四", 10))), ("s1-LOC", (("北京", 3), ("上海", 6))), ("s2-ORG", (("新华社", 0),))]
    for e in multi:
        assert e.context == "".join(next(s.tokens for s in sentences if e.id.startswith(s.id)))
        assert all(e.context[s:s + len(t)] == t for t, s in e.answers)
    only_loc = ner_to_mrc([Sentence("s3", list("我去北京"), ["O", "O", "B-LOC", "I-LOC"])], {"LOC": "哪里？"})
    assert only_loc == [MrcExample("s3-LOC", "哪里？", "我去北京", (("北京", 2),))]
    with pytest.raises(ValueError, match="s4"):
        ner_to_mrc([Sentence("s4", list("我"), [])], DEFAULT_QUERIES)
    assert set(DEFAULT_QUERIES) == {"PER", "LOC", "ORG"}


# ------------------------------------------------------------------------------------------------------------------
# Windows

LONG = "甲乙丙丁戊己庚辛壬癸子丑寅卯辰巳午未申酉戌亥春夏秋冬东南西北"  # 30 distinct characters


def test_long_context_yields_overlapping_windows_with_labels():
    answer_start = LONG.index("申酉戌")
    example = MrcExample("x", "问题", LONG, (("申酉戌", answer_start),))
    tok = make_tokenizer(LONG + "问题")
    features = MrcFeatures.encode([example], tok, max_length=16, doc_stride=4)
    # 16 - 2 question tokens - 3 special = 11 context tokens per window, advancing 11 - 4 = 7
    assert len(features) == 4
    assert features.lengths.tolist() == [16, 16, 16, 14]
    assert features.example_index.tolist() == [0, 0, 0, 0]
    starts = [int(features.feature_spans(f)[4, 0]) for f in range(4)]  # first context token
    assert starts == [0, 7, 14, 21]
    b = features.batch(np.arange(4))
    assert b["input_ids"].shape == (4, 16)
    assert all(v.dtype == torch.int64 for v in b.values())
    assert b["attention_mask"][3].tolist() == [1] * 14 + [0, 0]
    assert b["token_type_ids"][0].tolist() == [0] * 4 + [1] * 12
    # the answer (characters 18..20) lies wholly inside window 2 only (characters 14..24)
    labels = list(zip(b["start_positions"].tolist(), b["end_positions"].tolist()))
    assert labels == [(0, 0), (0, 0), (4 + 4, 4 + 6), (0, 0)]
    spans = features.feature_spans(2)
    s, e = labels[2]
    assert LONG[spans[s, 0]:spans[e, 1]] == "申酉戌"
    ids = b["input_ids"][2].tolist()
    assert tok.convert_ids_to_tokens(ids[s:e + 1]) == ["申", "酉", "戌"]
    assert (features.feature_spans(0)[:4] == -1).all() and (features.feature_spans(0)[-1] == -1).all()


def test_answer_in_overlap_is_labelled_in_both_windows():
    example = MrcExample("x", "问题", LONG, (("庚辛", 6),))  # chars 6-7: window 0 (0..10) only; 1 starts at 7
    tok = make_tokenizer(LONG + "问题")
    features = MrcFeatures.encode([example], tok, max_length=16, doc_stride=4)
    assert features.start_positions.tolist() == [4 + 6, 0, 0, 0]
    example = MrcExample("x", "问题", LONG, (("辛壬", 7),))  # chars 7-8: in windows 0 and 1
    features = MrcFeatures.encode([example], tok, max_length=16, doc_stride=4)
    assert list(zip(features.start_positions.tolist(), features.end_positions.tolist())) == [
        (4 + 7, 4 + 8), (4 + 0, 4 + 1), (0, 0), (0, 0)]


def test_answers_that_no_window_contains_are_counted():
    tok = make_tokenizer(LONG + "问题")
    # doc_stride 1: 11 context tokens a window advancing 10, windows [0, 11) [10, 21) [20, 30);
    # characters 9..11 and 19..21 straddle a boundary, so no window holds them whole.
    across, across2, inside = (LONG[9:12], 9), (LONG[19:22], 19), (LONG[2:5], 2)
    examples = [MrcExample("target_across", "问题", LONG, (across, inside)),
                MrcExample("other_across", "问题", LONG, (inside, across2)),
                MrcExample("unlabelled", "问题", LONG, ()),
                MrcExample("fine", "问题", LONG, (inside,))]
    features = MrcFeatures.encode(examples, tok, max_length=16, doc_stride=1)
    assert features.stats == {"examples": 4, "features": 12, "questions_answer_in_no_window": 1,
                              "answers_in_no_window": 2}
    # the uncounted questions have a labelled window, the counted one none
    labelled = {examples[e].id for e in features.example_index[features.start_positions > 0]}
    assert labelled == {"other_across", "fine"}
    # a wider overlap (windows advancing 3) holds every answer whole
    wide = MrcFeatures.encode(examples, tok, max_length=16, doc_stride=8)
    assert wide.stats["questions_answer_in_no_window"] == wide.stats["answers_in_no_window"] == 0
    assert MrcFeatures.encode([], tok, max_length=16, doc_stride=1).stats == {
        "examples": 0, "features": 0, "questions_answer_in_no_window": 0, "answers_in_no_window": 0}


def test_offsets_survive_spaces_case_and_long_questions():
    context = "他说 Hello 世界，ABC公司在北京。"
    example = MrcExample("x", "问" * 10, context, (("ABC公司", context.index("ABC")),))
    tok = make_tokenizer(context.lower() + "问")
    features = MrcFeatures.encode([example], tok, max_length=64, doc_stride=8, max_query_length=3)
    assert len(features) == 1
    b = features.batch(np.array([0]))
    assert b["token_type_ids"][0].tolist()[:5] == [0, 0, 0, 0, 0] and b["token_type_ids"][0, 5] == 1  # 3 query
    s, e = int(features.start_positions[0]), int(features.end_positions[0])
    spans = features.feature_spans(0)
    assert context[spans[s, 0]:spans[e, 1]] == "ABC公司"
    with pytest.raises(ParamsError, match="no room"):
        MrcFeatures.encode([example], tok, max_length=16, doc_stride=8, max_query_length=5)


# ------------------------------------------------------------------------------------------------------------------
# Decoding


def perfect_logits(features: MrcFeatures, batch_size: int = 3, pad_junk: float = 100.0):
    """Logits peaking at each feature's labels, as ``predict`` returns them: per batch, [b, L_batch].

    Padding positions get a large junk value, which decoding must ignore.
    """
    starts, ends = [], []
    for first in range(0, len(features), batch_size):
        index = np.arange(first, min(first + batch_size, len(features)))
        mask = features.batch(index)["attention_mask"].numpy().astype(bool)
        s = np.where(mask, 0.0, pad_junk).astype(np.float32)
        e = s.copy()
        for row, f in enumerate(index):
            if features.start_positions[f]:
                s[row, features.start_positions[f]] = 10
                e[row, features.end_positions[f]] = 10
        starts.append(s)
        ends.append(e)
    return starts, ends


def test_decode_round_trip_second_window():
    answer_start = LONG.index("申酉戌")
    examples = [MrcExample("late", "问题", LONG, (("申酉戌", answer_start),)),
                MrcExample("early", "问题", LONG, (("乙丙", 1),))]
    features = MrcFeatures.encode(examples, make_tokenizer(LONG + "问题"), max_length=16, doc_stride=4)
    assert features.example_index.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    starts, ends = perfect_logits(features)
    assert decode(starts, ends, features, examples) == {"late": "申酉戌", "early": "乙丙"}
    # a single [F, L] array works too
    width = int(features.lengths.max())
    full_s = np.zeros((len(features), width), np.float32)
    full_e = np.zeros((len(features), width), np.float32)
    full_s[np.arange(len(features)), features.start_positions] = features.start_positions > 0
    full_e[np.arange(len(features)), features.end_positions] = features.end_positions > 0
    assert decode(full_s, full_e, features, examples) == {"late": "申酉戌", "early": "乙丙"}
    with pytest.raises(ValueError):
        decode(full_s[:-1], full_e[:-1], features, examples)


def test_decode_respects_order_length_and_context():
    example = MrcExample("x", "问题", LONG[:10], (("甲", 0),))
    features = MrcFeatures.encode([example], make_tokenizer(LONG + "问题"), max_length=32, doc_stride=4)
    length = int(features.lengths[0])  # [CLS] 问 题 [SEP] 10 chars [SEP]
    s, e = np.zeros((1, length)), np.zeros((1, length))
    s[0, 4 + 2], e[0, 4 + 7] = 10, 10  # span of 6 tokens: 丙..辛
    assert decode(s, e, features, [example])["x"] == LONG[2:8]
    # too long: the best allowed spans are single tokens at either peak, earlier start wins the tie
    assert decode(s, e, features, [example], max_answer_length=5)["x"] == LONG[2]
    # end before start is never chosen
    s2, e2 = np.zeros((1, length)), np.zeros((1, length))
    s2[0, 4 + 7], e2[0, 4 + 2] = 10, 9
    assert decode(s2, e2, features, [example])["x"] == LONG[7]
    # peaks on [CLS], question and [SEP] are ignored
    s3, e3 = np.zeros((1, length)), np.zeros((1, length))
    s3[0, [0, 1, 3, length - 1]] = e3[0, [0, 1, 3, length - 1]] = 50
    s3[0, 4 + 5], e3[0, 4 + 6] = 1, 1
    assert decode(s3, e3, features, [example])["x"] == LONG[5:7]
    # n_best = 1: only the top start and top end are combined
    assert decode(s, e, features, [example], n_best=1)["x"] == LONG[2:8]


def test_decode_gives_empty_answer_without_context_tokens():
    example = MrcExample("x", "问题", "", ())
    features = MrcFeatures.encode([example], make_tokenizer(LONG + "问题"), max_length=16, doc_stride=2)
    assert len(features) == 1 and features.start_positions.tolist() == [0]
    assert decode(np.zeros((1, 16)), np.zeros((1, 16)), features, [example]) == {"x": ""}


def test_end_to_end_perfect_logits_score_100(tmp_path):
    doc = squad((CTX, [("q1", "首都是哪里？", [("北京", 0)]), ("q2", "经济中心？", [("上海", 9)])]),
                (LONG, [("q3", "地支？", [("申酉戌", LONG.index("申酉戌"))]), ("q4", "季节？", [("春夏秋冬", 22)])]),
                ("他说 Hello 世界，ABC公司在北京。", [("q5", "公司？", [("ABC公司", 12)])]))
    path = write(tmp_path, doc)
    examples = read_squad(path, Issues("fail"))
    tok = make_tokenizer(json.dumps(doc, ensure_ascii=False).lower())
    features = MrcFeatures.encode(examples, tok, max_length=20, doc_stride=5)
    assert len(features) > len(examples)
    starts, ends = perfect_logits(features, batch_size=4)
    predictions = decode(starts, ends, features, examples)
    scores = evaluate(gold_answers(json.loads(path.read_text(encoding="utf-8"))), predictions)
    assert scores["em"] == 100 and scores["f1"] == 100 and scores["skipped"] == 0
    assert gold_texts(examples) == gold_answers(doc)
    out = tmp_path / "out" / "predictions.json"
    write_predictions(out, predictions)
    text = out.read_text(encoding="utf-8")
    assert json.loads(text) == predictions and "ABC公司" in text and list(json.loads(text)) == sorted(predictions)


# ------------------------------------------------------------------------------------------------------------------
# The real CMRC 2018 trial file (only where it is present beside the checkout)

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "cmrc2018" / "cmrc2018_trial.json"


@pytest.mark.skipif(not SHARED.is_file(), reason="the real CMRC 2018 trial file is not beside the checkout")
def test_real_cmrc2018_trial_file():
    issues = Issues("repair")
    examples = read_squad(SHARED, issues)
    assert len(examples) == 1002
    # five answers of TRIAL_210 give an answer_start one past the text; each is relocated one back
    assert issues.counts == {"answer_start_repaired": 5}
    assert all(m.split("#")[1].startswith("TRIAL_210_QUERY_") for m in issues.messages)
    assert all(e.context[s:s + len(t)] == t for e in examples for t, s in e.answers)
    skipped = Issues("skip")
    assert len(read_squad(SHARED, skipped)) == 997 and skipped.counts == {"answer_start_skipped": 5,
                                                                        "no_answer_skipped": 5}
    with pytest.raises(SourceError, match="cmrc2018_trial.json#TRIAL_210_QUERY_0"):
        read_squad(SHARED, Issues("fail"))
    assert gold_texts(examples) == gold_answers(json.loads(SHARED.read_text(encoding="utf-8")))


@pytest.mark.skipif(not SHARED.is_file(), reason="the real CMRC 2018 trial file is not beside the checkout")
def test_real_cmrc2018_trial_file_as_a_test_split_scores_as_the_official_script():
    raw = json.loads(SHARED.read_text(encoding="utf-8"))
    issues = Issues("fail")  # evaluation reads every answer text: nothing in the file is malformed for it
    examples = read_squad(SHARED, issues, evaluation=True)
    assert len(examples) == 1002 and not issues.counts
    official = gold_answers(raw)  # the official script's gold: every answer text as given
    assert gold_texts(examples) == official
    predictions = {e.id: e.context[:4] for e in examples}
    assert evaluate(gold_texts(examples), predictions) == evaluate(official, predictions)


def test_an_unlocatable_answer_is_scored_but_never_trained_on(tmp_path):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": "北京是首都。", "qas": [
        {"id": "q1", "question": "哪里？", "answers": [{"text": "北京", "answer_start": 0},
                                                     {"text": "北平", "answer_start": -1}]},
        {"id": "q2", "question": "谁？", "answers": [{"text": "上海", "answer_start": -1}]}]}]}]}), encoding="utf-8")
    examples = read_squad(path, Issues("fail"), evaluation=True)
    assert gold_texts(examples) == {"q1": ["北京", "北平"], "q2": ["上海"]}
    assert examples[0].answers == (("北京", 0), ("北平", UNLOCATED))
    issues = Issues("skip")
    train = located(examples, issues, "dev.json")
    assert [e.id for e in train] == ["q1"] and train[0].answers == (("北京", 0),)
    assert issues.counts == {"no_answer_skipped": 1}
    with pytest.raises(SourceError, match="dev.json#q1"):
        read_squad(path, Issues("fail"))  # read for training, the same file is malformed


@pytest.mark.skipif(not SHARED.is_file(), reason="the real CMRC 2018 trial file is not beside the checkout")
def test_real_cmrc2018_trial_windows_round_trip():
    examples = read_squad(SHARED, Issues("repair"))
    tok = make_tokenizer(SHARED.read_text(encoding="utf-8").lower())
    features = MrcFeatures.encode(examples, tok, max_length=512, doc_stride=128)
    assert len(features) > len(examples) and features.lengths.max() == 512
    labelled = np.zeros(len(examples), bool)
    labelled[features.example_index[features.start_positions > 0]] = True
    assert labelled.sum() >= 1000  # an answer longer than any window cannot be labelled
    starts, ends = perfect_logits(features, batch_size=64)
    predictions = decode(starts, ends, features, examples, max_answer_length=512)
    wrong = [e.id for e in examples if predictions[e.id] != e.answers[0][0].strip()]
    # token boundaries that cut a word (answer "AXR" inside "JAXR"), an answer longer than a window,
    # combining marks that the BERT normaliser strips at the end of a token
    assert len(wrong) <= 5, wrong


def test_literal_special_tokens_in_question_and_context_are_text():
    context = "甲乙[MASK]丙[SEP]丁"
    example = MrcExample("x", "问[SEP]", context, (("丙", context.index("丙")),))
    tok = make_tokenizer(context + "问")
    features = MrcFeatures.encode([example], tok, max_length=64, doc_stride=8)
    ids = features.batch(np.arange(1))["input_ids"][0].tolist()
    assert tok.mask_token_id not in ids
    assert ids.count(tok.sep_token_id) == 2 and ids.count(tok.cls_token_id) == 1  # only the ones the pair adds
    spans = features.feature_spans(0)
    b = features.batch(np.arange(1))
    s, e = int(b["start_positions"][0]), int(b["end_positions"][0])
    assert context[spans[s, 0]:spans[e, 1]] == "丙"
