"""Every metrics model by kind (the first part of its path under ``metrics/``): for the tests
and tools that read any metrics file. Stages import only their own model's module, so that
editing one kind of metrics reruns only the stages that write or read it."""

from __future__ import annotations

import os
from pathlib import Path

from tasks.core.metrics.base import Metrics
from tasks.core.metrics.compression import DistillMetrics, PruneMetrics
from tasks.core.metrics.corpus import CorpusMetrics, SegmentMetrics, SimilarWordsMetrics, TokenizeMetrics
from tasks.core.metrics.downstream import BaselineMetrics, DownstreamMetrics, FinetuneMetrics
from tasks.core.metrics.interpretability import AblationMetrics, AttributionsMetrics, ProbeMetrics, ScalarMixMetrics
from tasks.core.metrics.multilingual import (ContinuePretrainMetrics, MultilingualMetrics, PruneVocabMetrics,
                                             ResampleMetrics, VocabExtensionMetrics)
from tasks.core.metrics.pretraining import CurvesMetrics, PretrainingDataMetrics, PretrainMetrics, SweepMetrics

MODELS: dict[str, type[Metrics]] = {model.kind(): model for model in (
    CorpusMetrics, SegmentMetrics, TokenizeMetrics, SimilarWordsMetrics, DownstreamMetrics, PretrainingDataMetrics,
    PretrainMetrics, BaselineMetrics, FinetuneMetrics, MultilingualMetrics, VocabExtensionMetrics, ResampleMetrics,
    ContinuePretrainMetrics, PruneVocabMetrics, AblationMetrics, ProbeMetrics, ScalarMixMetrics,
    AttributionsMetrics, DistillMetrics, PruneMetrics, CurvesMetrics, SweepMetrics)}
"""Kind (the first part of the path under ``metrics/``, without ``.json``) -> model."""


def model_for(path: str | os.PathLike, root: str | os.PathLike = "metrics") -> type[Metrics]:
    """The model of the metrics file at ``path`` (a path under ``root``)."""
    kind = Path(path).relative_to(root).parts[0].removesuffix(".json")
    return MODELS[kind]
