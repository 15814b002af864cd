"""Per-example outcomes of a fine-tuned run: the counts a task's headline metric is computed from, one
row per test example, so that a statistic can resample examples and recompute the metric exactly
(:mod:`tasks.report.statistics`; the family's :class:`Reduction` is the function of their sums).
Each family computes its runs' counts (``Family.counts``) and says how they sum to each metric
(``Family.counted``, a :class:`Reduction`).

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
regression pearson              x, y, x², y², xy, 1 (centred scores)        Pearson's r
==============================  ==========================================  ====================

NER entities are those of ``seqeval`` in strict IOB2 mode, which finetune's scores use. Metrics
that are no function of counts (Matthews correlation, Spearman's ranks) have no outcomes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.core.io import write_parquet

CLASSIC = "classic"
"""The model name of a task's classic baseline in ``metrics/outcomes/<model>-<task>.parquet`` (stage ``baseline``;
one run, fine-tuning seed 0)."""


@dataclass(frozen=True)
class Reduction:
    """How per-example counts ``[N, k]`` summed over examples give a metric (module docstring), and the
    function itself: ``reduction(sums[..., k]) -> values[...]`` (what the report's statistics resample).
    ``ratio``: ``Σ c[numerator] / Σ c[denominator]`` (a mean of per-example scores, precision, recall);
    ``f1``: ``2 Σ c0 / (Σ c1 + Σ c2)`` (TP, predicted, gold); ``macro_f1``: the mean of that F1 over the
    classes, laid out ``[TP, predicted, gold]`` each; ``pearson``: Pearson's r from the moments
    ``[x, y, x², y², xy, 1]`` (:func:`moment_counts`). A family's :attr:`counted` maps its metrics to these."""

    kind: Literal["ratio", "f1", "macro_f1", "pearson"]
    numerator: int = 0
    denominator: int = 1

    def __call__(self, sums: np.ndarray) -> np.ndarray:
        tiny = 1e-300
        if self.kind == "ratio":
            return sums[..., self.numerator] / np.maximum(sums[..., self.denominator], tiny)
        if self.kind == "f1":
            return 2 * sums[..., 0] / np.maximum(sums[..., 1] + sums[..., 2], tiny)
        if self.kind == "macro_f1":
            s = sums.reshape(*sums.shape[:-1], sums.shape[-1] // 3, 3)
            return (2 * s[..., 0] / np.maximum(s[..., 1] + s[..., 2], tiny)).mean(-1)
        x, y, xx, yy, xy, n = np.moveaxis(sums, -1, 0)
        cov, var_x, var_y = n * xy - x * y, n * xx - x * x, n * yy - y * y
        return cov / np.sqrt(np.maximum(var_x * var_y, tiny))


MEAN, F1, MACRO_F1, PEARSON = Reduction("ratio"), Reduction("f1"), Reduction("macro_f1"), Reduction("pearson")


def mean_counts(score: np.ndarray) -> np.ndarray:
    """``[N, 2]`` counts of per-example scores ``[N]`` (accuracy, exact match, MRC F1): the score and 1."""
    return np.stack([np.asarray(score, dtype=np.float64), np.ones(len(score))], -1)


def moment_counts(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``[N, 6]`` counts of Pearson's r (:data:`PEARSON`) between scores ``x`` and ``y`` ``[N]``:
    ``[x, y, x², y², xy, 1]``, each centred on its mean over the ``N`` first (r is unchanged by a shift;
    centring keeps the sums of squares from cancelling)."""
    x = np.asarray(x, dtype=np.float64) - np.mean(x)
    y = np.asarray(y, dtype=np.float64) - np.mean(y)
    return np.stack([x, y, x * x, y * y, x * y, np.ones(len(x))], -1)


def f1_counts(correct: np.ndarray, predicted: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """``[N, 3]`` counts of an F1 (:data:`F1`): per example, its correct, predicted and gold items."""
    return np.stack([correct, predicted, gold], -1).astype(np.float64).reshape(-1, 3)


def in_order(table: pa.Table, rows: list[dict]) -> None:
    """Raises ValueError: prediction ``rows`` (``{id, ...}``) that do not list ``table``'s examples in its order."""
    if [row["id"] for row in rows] != table.column("id").to_pylist():
        raise ValueError("the predictions do not list the split's examples in its order")


def write_outcomes(path: Path, family: str, metric: str, by_seed: dict[int, np.ndarray]) -> None:
    """``{fine-tuning seed: counts [N, k]}`` (a family's ``counts``) as one Parquet table at ``path``: a row per
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
