"""Size and speed of a task model: what compression buys.

Parameters count distinct tensors once; size on disk is the bytes of the model's
``model.safetensors`` (fp32, as saved); latency is the median wall time of one forward pass
on one example, throughput the examples per second of forward passes at batch 32, both on
the same real examples of the task, in this process's torch threads, after warm-up.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_model
from prefect import get_run_logger
from torch import nn

from tasks.compression.distill import LABEL_KEYS
from tasks.core.stage import stage_task
from tasks.downstream.finetune import summarize


def parameters(model: nn.Module) -> int:
    """Distinct parameters of ``model`` (tied tensors counted once)."""
    return sum(p.numel() for p in model.parameters())


def disk_bytes(model: nn.Module) -> int:
    """Bytes of ``model``'s weights saved as safetensors (shared tensors stored once)."""
    with tempfile.TemporaryDirectory(prefix="zhplm-size-") as folder:
        path = Path(folder) / "model.safetensors"
        save_model(model, str(path))
        return path.stat().st_size


@torch.no_grad()
def speed(model: nn.Module, data, *, device: torch.device, repeats: int = 20, batch: int = 32) -> dict:
    """``latency_ms`` (median of ``repeats`` forward passes at batch 1, over the first examples of
    ``data`` in turn) and ``throughput`` (examples/s at batch ``batch`` over ``repeats`` batches),
    after one warm-up pass of each. Inputs without labels, model in eval mode."""
    model.to(device).eval()
    n = len(data)

    def inputs(index: np.ndarray) -> dict:
        return {k: v.to(device) for k, v in data.batch(index).items() if k not in LABEL_KEYS}

    singles = [inputs(np.array([i % n])) for i in range(repeats)]
    batches = [inputs(np.arange(j * batch, (j + 1) * batch) % n) for j in range(max(1, repeats // 4))]
    model(**singles[0]), model(**batches[0])  # warm-up
    times = []
    for x in singles:
        t0 = time.perf_counter()
        model(**x)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for x in batches:
        model(**x)
    wall = time.perf_counter() - t0
    return {"latency_ms": round(1000 * float(np.median(times)), 3),
            "throughput": round(len(batches) * batch / wall, 1)}


def size_of(model: nn.Module, data, device: torch.device, repeats: int) -> dict:
    """:class:`tasks.core.metrics.Size` fields of ``model``: parameters, bytes on disk and :func:`speed`."""
    return {"parameters": parameters(model), "disk_bytes": disk_bytes(model),
            **speed(model, data, device=device, repeats=repeats)}


@stage_task(task_run_name="evaluate-{name}")
def evaluate_variant(name: str, description: str, models: list[nn.Module], runs: list[dict], family, data: dict,
                     tables: dict, training, labels, metrics: list[str], device: torch.device,
                     repeats: int) -> dict:
    """One row of a compression table: each seed's model (``models``, in the order of ``runs``,
    which hold ``seed`` and any extra per-seed fields) scored on dev and test as ``finetune``
    scores, the summary over seeds, and the size and speed of the first model on dev examples.
    A run that already holds its ``dev`` and ``test`` scores (finetune's own models, read with
    :func:`tasks.downstream.finetune.read_scores`) is not scored again.

    Returns:
        the fields of :class:`tasks.core.metrics.Variant`.
    """
    rows = []
    for model, run in zip(models, runs):
        if "dev" not in run:
            scores = {split: family.evaluate(model, data[split], tables[split], training, labels, metrics,
                                             device)[0] for split in ("dev", "test")}
            run = {**run, **{split: {m: s[m] for m in metrics} for split, s in scores.items()}}
        rows.append(run)
    summary = {split: {m: summarize([r[split][m] for r in rows]) for m in metrics} for split in ("dev", "test")}
    get_run_logger().info(f"{name}: dev {summary['dev'][metrics[0]]} test {summary['test'][metrics[0]]}")
    return {"name": name, "description": description, "runs": rows, **summary,
            "size": size_of(models[0], data["dev"], device, repeats)}
