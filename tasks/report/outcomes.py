"""The report's view of the per-example outcomes finetune wrote (:mod:`tasks.downstream.outcomes`):
each run's counts read back, with the function of their sums that gives the metric."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.downstream.outcomes import read_outcomes
from tasks.report.statistics import Metric, f1_of, macro_f1_of, mean_of


def metric_of(family: str, metric: str, width: int) -> Metric:
    """The function of summed counts that gives ``metric`` of ``family`` from rows of ``width`` counts
    (the layout of :func:`tasks.downstream.outcomes.counts`).

    Raises:
        ValueError: a metric with no per-example outcomes.
    """
    if family == "mrc" or metric == "accuracy":
        return mean_of()
    if family == "ner":
        reduce = {"f1": f1_of(), "precision": mean_of(0, 1), "recall": mean_of(0, 2)}.get(metric)
    else:
        reduce = {"f1": f1_of(), "macro_f1": macro_f1_of(width // 3)}.get(metric)
    if reduce is None:
        raise ValueError(f"{family} metric {metric!r} has no per-example outcomes")
    return reduce


def run_counts(path: Path, seeds: list[int]) -> tuple[np.ndarray, Metric, str]:
    """``(counts [F, N, k], metric, family)`` of one fine-tuned model's test outcomes
    (``metrics/outcomes/<model>-<task>.parquet``) for the fine-tuning ``seeds``.

    Raises:
        SourceError: the file is missing, unreadable or lacks a seed.
    """
    family, metric, c = read_outcomes(path, seeds)
    return c, metric_of(family, metric, c.shape[-1]), family
