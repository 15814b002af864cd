"""Report section "Run times": training compute of the stages that train or segment."""

from __future__ import annotations

from pathlib import Path

from tasks.core.metrics import PretrainMetrics, SegmentMetrics
from tasks.report.common import fmt, load_metrics, table


def runtime_section(metrics: Path, objectives: list[str], results: dict) -> str:
    """Minutes per stage run (segmentation, pretraining, fine-tuning summed over seeds)
    as a table; empty when none has run."""
    rows = []
    for stage, m in [("segment", load_metrics(metrics / "segment.json", SegmentMetrics))] + \
            [(f"pretrain@{o}", load_metrics(metrics / "pretrain" / f"{o}.json", PretrainMetrics)) for o in objectives]:
        if m:
            rows.append([stage, fmt(m.wall_sec / 60, 2)])
    for (model, task), r in sorted(results.items()):
        stage = "finetune" if model in objectives else "finetune_baseline"  # dvc.yaml's stage names
        rows.append([f"{stage}@{model}-{task}", fmt(sum(run.train.wall_sec for run in r.runs) / 60, 2)])
    return table(["stage", "minutes (training compute)"], rows) if rows else ""
