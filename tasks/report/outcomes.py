"""The report's view of the per-example outcomes finetune wrote (:mod:`tasks.downstream.outcomes`):
each run's counts read back, with the function of their sums that gives the metric."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.downstream.families import FAMILIES
from tasks.downstream.outcomes import read_outcomes
from tasks.report.statistics import Metric


def metric_of(family: str, metric: str) -> Metric:
    """The function of summed counts that gives ``metric`` of ``family``: the family's
    :class:`~tasks.downstream.outcomes.Reduction` of it (:mod:`tasks.downstream.outcomes`).

    Raises:
        ValueError: a metric with no per-example outcomes.
    """
    reduction = FAMILIES[family].counted.get(metric)
    if reduction is None:
        raise ValueError(f"{family} metric {metric!r} has no per-example outcomes")
    return reduction


def run_counts(path: Path, seeds: list[int]) -> tuple[np.ndarray, Metric, str]:
    """``(counts [F, N, k], metric, family)`` of one fine-tuned model's test outcomes
    (``metrics/outcomes/<model>-<task>.parquet``) for the fine-tuning ``seeds``.

    Raises:
        SourceError: the file is missing, unreadable or lacks a seed.
    """
    family, metric, c = read_outcomes(path, seeds)
    return c, metric_of(family, metric), family
