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


def optimizer_for(model: torch.nn.Module, lr: float, weight_decay: float, fused: bool = True) -> torch.optim.AdamW:
    """AdamW with no weight decay on biases and LayerNorm weights (as in BERT).

    Args:
        fused: use PyTorch's fused AdamW kernel (one launch for every parameter, instead of
            the per-tensor ``foreach`` ops) when every parameter is a CUDA tensor, so call this
            after moving the model. The same update up to float rounding. On CPU (and with a
            parameter off the GPU) it is ignored: CPU runs keep the default implementation,
            so their numbers do not change (``pretrain.fused_adamw``).
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    on_cuda = all(p.is_cuda for p in decay + no_decay) and bool(decay + no_decay)
    extra = {"fused": True} if fused and on_cuda else {}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-6, **extra)
