"""Pretrain: a BERT encoder from scratch on masked pretraining data.

On the one training loop (:mod:`tasks.training.loop`, after nanoGPT): AdamW with linear warm-up
and linear decay, gradient clipping, a fixed budget of non-padding tokens, predictions only at the
chosen positions (:class:`tasks.pretraining.modeling.PretrainingModel`: MLM or PerLM, plus
NSP/SOP), static or dynamic masking, a CSV log of loss and throughput, and
regular checkpoints from which a killed run resumes where it stopped (same data
order, same masks, same optimizer state, same result).

Data order is a pure function of (seed, step) (:class:`tasks.training.batching.BatchSchedule`:
seeded permutations, length-grouped batches), so a resumed run needs only the
step number to continue the same stream (checkpoints: :mod:`tasks.pretraining.checkpoint`; the
examples and their batches: :mod:`tasks.pretraining.examples`). :func:`train` is the Prefect task
of stages ``pretrain`` and ``continue_pretrain``.
"""

from __future__ import annotations

import csv
import itertools
import math
import os
import resource
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Callable

import torch

from tasks.core.errors import ParamsError
from tasks.core.params import Pretrain
from tasks.core.stage import stage_task
from tasks.pretraining.checkpoint import exclusive, load_checkpoint, save_checkpoint
from tasks.pretraining.examples import PretrainingExamples, micro_batches
from tasks.pretraining.flops import mlm_flops
from tasks.pretraining.modeling import PretrainingModule
from tasks.pretraining.objectives.base import Logged
from tasks.training.batching import BatchSchedule
from tasks.training.device import use_bf16
from tasks.training.distributed import Ranks
from tasks.training.loop import Step, check_finite, run, time_left
from tasks.training.optim import optimizer_for

LOG_HEAD = ["step", "tokens", "loss", "token_accuracy"]  # every run's log columns, the kinds' between them
LOG_TAIL = ["learning_rate", "tokens_per_sec", "elapsed_sec", "flops"]
Snapshot = Callable[[float, dict], None]
"""``snapshot(fraction, at)``: keep the model as it is at ``fraction`` of the budget; ``at`` holds
``step``, ``tokens``, ``seconds`` and ``flops`` so far (called on rank 0)."""


# On CUDA a batch's width is padded to a multiple of 8: length-grouped batches come in up to max_seq_length
# widths, and each new shape costs a step its kernel selection (bert-base, H100, the pipeline's data:
# 213k -> 330k tokens/s, benchmarks/README.md#gpu_check); 8 also keeps bf16 tensor-core tiles aligned
# (Hugging Face's pad_to_multiple_of=8). CPU batches keep their width (1): in fp32 the padding costs more than
# the shapes; CPU bf16 (opt-in) is slower than fp32 at either width, ragged or padded to 16 for oneDNN's
# per-shape bf16 primitives, and learns within noise of it over initialisations (benchmarks/results/bf16.json).
GPU_WIDTH_MULTIPLE = 8
CPU_WIDTH_MULTIPLE = 1
WIDE_KEYS = ("input_ids", "attention_mask", "token_type_ids")


def pad_width(batch: dict[str, torch.Tensor], multiple: int, limit: int) -> dict[str, torch.Tensor]:
    """``batch`` with its ``[B, W]`` tensors (:data:`WIDE_KEYS`) right-padded with zeros (the
    padding id, masked out, segment 0) to the next multiple of ``multiple``, at most ``limit`` (the
    longest example, so never past the position embeddings); the predicted positions (``rows``,
    ``cols``, ``labels``: ``int64 [M]``) and the rest unchanged."""
    extra = min(-batch["input_ids"].shape[1] % multiple, limit - batch["input_ids"].shape[1])
    if extra <= 0:
        return batch
    return {k: torch.nn.functional.pad(v, (0, extra)) if k in WIDE_KEYS else v for k, v in batch.items()}


def snapshot_steps(fractions: tuple[float, ...], total: int) -> dict[int, float]:
    """The step at which each fraction of a ``total``-step run is kept (rounded, at least 1): ``{step: fraction}``."""
    return {max(1, round(f * total)): f for f in fractions}


