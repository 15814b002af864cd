"""The CMRC 2018 metric on hand-worked cases; each expected value is derived in the comment
from the official script's rules (mixed segmentation, longest common contiguous run, EM after
punctuation removal, max over gold answers, unanswered = 0)."""

import json
from pathlib import Path

import pytest

from tasks.downstream import cmrc_metric
from tasks.downstream.cmrc_metric import evaluate, exact_match, f1_score, gold_answers, longest_common_run, mixed_segmentation

CASES = [
    # (gold answers, prediction, EM, F1)
    (["北京"], "北京", 1, 1.0),
    # [北 京 大 学] vs [北 京]: run 2, P 2/2, R 2/4 -> 2/3
    (["北京大学"], "北京", 0, 2 / 3),
    # 《》 are removed for both EM and F1
    (["《红楼梦》"], "红楼梦", 1, 1.0),
    # several gold answers: any exact one wins
    (["1998年", "一九九八年"], "一九九八年", 1, 1.0),
    # lower-cased; Latin runs are word-tokenised: [windows, 98]
    (["Windows 98"], "windows 98", 1, 1.0),
    # [微 软 windows 98 系 统] vs [windows 98]: run 2, P 1, R 1/3 -> 0.5
    (["微软Windows 98系统"], "Windows 98", 0, 0.5),
    # empty prediction
    (["北京"], "", 0, 0.0),
    # contiguous, not subsequence: [甲 乙 丙 丁] vs [甲 丙 丁]: run 丙丁 = 2, P 2/3, R 2/4 -> 4/7
    (["甲乙丙丁"], "甲丙丁", 0, 4 / 7),
    # "3.5" stays one token: [3.5 公 里] vs [3.5]: P 1, R 1/3 -> 0.5
    (["3.5公里"], "3.5", 0, 0.5),
    # "-" is listed punctuation: removed for EM and F1
    (["中-美"], "中美", 1, 1.0),
    # a space is not removed for EM (so no exact match) but vanishes in segmentation (F1 = 1)
    (["北京 大学"], "北京大学", 0, 1.0),
    # case-insensitive
    (["NBA"], "nba", 1, 1.0),
    # longer prediction: [清 华] vs [清 华 大 学 的]: P 2/5, R 1 -> 4/7
    (["清华"], "清华大学的", 0, 4 / 7),
    # surrounding whitespace is stripped
    (["北京"], "  北京 ", 1, 1.0),
    # [it 's] vs [it is]: run 1, P 1/2, R 1/2 -> 0.5
    (["it's"], "it is", 0, 0.5),
    # · is removed: [卡 尔 马 克 思] vs [马 克 思]: P 1, R 3/5 -> 0.75
    (["卡尔·马克思"], "马克思", 0, 0.75),
    # max over gold: vs 北京大学 4/7, vs 北京: P 2/3 R 1 -> 0.8
    (["北京大学", "北京"], "北京市", 0, 0.8),
    # 〇 (U+3007) is outside U+4E00-U+9FA5: "〇〇" is one non-Chinese token: [一 九 〇〇 年]
    (["一九〇〇年"], "一九〇〇年", 1, 1.0),
    # ... so [一 九 〇 年] shares only the run 一九: P 2/4, R 2/4 -> 0.5
    (["一九〇〇年"], "一九〇年", 0, 0.5),
    # quirk: "……" is listed as one item, so a single "…" is not punctuation: no EM;
    # [好 …] vs [好]: P 1, R 1/2 -> 2/3
    (["好…"], "好", 0, 2 / 3),
    # quirk: ’ is listed, ‘ is not: ‘ stays -> no EM; [‘ 好] vs [好]: P 1, R 1/2 -> 2/3
    (["‘好’"], "好", 0, 2 / 3),
    # Chinese punctuation inside: [我 们 走] vs [我 们]: P 1, R 2/3 -> 0.8
    (["我们，走！"], "我们", 0, 0.8),
    # mixed Chinese and numbers, partial overlap: [第 3 届] vs [3 届 会 议]: run [3 届] = 2, P 2/4, R 2/3 -> 4/7
    (["第3届"], "3届会议", 0, 4 / 7),
    # no overlap at all
    (["上海"], "北京", 0, 0.0),
    # The trained English punkt model keeps the abbreviations "inc." and "mr." whole inside a
    # run (an untrained punkt splits off the period); each F1 below differs under that split.
    # [apple inc. ltd 公 司] vs [apple inc. ltd]: run 3, P 1, R 3/5 -> 0.75 (split: R 4/6 -> 0.8)
    (["Apple Inc. Ltd 公司"], "Apple Inc. Ltd", 0, 0.75),
    # [apple inc. ltd] vs [apple inc]: "inc." != "inc", run [apple] = 1, P 1/2, R 1/3 -> 0.4 (split: 2/3)
    (["Apple Inc. Ltd"], "Apple Inc", 0, 0.4),
    # [mr. 10 号] vs [10 号]: run 2, P 1, R 2/3 -> 0.8 (split [mr . 10 号]: R 2/4 -> 2/3)
    (["Mr. 10号"], "10号", 0, 0.8),
    # [mr. 10 号] vs [mr]: "mr." != "mr", no common segment -> 0 (split: P 1, R 1/4 -> 0.4)
    (["Mr. 10号"], "Mr", 0, 0.0),
    (["Mr. 10号"], "mr. 10号", 1, 1.0),
]


@pytest.mark.parametrize("answers,prediction,em,f1", CASES)
def test_hand_worked(answers, prediction, em, f1):
    assert exact_match(answers, prediction) == em
    assert f1_score(answers, prediction) == pytest.approx(f1)


