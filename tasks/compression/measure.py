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
from torch import nn

from tasks.compression.losses import LABEL_KEYS


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
