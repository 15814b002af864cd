"""The training loop of pretraining, fine-tuning and distillation, after nanoGPT's ``train.py``.

A stage supplies its model, its batches and its loss (:class:`Objective`); :func:`run` does the
rest, once for all three: the learning-rate schedule (linear warm-up then linear decay, BERT's:
:func:`tasks.training.optim.learning_rate`), DDP (the model wrapped; gradients synchronised on a
step's last micro-batch only), each micro-batch moved to the device (pinned and asynchronous on
CUDA: :func:`tasks.training.device.to_device`), bf16 autocast (``bf16``), backward, gradient-norm
clipping and the optimizer step. Losses stay on the device: a stage reads them when it logs
(:class:`History`, or pretraining's window), so the host never waits for the GPU each step.

What a stage does between steps (log rows, snapshots, checkpoints) is its ``after_step``; a
resumed run passes the steps still ahead (``steps``). Only pretraining checkpoints: fine-tuning and
distillation runs last minutes and restart from scratch.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol

import numpy as np
import torch

from tasks.core.errors import DivergedError
from tasks.training.device import autocast, to_device
from tasks.training.distributed import Ranks, wrap
from tasks.training.optim import learning_rate


class Objective(Protocol):
    """What a stage trains on."""

    def batches(self, step: int) -> list[dict[str, torch.Tensor]]:
        """Step ``step``'s micro-batches (one for a plain step), on the host, each already weighted by
        its share of the step's loss (a stage that accumulates sets those weights)."""

    def loss(self, net: torch.nn.Module, batch: dict[str, torch.Tensor],
             step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One micro-batch's scalar loss from ``net`` (the model, DDP-wrapped under several processes),
        and named parts to log (empty if none), on the device."""


@dataclass
class Step:
    """A finished optimizer step, as ``after_step`` sees it."""

    done: int  # steps finished, this one included (1-based)
    learning_rate: float
    batches: list[dict[str, torch.Tensor]]  # the micro-batches as the objective gave them (host)
    losses: list[torch.Tensor]  # each micro-batch's loss, detached, on the device
    parts: list[dict[str, torch.Tensor]]  # each micro-batch's parts


def run(model: torch.nn.Module, objective: Objective, opt: torch.optim.Optimizer, *, steps: range, total: int,
        peak_lr: float, warmup_fraction: float, max_grad_norm: float, device: torch.device,
        ranks: Ranks = Ranks(), bf16: bool | None = None, find_unused_parameters: bool = False,
        params: Iterable[torch.nn.Parameter] | None = None,
        after_step: Callable[[Step], None] = lambda _: None) -> None:
    """Train ``model`` (already on ``device``, in train mode, with ``opt`` built on it) for ``steps``
    of a ``total``-step schedule.

    Args:
        params: the parameters whose gradient norm is clipped at ``max_grad_norm`` (default: the model's).
        find_unused_parameters: DDP must not wait for parameters the loss leaves unused.
        bf16: run the forward passes under bf16 autocast (None: on CUDA only;
            :func:`tasks.training.device.autocast`).
    """
    net = wrap(model, ranks, device, find_unused_parameters=find_unused_parameters)
    params = list(model.parameters() if params is None else params)
    for step in steps:
        lr = learning_rate(step, total, peak_lr, warmup_fraction)
        for group in opt.param_groups:
            group["lr"] = lr
        micro, losses, parts = objective.batches(step), [], []
        for m, batch in enumerate(micro):
            sync = m == len(micro) - 1 or ranks.world == 1
            with (nullcontext() if sync else net.no_sync()), autocast(device, bf16):
                loss, named = objective.loss(net, to_device(batch, device), step)
            loss.backward()
            losses.append(loss.detach())
            parts.append(named)
        torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        after_step(Step(step + 1, lr, micro, losses, parts))


def check_finite(loss: float, step: int, total: int, recipe: str) -> None:
    """Stop a run whose logged ``loss`` (the mean of its last log window) is NaN or infinite: nothing
    after a non-finite loss is worth its compute, and no step is skipped silently (the remedies, a lower
    learning rate, a longer warm-up, tighter clipping, are the user's choice).

    Raises:
        DivergedError: naming ``step`` of ``total``, the loss and ``recipe`` (the knobs that set the step size).
    """
    if not math.isfinite(loss):
        raise DivergedError(f"training diverged: loss {loss} at step {step}/{total} ({recipe}); lower the "
                            "learning rate, lengthen the warm-up or clip harder, and rerun")


def time_left(seconds: float, done: int, total: int) -> str:
    """``"1:05 left"``: the rest of a ``total``-step run at the pace of its first ``done`` steps, which took
    ``seconds`` (what a long stage prints beside its step, so a terminal says how long it will be)."""
    left = round(seconds / max(done, 1) * (total - done))
    return f"{left // 60}:{left % 60:02d} left"


class History:
    """Per-step values of a fine-tuning or distillation run, kept on the device until read.

    Every fifth of the run it logs the mean loss of the last tenth of the steps, and stops a run whose
    loss is no longer finite (:func:`check_finite`, naming ``recipe``); :meth:`tail` is that mean for any key. Under DDP each rank adds its loss as DDP weights it (``world`` × its
    share of the global batch); the values read are their means over ranks: the global batch's.
    """

    def __init__(self, total: int, log: Callable[[str], None], ranks: Ranks = Ranks(), recipe: str = ""):
        self.total, self.log, self.ranks, self.recipe = total, log, ranks, recipe
        self.values: dict[str, list[float]] = {}
        self.t0, self.first = time.perf_counter(), None
        self.pending: list[dict[str, torch.Tensor]] = []

    def add(self, done: int, **values: torch.Tensor) -> None:
        """The values of step ``done`` (1-based); logs the loss at every fifth of the run."""
        self.pending.append(values)
        self.first = done - 1 if self.first is None else self.first  # a resumed run's pace counts from its start
        if done % max(1, self.total // 5) == 0:
            pace, loss = time_left(time.perf_counter() - self.t0, done - self.first, self.total - self.first), self.tail("loss")
            check_finite(loss, done, self.total, self.recipe)
            self.log(f"step {done}/{self.total} loss {loss:.4f}, {pace}")

    def tail(self, key: str) -> float:
        """Mean of ``key`` over the last tenth of the steps so far (at least one)."""
        self._settle()
        return float(np.mean(self.values[key][-max(1, self.total // 10):]))

    def _settle(self) -> None:
        if not self.pending:
            return
        keys = list(self.pending[0])
        flat = torch.stack([v.detach().float() for step in self.pending for v in step.values()]).tolist()
        if self.ranks.world > 1:  # one all-reduce for every pending step
            flat = self.ranks.all_sum([v / self.ranks.world for v in flat])
        for i, key in enumerate(keys):
            self.values.setdefault(key, []).extend(flat[i::len(keys)])
        self.pending = []
