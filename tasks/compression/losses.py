"""The losses of knowledge distillation (KD) and what they compare.

Soft labels after Hinton, Vinyals and Dean 2015 ("Distilling the knowledge in a neural network", §2); the
intermediate matches after TextBrewer (Yang et al. 2020, ACL demo, §3; reference code ``textbrewer/losses.py``:
``kd_ce_loss``, ``hid_mse_loss``, ``att_mse_loss``, ``cos_loss``).

Two differences from TextBrewer, both deliberate:

* the soft-label term is the KL divergence KL(p_T^τ ‖ p_S^τ), which is 0 when the student
  matches; TextBrewer's ``kd_ce_loss`` is the cross-entropy −Σ p_T^τ log p_S^τ, larger by the
  teacher's entropy, a constant with the same gradient (tested);
* it is scaled by τ² (``distill.scale_by_t2``, on by default), as Hinton et al. advise so that
  its gradient keeps its size against the hard-label term when τ changes; TextBrewer does not.

One loop serves the three task families through :func:`prediction_logits`, which flattens a
head's outputs into rows of a categorical distribution: classification ``logits [B, C]``, NER
``logits [B, L, C]`` at the labelled tokens, MRC ``start_logits``/``end_logits [B, L]`` over the
valid positions of each window.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tasks.training.batching import IGNORE_INDEX

NEG = -1e4  # logit given to padding positions of MRC windows: exp(NEG/τ) underflows to 0
LABEL_KEYS = ("labels", "start_positions", "end_positions")
MATCHES = ("hidden_mse", "attention_mse", "cos")  # the intermediate matches, by Match.kind


def prediction_logits(out, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """The head's predictions as rows of categorical distributions: a list of ``[N, C]`` tensors.

    * classification: ``[out.logits]`` (``[B, C]``);
    * NER (``labels [B, L]``): the logits of the labelled tokens, ``[N_labelled, C]``;
    * MRC (``start_logits``): start and end logits ``[B, L]``, padding set to :data:`NEG`.
    Rows depend on the batch only, so student and teacher rows align.
    """
    if "start_logits" in out:
        valid = batch["attention_mask"].bool()
        return [out[k].float().masked_fill(~valid, NEG) for k in ("start_logits", "end_logits")]
    logits = out["logits"].float()
    if logits.ndim == 3:
        return [logits[batch["labels"] != IGNORE_INDEX]]
    return [logits]


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, temperature: float, scale_by_t2: bool = True) -> torch.Tensor:
    """Soft-label KD: mean over rows of KL(softmax(teacher/τ) ‖ softmax(student/τ)), × τ² when
    ``scale_by_t2`` (Hinton et al. 2015, §2).

    Args:
        student, teacher: ``float [N, C]`` logits; one row per prediction.
    Returns:
        a scalar (nats); 0 when the rows agree up to a constant shift.
    """
    log_s = F.log_softmax(student.float() / temperature, dim=-1)
    log_t = F.log_softmax(teacher.float() / temperature, dim=-1)
    kl = F.kl_div(log_s, log_t, log_target=True, reduction="none").sum(-1).mean()
    return kl * temperature ** 2 if scale_by_t2 else kl


def hidden_mse(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of hidden states over the valid tokens (TextBrewer ``hid_mse_loss``).

    Args:
        student, teacher: ``float [B, L, H]`` (the student's already projected to H).
        mask: ``[B, L]``, 1 on valid tokens.
    """
    m = mask.to(student.dtype)[..., None]
    return ((student - teacher) ** 2 * m).sum() / (m.sum() * student.shape[-1]).clamp(min=1)


def cos_loss(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over valid tokens of 1 − cos(student, teacher) (TextBrewer ``cos_loss``); ``[B, L, H]``, ``[B, L]``."""
    m = mask.to(student.dtype)
    return ((1 - F.cosine_similarity(student, teacher, dim=-1)) * m).sum() / m.sum().clamp(min=1)


def attention_mse(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of attention probabilities over valid (query, key) pairs (TextBrewer
    ``att_mse_loss``). With different head counts both are first averaged over heads.

    Args:
        student, teacher: ``float [B, heads, L, L]``.
        mask: ``[B, L]``, 1 on valid tokens.
    """
    if student.shape[1] != teacher.shape[1]:
        student, teacher = student.mean(1, keepdim=True), teacher.mean(1, keepdim=True)
    m = mask.to(student.dtype)
    pairs = (m[:, :, None] * m[:, None, :])[:, None]
    return ((student - teacher) ** 2 * pairs).sum() / (pairs.sum() * student.shape[1]).clamp(min=1)


def temperature_at(step: int, total: int, temperature: float, schedule: str) -> float:
    """τ at ``step`` of ``total``: ``constant``, or ``anneal``: linear from τ at the first step to 1
    at the last (annealing KD, Jafari et al. 2021, EACL, §3)."""
    if schedule == "constant" or total <= 1:
        return temperature
    return temperature + (1.0 - temperature) * step / (total - 1)
