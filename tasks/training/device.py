"""Device choice, mixed precision and the CUDA switches, shared by pretraining, fine-tuning
and the analyses.

TF32 is a no-op on CPU. bf16 autocast runs on CUDA, and in pretraining on a CPU with native bf16
matmuls (``avx512_bf16`` or AMX) only when asked (``pretrain.bf16: true``, :func:`use_bf16`): whole CPU runs
were slower than fp32 and learned within noise of it (``benchmarks/results/bf16.json``); fine-tuning and the
analyses run fp32 on CPU.
Fused AdamW (:mod:`tasks.training.optim`) acts on both.
"""

from __future__ import annotations

from typing import Literal

import torch

from tasks.core.errors import ParamsError
from tasks.core.machine import cpu

def resolve_device(name: str = "auto", key: str = "device") -> torch.device:
    """``auto`` picks CUDA when present, else CPU; else the torch device ``name``.

    Raises:
        ParamsError: ``name`` is no device, or an accelerator is asked for where torch has none (CUDA
            on a CPU build or without a GPU, MPS off Apple silicon, a CUDA index past the GPUs);
            ``key`` names the param.
    """
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ParamsError(f"{key}: {name!r} is no torch device (auto, cpu, cuda, cuda:<n>, mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ParamsError(f"{key}: {name} asked for, but torch {torch.__version__} here has no CUDA device "
                          "(a CPU build, or no GPU): set it to auto or cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ParamsError(f"{key}: {name} asked for, but this machine has {torch.cuda.device_count()} CUDA "
                          "device(s): set it to auto, cuda or cpu")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ParamsError(f"{key}: {name} asked for, but torch {torch.__version__} here has no MPS device "
                          "(Apple silicon only): set it to auto or cpu")
    if device.type not in ("cpu", "cuda", "mps"):
        raise ParamsError(f"{key}: {name!r}: the pipeline runs on cpu, cuda or mps, not {device.type}")
    return device


def cpu_has_bf16() -> bool:
    """This CPU multiplies bf16 natively (``avx512_bf16`` or ``amx_bf16`` in ``/proc/cpuinfo``). Elsewhere
    (AVX2 only) torch emulates it, at about 0.07x the fp32 rate."""
    return bool({"avx512_bf16", "amx_bf16"} & set(cpu()["isa"]))


def use_bf16(setting: bool | Literal["auto"], device: torch.device) -> bool:
    """Whether pretraining runs under bf16 autocast, from ``pretrain.bf16``: ``false`` never; ``auto`` on CUDA;
    ``true`` on CUDA and on a CPU with native bf16 (:func:`cpu_has_bf16`; fp32 elsewhere: emulated bf16 is far
    slower). ``auto`` keeps CPUs in fp32: there whole runs in bf16 were slower (oneDNN builds a primitive per
    batch width) for a held-out loss within noise of fp32's over initialisations (``benchmarks/bf16.py``)."""
    if setting is False or device.type not in ("cuda", "cpu"):
        return False
    if device.type == "cuda":
        return True
    return setting is True and cpu_has_bf16()


def autocast(device: torch.device, bf16: bool | None = None):
    """bf16 autocast (mixed precision: matmuls in bf16, reductions and the losses in fp32) when ``bf16``;
    None: on CUDA only (fine-tuning and the analyses: fp32 on CPU)."""
    enabled = device.type == "cuda" if bf16 is None else bf16
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=enabled)


def set_tf32(device: torch.device, enabled: bool) -> None:
    """Let CUDA run fp32 matmuls and convolutions on TF32 tensor cores (10-bit mantissa,
    about 8x the fp32 rate on A100/H100) when ``enabled``; under bf16 autocast this touches
    only the ops autocast keeps in fp32. Process-wide (``torch.backends``); nothing on CPU."""
    if device.type != "cuda":
        return
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The batch's tensors on ``device``. On CUDA they go through pinned memory, asynchronously: a
    copy from pageable memory first waits for the stream to drain (CUDA's API synchronisation
    rules), which would stop the host from preparing the next step while the GPU runs this one."""
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}
