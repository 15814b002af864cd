"""Per-example outcomes (tasks/downstream/outcomes.py, tasks/report/outcomes.py): the counts finetune writes
give back each family's own metric exactly, survive their file, and a bad file is named."""

import numpy as np
import pyarrow as pa
import pytest
from seqeval.metrics import f1_score as seqeval_f1
from seqeval.scheme import IOB2
from sklearn.metrics import accuracy_score, f1_score

from tasks.core.errors import SourceError
from tasks.downstream import cmrc_metric
from tasks.downstream.families import FAMILIES
from tasks.downstream.outcomes import read_outcomes, write_outcomes
from tasks.report.outcomes import metric_of, run_counts

RNG = np.random.default_rng(0)


def _metric(family, metric, c):
    return float(metric_of(family, metric)(c.sum(0)))


@pytest.mark.parametrize("metric", ["accuracy", "f1", "macro_f1"])
def test_classification_counts_give_scikit_learns_metric(metric):
    gold, pred = RNG.integers(0, 3 if metric == "macro_f1" else 2, (2, 200))
    table = pa.table({"id": [str(i) for i in range(200)]})
    rows = [{"id": str(i), "label": int(g), "prediction": int(p)} for i, (g, p) in enumerate(zip(gold, pred))]
    expected = {"accuracy": lambda: accuracy_score(gold, pred), "f1": lambda: f1_score(gold, pred, zero_division=0),
                "macro_f1": lambda: f1_score(gold, pred, average="macro", zero_division=0)}[metric]()
    counted = FAMILIES["classification"].counts(metric, table, rows)
    assert _metric("classification", metric, counted) == pytest.approx(expected)


def test_ner_counts_give_seqevals_strict_entity_f1():
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG"]
    gold = [list(RNG.choice(tags, 12)) for _ in range(60)]
    pred = [[t if RNG.random() < 0.7 else RNG.choice(tags) for t in g] for g in gold]
    rows = [{"id": str(i), "tokens": ["字"] * 12, "gold": g, "prediction": p} for i, (g, p) in enumerate(zip(gold, pred))]
    c = FAMILIES["ner"].counts("f1", pa.table({"id": [str(i) for i in range(60)]}), rows)
    assert _metric("ner", "f1", c) == pytest.approx(seqeval_f1(gold, pred, mode="strict", scheme=IOB2))


def test_mrc_counts_give_the_official_cmrc_scores():
    answers = [[{"text": "北京", "start": 0}], [{"text": "上海市", "start": 0}, {"text": "上海", "start": 0}],
               [{"text": "长江", "start": 0}]]
    table = pa.table({"id": ["q1", "q2", "q3"], "question": ["首都？", "城市？", "河流？"],
                      "context": ["北京", "上海市", "长江"], "answers": answers})
    predictions = {"q1": "北京", "q2": "上海", "q3": "黄河"}  # q3 wrong; a missing id would score 0
    gold = {row["id"]: [a["text"] for a in row["answers"]] for row in table.to_pylist()}
    official = cmrc_metric.evaluate(gold, predictions)
    for metric in ("em", "f1"):
        counted = FAMILIES["mrc"].counts(metric, table, predictions)
        assert _metric("mrc", metric, counted) == pytest.approx(official[metric])


def test_outcomes_round_trip_through_their_file_and_bad_ones_are_named(tmp_path):
    by_seed = {2: RNG.integers(0, 3, (50, 3)).astype(float), 1: RNG.integers(0, 3, (50, 3)).astype(float)}
    path = tmp_path / "mlm-42-msra_ner.parquet"
    write_outcomes(path, "ner", "f1", by_seed)
    family, metric, c = read_outcomes(path, [1, 2])
    assert (family, metric) == ("ner", "f1") and np.array_equal(c, np.stack([by_seed[1], by_seed[2]]))
    again = tmp_path / "again.parquet"
    write_outcomes(again, "ner", "f1", by_seed)
    assert again.read_bytes() == path.read_bytes()  # deterministic: git-tracked beside the metrics
    c, reduce, family = run_counts(path, [2])
    assert reduce(c.sum(1))[0] == pytest.approx(2 * by_seed[2][:, 0].sum() / by_seed[2][:, 1:].sum())
    with pytest.raises(SourceError, match=r"mlm-42-msra_ner\.parquet: .*fine-tuning seed\(s\) \[3\]"):
        read_outcomes(path, [1, 3])
    with pytest.raises(SourceError, match=r"missing\.parquet is missing: stage finetune writes it"):
        read_outcomes(tmp_path / "missing.parquet", [1])
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(SourceError, match=r"bad\.parquet: not finetune's per-example outcomes"):
        read_outcomes(tmp_path / "bad.parquet", [1])


def test_metrics_without_per_example_outcomes_are_refused():
    with pytest.raises(ValueError, match="matthews"):
        FAMILIES["classification"].counts("matthews", pa.table({"id": ["a"]}), [])
    with pytest.raises(ValueError, match="spearman"):
        metric_of("classification", "spearman")