def total_steps_for(budget_tokens: int, batch_size: int, mean_length: float) -> int:
    """Steps that spend ``budget_tokens`` non-padding tokens at ``batch_size`` examples per step."""
    return max(1, math.ceil(budget_tokens / (batch_size * mean_length)))


def equal_flops_steps(model, data: PretrainingExamples, schedule: BatchSchedule, token_steps: int) -> int:
    """The ``mlm_flops`` budget: the steps after which ``model`` has spent the model FLOPs that an
    MLM with an encoder of its size (:func:`tasks.pretraining.flops.mlm_flops`) spends in
    ``token_steps`` steps of the same batches (the schedule is a pure function of the seed, so an
    MLM of the same seed trains on these very batches). Equal within one step's FLOPs (ELECTRA's
    comparisons at equal compute, Clark et al. 2020, §3.3)."""
    lengths, predicted = data.lengths, data.predictions
    reference = sum(mlm_flops(model.hf.config, lengths[i], int(predicted[i].sum()))
                    for i in map(schedule, range(token_steps)))
    steps, spent = 0, 0.0
    while spent < reference:
        index = schedule(steps)
        spent += model.flops(lengths[index], int(predicted[index].sum()))
        steps += 1
    return max(steps, 1)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process: CUDA allocations on GPU, resident set size on CPU (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@stage_task
def train(model: PretrainingModule, data: PretrainingExamples, cfg: Pretrain, *, seed: int,
          device: torch.device, checkpoint: Path, fingerprint: str, log: Callable[[str], None] = print,
          ranks: Ranks = Ranks(), snapshots: tuple[float, ...] = (), snapshot: Snapshot | None = None,
          equal_flops: bool = False, logged: tuple[Logged, ...] = ()) -> dict:
    """Pretrain ``model`` on ``data`` for ``cfg.token_budget`` tokens (or, with ``equal_flops``, for
    the model FLOPs an MLM spends on them: :func:`equal_flops_steps`); resume from ``checkpoint``.

    Each optimizer step consumes one global batch of ``cfg.batch_size`` examples, split over
    ``ranks.world`` DDP processes and ``cfg.accumulation_steps`` micro-batches
    (:func:`micro_batches`). Each micro-batch's mean losses are weighted by its share of the
    global batch's predicted tokens (``token_weight``), tokens (``position_weight``) and sequences
    (``sentence_weight``), as each of the model's losses is a mean over them, so the summed gradient is
    the global batch's mean-loss gradient: the loss curve does not depend on the number of
    processes or accumulation steps, up to float rounding (tests/test_distributed.py). With one
    process and one micro-batch the step is the plain one, unweighted. On CPU it runs with
    ``cfg.threads`` intra-op threads (:func:`intra_op_threads`).

    Args:
        checkpoint: file of the rolling checkpoint, written by rank 0 every ``cfg.checkpoint_every``
            steps (the caller deletes it once the model is saved). It is resumed only if
            its ``fingerprint`` (:func:`checkpoint_fingerprint`) matches; a stale,
            truncated or unreadable one is logged and training starts from scratch.
        fingerprint: identifies the run (params and data).
        log: receives progress lines and warnings (called on rank 0 only).
        ranks: this process among the DDP processes (:func:`tasks.training.distributed.process_group`).
        snapshots: fractions of the budget at whose step (rounded, at least 1) ``snapshot`` is
            called; a resumed run calls it only for the steps still ahead.
        logged: the loss parts of the objective's heads the log keeps beside the loss and the token
            accuracy (:attr:`tasks.pretraining.objectives.PretrainingObjective.logged`).
    Returns:
        Summary: steps, tokens, final loss and accuracies (``final_<column>`` of each logged accuracy),
        wall time, throughput, peak memory, threads, model FLOPs (``model.flops``: None for a model
        without it), and the log rows (:func:`log_fields`), the same on every rank.
    Raises:
        ParamsError: the global batch does not split over processes and accumulation steps; the budget makes too
            few steps for ``snapshots`` at distinct steps (names the budget that does).
    """
    with exclusive(checkpoint) if ranks.is_main else nullcontext(), intra_op_threads(cfg.threads, device, log):
        return PretrainingRun(model, data, cfg, seed, device, checkpoint, fingerprint, log, ranks, snapshots, snapshot,
                              equal_flops, logged).train()


@contextmanager
def intra_op_threads(threads: int | None, device: torch.device, log: Callable[[str], None] = print):
    """torch's CPU intra-op threads set to ``threads`` (None or CUDA: left alone), restored on exit; more
    threads than this process's cores is logged as a warning (they thrash; the run is kept: its result is
    still the one of ``threads``).

    The weight gradients' reductions split over the threads, so their count changes a CPU run's last
    bits (2 threads against 1: different weights after 60 steps of the default model; the forward pass
    does not change): fixing it makes a result independent of the cores and of the processes beside it.
    """
    before = torch.get_num_threads()
    if threads is not None and device.type == "cpu":
        if threads > (cores := len(os.sched_getaffinity(0))):
            log(f"warning: pretrain.threads {threads} > the {cores} cores this process may use: the threads thrash "
                f"(a slower run, same result); pretrain.threads: {cores} fits them")
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class PretrainingRun:
    """One pretraining run, its state where a reader sees it (nanoGPT's ``train.py`` keeps the same
    in module globals): the batch schedule, the optimizer, the tokens and model FLOPs so far, the log
    rows and the window since the last one. It is the loop's objective (:meth:`batches`,
    :meth:`loss`) and its ``after_step`` (:meth:`after_step`: snapshots, log rows, checkpoints);
    :meth:`train` runs it (arguments: :func:`train`'s)."""

    def __init__(self, model: PretrainingModule, data: PretrainingExamples, cfg: Pretrain, seed: int,
                 device: torch.device, checkpoint: Path, fingerprint: str, log: Callable[[str], None], ranks: Ranks,
                 snapshots: tuple[float, ...], snapshot: Snapshot | None, equal_flops: bool,
                 logged: tuple[Logged, ...]):
        self.model, self.data, self.cfg, self.device, self.ranks = model, data, cfg, device, ranks
        self.logged = logged
        self.checkpoint, self.fingerprint, self.snapshot = checkpoint, fingerprint, snapshot
        self.log = log if ranks.is_main else (lambda _: None)
        self.schedule = BatchSchedule(data.lengths, cfg.batch_size, seed)
        self.total = total_steps_for(cfg.token_budget, cfg.batch_size, float(data.lengths.mean()))
        if equal_flops:
            self.total = equal_flops_steps(model, data, self.schedule, self.total)
        model.to(device).train()
        self.opt = optimizer_for(model, cfg.learning_rate, cfg.weight_decay, fused=cfg.fused_adamw)
        self.bf16 = use_bf16(cfg.bf16, device)
        if device.type == "cpu" and cfg.bf16 is True:
            self.log("bf16 autocast on this CPU's native bf16 (pretrain.bf16: true)" if self.bf16 else
                     "pretrain.bf16: true, but this CPU has no native bf16 (avx512_bf16 or amx_bf16): fp32 "
                     "(emulated bf16 runs at about 0.07x fp32)")
        self.width_multiple = GPU_WIDTH_MULTIPLE if device.type == "cuda" else CPU_WIDTH_MULTIPLE
        self.start, self.tokens, self.rows, self.elapsed_before, self.flops = 0, 0, [], 0.0, 0.0
        self.count_flops = getattr(model, "flops", None)
        self.at_step = snapshot_steps(snapshots, self.total)
        wanted = len(set(snapshots))
        if len(self.at_step) < wanted:
            fits = next(t for t in itertools.count(self.total) if len(snapshot_steps(snapshots, t)) == wanted)
            raise ParamsError(f"pretrain.token_budget: {cfg.token_budget:,} tokens make {self.total} step(s) of "
                              f"{cfg.batch_size} sequences, too few to keep the snapshots at {list(snapshots)} of "
                              f"the budget at distinct steps: give at least "
                              f"{math.ceil(fits * cfg.batch_size * float(data.lengths.mean())):,}")
        windows = self._resume(seed)
        self.accumulate = ranks.world > 1 or cfg.accumulation_steps > 1
        self.longest = int(data.lengths.max())
        self.chosen = 0.0  # the step's chosen positions, over all ranks (FLOPs count the rest)
        self.t0 = time.perf_counter()
        self.window = _Window(self.t0, ranks, logged)
        if ranks.rank < len(windows):  # the steps since the last log row before the run was stopped
            self.window.load(windows[ranks.rank])

    def _resume(self, seed: int) -> list[dict]:
        """Load the checkpoint if it is this run's (model, optimizer, generators, counts, rows); else seed
        the generators. Returns the saved log windows of the ranks ([] when starting)."""
        state = load_checkpoint(self.checkpoint, self.fingerprint, self.log)
        if state is None:
            torch.manual_seed(seed + self.ranks.rank)  # rank 0 draws as a single process does
            return []
        self.model.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optimizer"])  # moves the state to the parameters' device
        _set_rng_states(state, self.ranks, self.device)
        self.start, self.tokens, self.rows, self.elapsed_before = (state[k] for k in ("step", "tokens", "rows",
                                                                                        "elapsed"))
        self.flops = state.get("flops", 0.0)
        self.log(f"resuming from {self.checkpoint} at step {self.start}/{self.total}")
        return state.get("window") or []

    def elapsed(self) -> float:
        """Seconds of training so far, the work queued on the GPU included."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return self.elapsed_before + time.perf_counter() - self.t0

    def batches(self, step: int) -> list[dict[str, torch.Tensor]]:
        """This rank's micro-batches of step ``step``, weighted by their shares of the global batch when
        it is split (DDP averages gradients over ranks, hence x world)."""
        data, model, ranks, index = self.data, self.model, self.ranks, self.schedule(step)
        micro = micro_batches(data, index, step, ranks, self.cfg.accumulation_steps)
        predicted = float(sum(model.predictions(b) for b in micro))
        self.chosen = float(sum(len(b["labels"]) for b in micro))
        if self.accumulate:
            predicted, self.chosen = ranks.all_sum([predicted, self.chosen])
            for b in micro:
                b["token_weight"] = torch.tensor(ranks.world * model.predictions(b) / predicted)
                b["position_weight"] = torch.tensor(ranks.world * float(b["attention_mask"].sum())
                                                    / float(data.lengths[index].sum()))
                b["sentence_weight"] = torch.tensor(ranks.world * len(b["input_ids"]) / len(index))
        if self.width_multiple > 1:
            return [pad_width(b, self.width_multiple, self.longest) for b in micro]
        return micro

    def loss(self, net, batch: dict[str, torch.Tensor], step: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return net(batch)

    def after_step(self, done: Step) -> None:
        """Count the step's tokens and FLOPs; keep a snapshot, write a log row, or checkpoint when due."""
        cfg, ranks = self.cfg, self.ranks
        weight = 1.0 / ranks.world if self.accumulate else 1.0  # a micro-batch's part of the step's loss
        for batch, loss, parts in zip(done.batches, done.losses, done.parts):
            self.window.add(loss * weight, parts, int(batch["attention_mask"].sum()), self.model.predictions(batch),
                            len(batch["input_ids"]), weight=weight)
        self.window.steps += 1
        step, index = done.done, self.schedule(done.done - 1)
        self.tokens += int(self.data.lengths[index].sum())
        if self.count_flops is not None:
            self.flops += self.count_flops(self.data.lengths[index], int(self.chosen))
        flops = self.flops if self.count_flops else None
        if step in self.at_step and self.snapshot is not None and ranks.is_main:
            self.snapshot(self.at_step[step], {"step": step, "tokens": self.tokens, "flops": flops,
                                               "seconds": round(self.elapsed(), 2)})
        if step % cfg.log_every == 0 or step == self.total:
            self.rows.append({"step": step, "tokens": self.tokens, "learning_rate": done.learning_rate,
                              **self.window.flush(self.elapsed()), "flops": flops})
            row = self.rows[-1]
            check_finite(row["loss"], step, self.total, f"pretraining lr {done.learning_rate:.3g} of peak "
                         f"{cfg.learning_rate:g}, warm-up {cfg.warmup_fraction:g}, batch {cfg.batch_size}, "
                         f"max_grad_norm {cfg.max_grad_norm:g}")
            self.log(f"step {step}/{self.total} loss {row['loss']:.4f} acc {row['token_accuracy']:.3f} "
                     f"{row['tokens_per_sec']:.0f} tokens/s, "
                     f"{time_left(time.perf_counter() - self.t0, step - self.start, self.total - self.start)}")
        if step % cfg.checkpoint_every == 0 and step < self.total:
            # The data order and the dynamic masks are pure functions of (seed, step): ``step``
            # is their whole state; numpy's and Python's global generators are not used.
            rng, saved = _rng_states(ranks, self.device), ranks.all_gather(self.window.state())
            if ranks.is_main:
                save_checkpoint(self.checkpoint, {
                    "fingerprint": self.fingerprint, "model": self.model.state_dict(),
                    "optimizer": self.opt.state_dict(), "step": step, "tokens": self.tokens, "rows": self.rows,
                    "window": saved, "flops": self.flops, "elapsed": self.elapsed(), **rng})

    def train(self) -> dict:
        """Run the steps still ahead; the summary :func:`train` returns."""
        cfg, model = self.cfg, self.model
        # PerLM predicting positions only: the MLM head's transform gets no gradient (unused parameters).
        run(model, self, self.opt, steps=range(self.start, self.total), total=self.total, peak_lr=cfg.learning_rate,
            warmup_fraction=cfg.warmup_fraction, max_grad_norm=cfg.max_grad_norm, device=self.device,
            ranks=self.ranks, bf16=self.bf16, find_unused_parameters=model.unused_parameters,
            after_step=self.after_step)
        wall, last = self.elapsed(), self.rows[-1] if self.rows else {}
        return {"steps": self.total, "tokens": self.tokens, "final_loss": last.get("loss"),
                "final_token_accuracy": last.get("token_accuracy"),
                **{f"final_{part.column}": last.get(part.column) for part in self.logged if part.per != "step"},
                "wall_sec": round(wall, 2), "precision": "bf16" if self.bf16 else "fp32",
                **({"flops": self.flops} if self.count_flops else {}),
                "tokens_per_sec": round(self.tokens / wall, 1) if wall else None,
                "peak_memory_mb": round(peak_memory_mb(self.device), 1), "threads": torch.get_num_threads(),
                "rows": self.rows}


def _rng_states(ranks: Ranks, device: torch.device) -> dict:
    """Every rank's torch generator states (dropout draws), for the checkpoint."""
    out = {"rng": ranks.all_gather(torch.get_rng_state())}
    if device.type == "cuda":  # dropout on GPU draws from the CUDA generator
        out["cuda_rng"] = ranks.all_gather(torch.cuda.get_rng_state(device))
    return out


def _set_rng_states(state: dict, ranks: Ranks, device: torch.device) -> None:
    """Restore this rank's generators; a run resumed with more ranks than saved seeds the new ones."""
    for key, setter in (("rng", torch.set_rng_state),
                        ("cuda_rng", lambda s: torch.cuda.set_rng_state(s, device))):
        saved = state.get(key)
        if saved is None or (key == "cuda_rng" and device.type != "cuda"):
            continue
        saved = [saved] if isinstance(saved, torch.Tensor) else saved
        if ranks.rank < len(saved):
            setter(saved[ranks.rank])
        else:
            torch.manual_seed(state["step"] * 1000 + ranks.rank)


class _Window:
    """Sums of the steps since the last log row (this rank's; summed over ranks when flushed): the loss,
    the token accuracy's right answers and the ``logged`` parts of the objective's heads."""

    def __init__(self, start: float, ranks: Ranks = Ranks(), logged: tuple[Logged, ...] = ()):
        self.start, self.ranks, self.logged = start, ranks, logged
        self.steps = self.tokens = self.predicted = self.sequences = 0
        self.keys = ("loss", "token_correct", *(part.part for part in logged))
        self.present: set[str] = set()  # the logged parts the model returned (a sentence head is optional)
        self.sums = dict.fromkeys(self.keys, 0.0)
        self.pending: list[tuple[torch.Tensor, dict[str, torch.Tensor], float]] = []

    def state(self) -> dict:
        """The sums and counts (plain values), for a checkpoint taken between two log rows."""
        self._settle()
        return {"steps": self.steps, "tokens": self.tokens, "predicted": self.predicted, "sequences": self.sequences,
                "present": sorted(self.present), "sums": dict(self.sums)}

    def load(self, state: dict) -> None:
        """Continue the window a checkpoint saved (:meth:`state`)."""
        self.steps, self.tokens, self.predicted, self.sequences = (state[k] for k in
                                                                    ("steps", "tokens", "predicted", "sequences"))
        self.present = set(state.get("present", ()))
        self.sums = {**dict.fromkeys(self.keys, 0.0), **state["sums"]}
        self.pending = []

    def add(self, loss, parts, tokens: int, predicted: int, sequences: int, weight: float = 1.0) -> None:
        """One micro-batch: its weighted loss, its parts and counts (``steps`` is counted by the caller).
        The loss and parts stay on the device until a log row or a checkpoint needs them: reading
        them each step would make the host wait for the GPU instead of preparing the next step."""
        self.tokens, self.predicted, self.sequences = self.tokens + tokens, self.predicted + predicted, \
            self.sequences + sequences
        self.present = {k for k in self.keys[2:] if k in parts}
        self.pending.append((loss, {k: parts[k] for k in self.keys[1:] if k in parts}, weight))

    def _settle(self) -> None:
        """Add the pending micro-batches to the sums, in their order (one transfer from the device)."""
        if not self.pending:
            return
        per_step = {part.part for part in self.logged if part.per == "step"}
        values = iter(torch.stack([t.double() for loss, parts, _ in self.pending
                                   for t in (loss, *parts.values())]).tolist())
        for _, parts, weight in self.pending:
            self.sums["loss"] += next(values)
            for k in parts:  # a loss part is weighted as a micro-batch of the step (its share of the step's loss)
                self.sums[k] += next(values) * (weight if k in per_step else 1)
        self.pending = []

    def flush(self, elapsed: float) -> dict:
        self._settle()
        now = time.perf_counter()
        totals = self.ranks.all_sum([self.sums[k] for k in self.keys] + [self.tokens, self.predicted, self.sequences])
        sums, (tokens, predicted, sequences) = dict(zip(self.keys, totals[:len(self.keys)])), totals[len(self.keys):]
        per = {"step": self.steps, "sequence": sequences, "token": max(tokens, 1), "prediction": max(predicted, 1)}
        row = {"loss": round(sums["loss"] / self.steps, 5),
               "token_accuracy": round(sums["token_correct"] / max(predicted, 1), 5),
               **{part.column: round(sums[part.part] / per[part.per], 5) if part.part in self.present else None
                  for part in self.logged},
               "tokens_per_sec": round(tokens / (now - self.start), 1), "elapsed_sec": round(elapsed, 2)}
        self.__init__(now, self.ranks, self.logged)
        return row


def log_fields(rows: list[dict]) -> list[str]:
    """The log's columns: every run's, with the logged parts of its objective's heads between them."""
    logged = [k for k in (rows[0] if rows else {}) if k not in LOG_HEAD and k not in LOG_TAIL]
    return LOG_HEAD + logged + LOG_TAIL


def write_log(path: Path, rows: list[dict]) -> None:
    """The per-step log as CSV (:func:`log_fields`), for DVC plots and the report."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=log_fields(rows))
        writer.writeheader()
        writer.writerows(rows)
