"""Report section "Run times": wall time of the stages that train or segment."""

from __future__ import annotations

from pathlib import Path

from tasks.core.metrics.corpus import SegmentMetrics
from tasks.core.metrics.pretraining import PretrainMetrics
from tasks.report.common import fmt, load_metrics, table


def runtime_section(metrics: Path, objectives: list[str], results: dict) -> str:
    """Minutes per stage run (segmentation, pretraining, and fine-tuning's seeds with their
    evaluation: side by side under ``finetune.seed_workers``, else in turn; runs from before that
    was recorded give their seeds' training summed) as a table; empty when none has run."""
    rows = []
    for stage, m in [("segment", load_metrics(metrics / "segment.json", SegmentMetrics))] + \
            [(f"pretrain@{o}", load_metrics(metrics / "pretrain" / f"{o}.json", PretrainMetrics)) for o in objectives]:
        if m:
            rows.append([stage, fmt(m.wall_sec / 60, 2)])
    for (model, task), r in sorted(results.items()):
        stage = "finetune" if model in objectives else "finetune_baseline"  # dvc.yaml's stage names
        wall = r.wall_sec if r.wall_sec is not None else sum(run.train.wall_sec for run in r.runs)
        rows.append([f"{stage}@{model}-{task}", fmt(wall / 60, 2)])
    return table(["stage", "minutes"], rows) if rows else ""
