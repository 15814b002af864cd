"""The optimizer and learning-rate schedule shared by pretraining and fine-tuning (BERT's recipe:
Devlin et al. 2019, §A.2; AdamW of Loshchilov and Hutter 2019)."""

from __future__ import annotations

import torch


def learning_rate(step: int, total_steps: int, peak: float, warmup_fraction: float) -> float:
    """Linear warm-up to ``peak`` over the first ``warmup_fraction`` of steps, then linear decay to 0."""
    warmup = max(1, int(total_steps * warmup_fraction))
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * max(0.0, (total_steps - step) / max(1, total_steps - warmup))


def optimizer_for(model: torch.nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with no weight decay on biases and LayerNorm weights (as in BERT)."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6)
