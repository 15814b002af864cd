"""Report section "Run times": wall time of the stages that train or segment."""

from __future__ import annotations

from pathlib import Path

from tasks.core.metrics.corpus import SegmentMetrics
from tasks.core.metrics.pretraining import PretrainMetrics
from tasks.core.paths import procedure_of
from tasks.report.common import fmt, load_metrics, table


def stage_of(model: str, task: str) -> str:
    """The ``dvc.yaml`` stage that fine-tunes ``model`` on ``task``."""
    procedure, seed = procedure_of(model)
    if procedure == "random" and seed is not None:
        return f"finetune_random@{seed}-{task}"
    return f"finetune@{model}-{task}" if seed is not None else f"finetune_baseline@{model}-{task}"


def runtime_section(metrics: Path, pretrained: list[str], results: dict) -> str:
    """Minutes per stage run (segmentation, pretraining, and fine-tuning's seeds with their
    evaluation: side by side under ``finetune.seed_workers``, else in turn; runs from before that
    was recorded give their seeds' training summed) as a table; empty when none has run."""
    rows = []
    for stage, m in [("segment", load_metrics(metrics / "segment.json", SegmentMetrics))] + \
            [(f"pretrain@{m}", load_metrics(metrics / "pretrain" / f"{m}.json", PretrainMetrics)) for m in pretrained]:
        if m:
            rows.append([stage, fmt(m.wall_sec / 60, 2)])
    for (model, task), r in sorted(results.items()):
        wall = r.wall_sec if r.wall_sec is not None else sum(run.train.wall_sec for run in r.runs)
        rows.append([stage_of(model, task), fmt(wall / 60, 2)])
    return table(["stage", "minutes"], rows) if rows else ""
