"""Metrics of the compression stages: ``distill@<student>-<task>`` and ``prune@<model>-<task>``.

Each file lists variants, the first being the teacher (or the unpruned model): per-seed
scores, their summary over the seeds, and size and speed measured on the first seed's model
(speed-ups against the first variant, in the same process). Scores are in the task's units
(:mod:`tasks.core.metrics.downstream`).
"""

from __future__ import annotations

from tasks.core.metrics.base import Metrics, Record, absent
from tasks.core.metrics.downstream import Family, Scores, SeedSummary


class Size(Record):
    """Size and CPU speed of one model (:mod:`tasks.compression.measure`)."""

    parameters: int
    """Distinct parameters (tied tensors once)."""
    disk_bytes: int
    """Bytes of its weights as safetensors (fp32)."""
    latency_ms: float
    """Median milliseconds of one forward pass at batch 1."""
    throughput: float
    """Examples per second of forward passes at batch 32."""


class CompressedRun(Record):
    """One seed of a variant."""

    seed: int
    dev: Scores
    test: Scores
    train: dict[str, float] = absent()
    """Distillation: what :func:`tasks.compression.distill.distill` returns (losses, steps, seconds)."""
    heads: list[int] = absent()
    """Pruning: attention heads kept in each layer."""
    ffn: list[int] = absent()
    """Pruning: FFN neurons kept in each layer."""


class Variant(Record):
    """One row of the compression table."""

    name: str
    description: str
    runs: list[CompressedRun]
    dev: dict[str, SeedSummary]
    """Metric -> summary over the seeds."""
    test: dict[str, SeedSummary]
    size: Size
    vocabulary_pruned: Size = absent()
    """Pruning: the same model after vocabulary pruning to the task's tokens (same predictions)."""
    kept_tokens: int = absent()
    """Pruning: vocabulary entries kept by vocabulary pruning."""

    def summary(self, split: str) -> dict[str, SeedSummary]:
        return {"dev": self.dev, "test": self.test}[split]


class DistillMetrics(Metrics):
    """Stage ``distill@<student>-<task>``: teacher, teachers' ensemble, then the student trained
    on labels only, distilled, distilled with intermediate matches, and multi-teacher."""

    file = "distill/<student>-<task>.json"
    task: str
    family: Family
    headline: str
    teacher: str
    student: str
    seeds: list[int]
    settings: dict[str, float | str | bool | list[int]]
    """Student size, layer map and KD knobs used."""
    variants: list[Variant]
    wall_sec: float
    """Wall-clock seconds of the stage's flow (loading, training, evaluating, measuring)."""


class PruneMetrics(Metrics):
    """Stage ``prune@<model>-<task>``: the fine-tuned model, then each pruning variant
    (importance, allocation, one shot or iterative)."""

    file = "prune/<model>-<task>.json"
    task: str
    family: Family
    headline: str
    model: str
    seeds: list[int]
    settings: dict[str, int]
    """Targets (heads, ffn per layer), n_iters, importance examples."""
    variants: list[Variant]
    wall_sec: float
    """Wall-clock seconds of the stage's flow (importance, pruning, evaluating, measuring)."""