def test_segmentation():
    assert mixed_segmentation("微软Windows 98系统") == ["微", "软", "windows", "98", "系", "统"]
    assert mixed_segmentation("《红楼梦》") == ["《", "红", "楼", "梦", "》"]
    assert mixed_segmentation("《红楼梦》", remove_punctuation=True) == ["红", "楼", "梦"]
    assert mixed_segmentation("Hello, world. It's 3.5 km") == ["hello", ",", "world", ".", "it", "'s", "3.5", "km"]


def test_trained_punkt_keeps_english_abbreviations_whole():
    assert mixed_segmentation("Apple Inc. Ltd 公司") == ["apple", "inc.", "ltd", "公", "司"]
    assert mixed_segmentation("Mr. 10号") == ["mr.", "10", "号"]
    # a final period is still split off by the word tokenizer, abbreviation or not
    assert mixed_segmentation("Apple Inc.") == ["apple", "inc", "."]


def test_punkt_model_is_nltks_english_punkt_tab():
    """Fingerprint of NLTK's English punkt_tab model: table sizes and a few entries as in
    tokenizers/punkt_tab/english/{abbrev_types.txt,collocations.tab,sent_starters.txt,ortho_context.tab}."""
    from punkt.data import english

    # sizes from the package (the tokenizer's ortho_context, a defaultdict as in NLTK, grows on lookups)
    assert (len(english.ABBREV_TYPES), len(english.COLLOCATIONS), len(english.SENT_STARTERS),
            len(english.ORTHO_CONTEXT)) == (156, 37, 39, 20366)
    params = cmrc_metric._word_tokenizers()[0]._params
    assert {"inc", "ltd", "mr", "mrs", "dr", "u.s", "ph.d"} <= params.abbrev_types
    assert ("##number##", "international") in params.collocations and "however" in params.sent_starters
    assert params.ortho_context["him"] == 96 and params.ortho_context["never-seen-word"] == 0


def _write_punkt_tab(params, lang_dir: Path) -> None:
    """The four punkt_tab files NLTK's own loader (load_punkt_params) reads."""
    lang_dir.mkdir(parents=True)
    (lang_dir / "abbrev_types.txt").write_text("\n".join(sorted(params.abbrev_types)), encoding="utf-8")
    (lang_dir / "sent_starters.txt").write_text("\n".join(sorted(params.sent_starters)), encoding="utf-8")
    (lang_dir / "collocations.tab").write_text("\n".join(f"{a}\t{b}" for a, b in sorted(params.collocations)),
                                               encoding="utf-8")
    (lang_dir / "ortho_context.tab").write_text(
        "\n".join(f"{w}\t{n}" for w, n in sorted(params.ortho_context.items())), encoding="utf-8")


TEXTS = ["apple inc. ltd ", "mr. 10", "dr. smith went to washington. he met mrs. jones.", "u.s. 3.5 km, e.g. foo",
         "it's mr. x's car. the end", "hello, world. it's 3.5 km", "  ", "〇〇"]


def test_word_tokenize_equals_nltk_word_tokenize_with_the_same_model(tmp_path, monkeypatch):
    """Built by hand, the tokenizer equals nltk.word_tokenize loading the same model as punkt_tab files."""
    import nltk
    from nltk.tokenize import _get_punkt_tokenizer

    _write_punkt_tab(cmrc_metric._word_tokenizers()[0]._params, tmp_path / "tokenizers" / "punkt_tab" / "english")
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    _get_punkt_tokenizer.cache_clear()
    try:
        for text in TEXTS:
            assert cmrc_metric._word_tokenize(text) == nltk.word_tokenize(text), text
    finally:
        _get_punkt_tokenizer.cache_clear()


def test_tokenizer_needs_no_nltk_data_and_no_unpickling(tmp_path, monkeypatch):
    import pickle

    import nltk

    def refuse(*args, **kwargs):
        raise AssertionError("unpickling attempted")

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])  # no punkt data anywhere
    for name in ("load", "loads", "Unpickler"):
        monkeypatch.setattr(pickle, name, refuse)
    cmrc_metric._word_tokenizers.cache_clear()
    try:
        assert cmrc_metric._word_tokenize("mr. 10") == ["mr.", "10"]
    finally:
        cmrc_metric._word_tokenizers.cache_clear()


def test_longest_common_run_is_contiguous():
    assert longest_common_run(list("abcde"), list("xbcdy")) == 3
    assert longest_common_run(list("abcd"), list("acbd")) == 1
    assert longest_common_run([], list("ab")) == 0


def test_corpus_scores_count_unanswered_as_zero():
    gold = {"q1": ["北京"], "q2": ["北京大学"], "q3": ["上海"]}
    scores = evaluate(gold, {"q1": "北京", "q2": "北京"})
    assert scores["em"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)
    assert scores["average"] == pytest.approx((scores["em"] + scores["f1"]) / 2)
    assert scores["total"] == 3 and scores["skipped"] == 1


SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "cmrc2018" / "cmrc2018_trial.json"


@pytest.mark.skipif(not SHARED.is_file(), reason="the real CMRC 2018 trial file is not beside the checkout")
def test_real_cmrc2018_trial_file():
    gold = gold_answers(json.loads(SHARED.read_text(encoding="utf-8")))
    assert len(gold) == 1002
    first = {qid: answers[0] for qid, answers in gold.items()}
    perfect = evaluate(gold, first)
    assert perfect["em"] == 100 and perfect["f1"] == 100 and perfect["skipped"] == 0
    nothing = evaluate(gold, {})
    assert nothing["em"] == 0 and nothing["skipped"] == 1002
    halves = evaluate(gold, {qid: a[: max(1, len(a) // 2)] for qid, a in first.items()})
    assert halves["em"] < 5 and 40 < halves["f1"] < 90  # half an answer: partial credit, rarely exact
