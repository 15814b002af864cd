"""Device choice and mixed precision, shared by pretraining, fine-tuning and the analyses."""

from __future__ import annotations

import torch


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else CPU; any torch device string is accepted."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device):
    """bf16 autocast on CUDA (mixed precision); a no-op on CPU, where fp32 is faster for small models."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")
