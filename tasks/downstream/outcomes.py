"""Per-example outcomes of a fine-tuned run: the counts a task's headline metric is computed from, one
row per test example, so that a statistic can resample examples and recompute the metric exactly
(:mod:`tasks.report.statistics`; :func:`tasks.report.outcomes.metric_of` gives the function of their sums).

Stage ``finetune`` writes them beside its metrics (``metrics/outcomes/<model>-<task>.parquet``, small
and tracked by git), so that the report's statistics and a study's committed units
(:mod:`tasks.orchestration.units`) need neither the predictions nor the test data.

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
import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.core.io import write_parquet
from tasks.downstream import cmrc_metric

COUNTED = {"mrc": ("em", "f1", "average"), "ner": ("f1", "precision", "recall"),
           "classification": ("accuracy", "f1", "macro_f1")}
"""Family -> the metrics that have per-example outcomes."""
CLASSIC = "classic"
"""The model name of a task's classic baseline in ``metrics/outcomes/<model>-<task>.parquet`` (stage ``baseline``;
one run, fine-tuning seed 0)."""


def _ner_entities(tags: list[str]) -> set:
    from seqeval.scheme import IOB2, Entities  # seqeval's own strict reading, as finetune's scores

    return {(e.start, e.end, e.tag) for e in Entities([tags], IOB2, suffix=False).entities[0]}


def counts(family: str, metric: str, table: pa.Table, predictions) -> np.ndarray:
    """The per-example counts ``float64 [N, k]`` of one run's predictions on ``table`` (a test
    split, in its stored order) for ``metric`` (layout: module docstring).

    Args:
        predictions: what finetune predicts for the split: rows ``{id, label, prediction}``
            (classification) or ``{id, tokens, gold, prediction}`` (NER), or ``{id: answer}`` (MRC).
    Raises:
        ValueError: a metric that is no function of per-example counts, or predictions that do not
            cover the split's examples in order.
    """
    if metric not in COUNTED[family]:
        raise ValueError(f"{family} metric {metric!r} has no per-example outcomes")
    ids = table.column("id").to_pylist()
    if family == "mrc":
        answers = {row["id"]: [a["text"] for a in row["answers"]] for row in table.to_pylist()}
        em = np.array([cmrc_metric.exact_match(answers[i], predictions[i]) if i in predictions else 0.0 for i in ids])
        f1 = np.array([cmrc_metric.f1_score(answers[i], predictions[i]) if i in predictions else 0.0 for i in ids])
        score = {"em": em, "f1": f1, "average": (em + f1) / 2}[metric]
        return np.stack([100 * score, np.ones_like(score)], -1)
    if [row["id"] for row in predictions] != ids:
        raise ValueError("the predictions do not list the split's examples in its order")
    if family == "ner":
        rows = []
        for row in predictions:
            gold, pred = _ner_entities(row["gold"]), _ner_entities(row["prediction"])
            rows.append([len(gold & pred), len(pred), len(gold)])
        return np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    gold = np.array([row["label"] for row in predictions])
    pred = np.array([row["prediction"] for row in predictions])
    if metric == "accuracy":
        return np.stack([(gold == pred).astype(np.float64), np.ones(len(gold))], -1)
    if metric == "f1":
        return np.stack([(pred == 1) & (gold == 1), pred == 1, gold == 1], -1).astype(np.float64)
    classes = np.unique(gold)
    c = np.stack([np.stack([(pred == k) & (gold == k), pred == k, gold == k], -1) for k in classes], 1)
    return c.reshape(len(gold), -1).astype(np.float64)


def write_outcomes(path: Path, family: str, metric: str, by_seed: dict[int, np.ndarray]) -> None:
    """``{fine-tuning seed: counts [N, k]}`` (:func:`counts`) as one Parquet table at ``path``: a row per
    seed and example (seeds in the given order, examples in the split's), columns ``seed``, ``c0`` ...
    ``c<k-1>``; the family and metric in its schema metadata. No seeds (a metric without outcomes): no rows."""
    seeds = list(by_seed)
    stacked = np.concatenate([by_seed[s] for s in seeds]) if seeds else np.zeros((0, 0))
    columns = {"seed": pa.array(np.repeat(seeds, [len(by_seed[s]) for s in seeds]), pa.int64()),
               **{f"c{i}": pa.array(stacked[:, i], pa.float64()) for i in range(stacked.shape[1])}}
    write_parquet(path, pa.table(columns).replace_schema_metadata({"family": family, "metric": metric}))


def read_outcomes(path: Path, seeds: list[int]) -> tuple[str, str, np.ndarray]:
    """``(family, metric, counts [F, N, k])`` of the fine-tuning ``seeds`` (in that order) that
    :func:`write_outcomes` wrote at ``path``.

    Raises:
        SourceError: the file is missing or unreadable, or lacks a seed (it names the file and what stage
            writes it).
    """
    try:
        table = pq.read_table(path)
        meta = table.schema.metadata
        family, metric = meta[b"family"].decode(), meta[b"metric"].decode()
        found = table.column("seed").to_numpy()
        values = np.stack([table.column(f"c{i}").to_numpy() for i in range(table.num_columns - 1)], -1)
        runs = [values[found == s] for s in seeds]
        if any(not len(r) for r in runs) or len({len(r) for r in runs}) != 1:
            raise ValueError(f"no outcomes for fine-tuning seed(s) {[s for s, r in zip(seeds, runs) if not len(r)]}")
    except FileNotFoundError:
        raise SourceError(f"{path} is missing: stage finetune writes it (dvc repro finetune)") from None
    except (OSError, KeyError, TypeError, ValueError, pa.ArrowException) as exc:
        raise SourceError(f"{path}: not finetune's per-example outcomes ({exc}); rerun finetune") from None
    return family, metric, np.stack(runs)
