"""Metrics of the downstream tasks: their data (``downstream``) and fine-tuning (``finetune``),
with the score blocks the interpretability stages share.

Scale: MRC scores (``em``, ``f1``, ``average``) are percentages (0-100), as the official
CMRC 2018 script gives them; classification (scikit-learn) and NER (seqeval) scores are
fractions (0-1). The report brings both to fractions (:func:`tasks.report.finetune.as_fractions`).
"""

from __future__ import annotations

from typing import Literal

from tasks.core.metrics.base import Metrics, Record, absent
from tasks.core.params.downstream import TaskFamily as Family, Training


class Malformed(Record):
    """Records that break the format (:class:`tasks.core.quality.Issues`)."""

    policy: Literal["fail", "skip", "repair"]
    counts: dict[str, int]
    """``<kind>_<action>`` -> records."""
    examples: list[str]
    """The first messages (``file:line: problem -> action``)."""


class Deduplication(Record):
    """Polarity files: exact-duplicate texts collapsed, texts with conflicting labels dropped."""

    lines: int
    unique_texts: int
    duplicate_lines: int
    conflicting_texts_dropped: int
    examples: int


class DownstreamMetrics(Metrics):
    """Stage ``downstream@<task>``: the task's splits after splitting and capping."""

    file = "downstream/<task>.json"
    rows: dict[str, int]
    """Split -> examples (MRC: questions)."""
    malformed: Malformed
    labels: dict[str, dict[str, int]] = absent()
    """Classification: split -> label -> examples."""
    entities: dict[str, dict[str, int]] = absent()
    """NER: split -> entity type -> entities."""
    sentences: dict[str, int] = absent()
    """NER read as MRC: split -> sentences (before each became one question per entity type)."""
    deduplication: Deduplication = absent()


class EntityScores(Record):
    precision: float
    recall: float
    f1: float
    support: int
    """Gold entities of the type."""


class Scores(Record):
    """The scores of one evaluation, by metric name: the task's ``metrics`` (params) only, so
    the others are absent. Percentages for MRC, fractions otherwise (module docstring)."""

    accuracy: float = absent()
    f1: float = absent()
    """Classification: binary F1 of class 1; NER: entity-level micro F1; MRC: character F1 (%)."""
    macro_f1: float = absent()
    matthews: float = absent()
    pearson: float = absent()
    spearman: float = absent()
    em: float = absent()
    """MRC exact match (%)."""
    average: float = absent()
    """MRC: (em + f1) / 2 (%)."""
    precision: float = absent()
    recall: float = absent()
    per_type: dict[str, EntityScores] = absent()
    """NER: entity type -> scores."""

    def items(self) -> list[tuple[str, float]]:
        """``(metric, score)`` of the metrics present, in declaration order (``per_type`` aside)."""
        return [(name, value) for name in type(self).model_fields
                if name != "per_type" and (value := getattr(self, name)) is not None]

    def __getitem__(self, metric: str) -> float:
        """The score of ``metric`` (``scores[headline]``); KeyError when the run has none."""
        if metric not in self:
            raise KeyError(metric)
        return getattr(self, metric)

    def __contains__(self, metric: str) -> bool:
        return metric in type(self).model_fields and metric != "per_type" and getattr(self, metric) is not None


class SeedSummary(Record):
    """A score over the seeds, in the score's unit."""

    mean: float
    std: float
    """Sample standard deviation (ddof=1; 0 for one seed)."""
    max: float
    min: float
    n: int
    """Seeds."""


class DevPoint(Record):
    """One point of a fine-tune's dev curve."""

    epoch: float
    step: int
    dev: float
    """The headline metric on dev (the task's unit)."""


class FitSummary(Record):
    """What :func:`tasks.downstream.finetune.fit` returns."""

    steps: int
    examples: int
    """Examples trained on (all epochs)."""
    train_loss: float
    """Mean loss of the last 10% of the steps."""
    wall_sec: float
    """Wall-clock seconds of training (2 decimals)."""
    examples_per_sec: float
    """Examples per wall-clock second (1 decimal)."""
    threads: int = absent()
    """Intra-op threads of the process that trained (absent in runs from before it was written)."""
    dev_curve: list[DevPoint] = absent()
    """The headline metric on dev at the end of each epoch and of training (absent in runs from before it was
    written)."""
    best_step: int = absent()
    """The step whose weights were kept: the first best point of ``dev_curve``."""


class FinetuneRun(Record):
    """One seed of ``finetune``."""

    seed: int
    train: FitSummary
    dev: Scores
    test: Scores

    def scores(self, split: str) -> Scores:
        """The scores of ``split`` (``dev`` or ``test``)."""
        return {"dev": self.dev, "test": self.test}[split]


class SearchPoint(Record):
    """One learning rate of finetune's search (``finetune.learning_rate_scales``)."""

    learning_rate: float
    """The peak learning rate searched (AdamW, per step)."""
    dev: float
    """The headline metric on dev, mean over the fine-tuning seeds (what the choice is made on)."""


class FinetuneMetrics(Metrics):
    """Stage ``finetune@<model>-<task>``: per-seed runs and their summary per split and metric."""

    file = "finetune/<model>-<task>.json"
    model: str
    task: str
    family: Family
    headline: str
    """The task's first metric, the one the report compares."""
    seeds: list[int]
    seed_workers: int = absent()
    """Processes that ran the seeds (``finetune.seed_workers``; absent in runs from before it was a param)."""
    wall_sec: float = absent()
    """Wall-clock seconds of all seeds, fine-tuning and evaluation (absent in older runs)."""
    encoding: dict[str, dict[str, int]] = absent()
    """Split -> what encoding counted (NER truncation, MRC answers no window holds);
    absent in runs from before it was written."""
    training: Training
    """The recipe the runs used (under a search, the chosen learning rate)."""
    search: list[SearchPoint] = absent()
    """Every learning rate searched, in grid order (absent without a search)."""
    runs: list[FinetuneRun]
    dev: dict[str, SeedSummary]
    """Metric -> its summary over the seeds."""
    test: dict[str, SeedSummary]

    def summary(self, split: str) -> dict[str, SeedSummary]:
        """Metric -> summary over the seeds on ``split`` (``dev`` or ``test``)."""
        return {"dev": self.dev, "test": self.test}[split]


class ClassicSetting(Record):
    """One hyper-parameter setting of a classic baseline's search (``C``; CRFsuite's ``c1``, ``c2``)."""

    setting: dict[str, float]
    dev: float
    """The headline metric on dev (what the choice is made on)."""


class BaselineMetrics(Metrics):
    """Stage ``baseline@<task>``: the task's classic baseline (:mod:`tasks.downstream.classic`), trained on
    the same capped train split as every fine-tune, its setting chosen on dev, scored once on test with the
    fine-tunes' metric code."""

    file = "baseline/<task>.json"
    task: str
    family: Family
    headline: str
    method: str
    """What was fitted, in words."""
    setting: dict[str, float]
    """The chosen setting."""
    search: list[ClassicSetting]
    train_rows: int
    """Training examples (MRC: questions) it saw: the fine-tunes' capped train split."""
    dev: Scores
    test: Scores
    wall_sec: float
    """Wall-clock seconds of the search and the predictions."""
    details: dict[str, int] = absent()
    """Counts the method reports (features, questions)."""
