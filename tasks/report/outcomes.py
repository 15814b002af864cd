"""Per-example outcomes of a fine-tuned run: the counts a task's metric is computed from, one row
per test example, so that a statistic can resample examples and recompute the metric exactly
(:mod:`tasks.report.statistics`, whose metric builders they use).

Each metric is a function of its counts summed over examples, in the unit finetune records it
(classification and NER: fractions; MRC: the official script's percentages):

==============================  ==========================================  ====================
metric                          counts per example                          metric of the sums
==============================  ==========================================  ====================
accuracy; MRC em, f1, average   the example's score, 1                      mean
classification f1 (class 1)     TP, predicted 1, gold 1                     2 TP / (pred + gold)
macro_f1                        per class: TP, predicted, gold              mean of the F1s
NER f1 / precision / recall     entities: correct, predicted, gold          micro F1 / P / R
==============================  ==========================================  ====================

NER entities are those of ``seqeval`` in strict IOB2 mode, which finetune's scores use. Metrics
that are no function of counts (Matthews correlation, Pearson, Spearman) have no outcomes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from tasks.core.io import read_json, read_jsonl
from tasks.downstream import cmrc_metric
from tasks.report.statistics import Metric, f1_of, macro_f1_of, mean_of


def _ner_entities(tags: list[str]) -> set:
    from seqeval.scheme import IOB2, Entities  # seqeval's own strict reading, as finetune's scores

    return {(e.start, e.end, e.tag) for e in Entities([tags], IOB2, suffix=False).entities[0]}


def counts(family: str, metric: str, table: pa.Table, predictions) -> tuple[np.ndarray, Metric]:
    """The per-example counts ``float64 [N, k]`` of one run's predictions on ``table`` (a test
    split, in its stored order) for ``metric``, and the function of their sums that gives it.

    Args:
        predictions: what finetune wrote for the split: rows ``{id, label, prediction}``
            (classification) or ``{id, tokens, gold, prediction}`` (NER), or ``{id: answer}`` (MRC).
    Raises:
        ValueError: a metric that is no function of per-example counts, or predictions that do not
            cover the split's examples in order.
    """
    ids = table.column("id").to_pylist()
    if family == "mrc":
        answers = {row["id"]: [a["text"] for a in row["answers"]] for row in table.to_pylist()}
        em = np.array([cmrc_metric.exact_match(answers[i], predictions[i]) if i in predictions else 0.0 for i in ids])
        f1 = np.array([cmrc_metric.f1_score(answers[i], predictions[i]) if i in predictions else 0.0 for i in ids])
        score = {"em": em, "f1": f1, "average": (em + f1) / 2}.get(metric)
        if score is None:
            raise ValueError(f"MRC metric {metric!r} has no per-example outcomes")
        return np.stack([100 * score, np.ones_like(score)], -1), mean_of()
    if [row["id"] for row in predictions] != ids:
        raise ValueError("the predictions do not list the split's examples in its order")
    if family == "ner":
        rows = []
        for row in predictions:
            gold, pred = _ner_entities(row["gold"]), _ner_entities(row["prediction"])
            rows.append([len(gold & pred), len(pred), len(gold)])
        c = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
        reduce = {"f1": f1_of(), "precision": mean_of(0, 1), "recall": mean_of(0, 2)}.get(metric)
        if reduce is None:
            raise ValueError(f"NER metric {metric!r} has no per-example outcomes")
        return c, reduce
    gold = np.array([row["label"] for row in predictions])
    pred = np.array([row["prediction"] for row in predictions])
    if metric == "accuracy":
        return np.stack([(gold == pred).astype(np.float64), np.ones(len(gold))], -1), mean_of()
    if metric == "f1":
        return np.stack([(pred == 1) & (gold == 1), pred == 1, gold == 1], -1).astype(np.float64), f1_of()
    if metric == "macro_f1":
        classes = np.unique(gold)
        c = np.stack([np.stack([(pred == k) & (gold == k), pred == k, gold == k], -1) for k in classes], 1)
        return c.reshape(len(gold), -1).astype(np.float64), macro_f1_of(len(classes))
    raise ValueError(f"classification metric {metric!r} has no per-example outcomes")


def run_counts(family: str, metric: str, table: pa.Table, folder: Path, seed: int) -> tuple[np.ndarray, Metric]:
    """:func:`counts` of the test predictions finetune wrote for fine-tuning seed ``seed`` in
    ``folder`` (``results/finetune/<model>-<task>``).

    Raises:
        SourceError: the predictions file is missing or unreadable.
        ValueError: as :func:`counts`.
    """
    predictions = read_json(folder / f"test-seed{seed}.json") if family == "mrc" else \
        read_jsonl(folder / f"test-seed{seed}.jsonl")
    return counts(family, metric, table, predictions)
