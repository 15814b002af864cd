"""The CMRC 2018 metric on hand-worked cases; each expected value is derived in the comment
from the official script's rules (mixed segmentation, longest common contiguous run, EM after
punctuation removal, max over gold answers, unanswered = 0)."""

import json
from pathlib import Path

import pytest

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
