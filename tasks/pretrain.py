"""Pretrain: a BERT encoder from scratch on masked pretraining data.

One readable loop (after nanoGPT): AdamW with linear warm-up and linear decay,
gradient clipping, a fixed budget of non-padding tokens, MLM logits only at the
masked positions, a CSV log of loss and throughput, and regular checkpoints
from which a killed run resumes where it stopped (same data order, same
optimizer state, same result).

Data order is a pure function of (seed, step) (:class:`tasks.batching.BatchSchedule`:
seeded permutations, length-grouped batches), so a resumed run needs only the
step number to continue the same stream.
"""

from __future__ import annotations

import csv
import math
import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import torch
from transformers import BertForMaskedLM

from tasks.batching import BatchSchedule, flat_positions, pad_batch, ragged
from tasks.modeling import autocast, masked_lm_loss
from tasks.params import Pretrain

LOG_FIELDS = ["step", "tokens", "loss", "mlm_accuracy", "learning_rate", "tokens_per_sec", "elapsed_sec"]


@dataclass
class MaskedExamples:
    """Static masked examples in flat Arrow layout (see :mod:`tasks.batching`)."""

    ids: np.ndarray
    id_offsets: np.ndarray
    positions: np.ndarray
    labels: np.ndarray
    label_offsets: np.ndarray

    @classmethod
    def from_table(cls, table: pa.Table) -> "MaskedExamples":
        ids, id_offsets = ragged(table.column("input_ids"))
        positions, label_offsets = ragged(table.column("masked_positions"))
        labels, _ = ragged(table.column("masked_labels"))
        return cls(ids, id_offsets, positions, labels, label_offsets)

    def __len__(self) -> int:
        return len(self.id_offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.id_offsets)

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        """Padded tensors for the examples ``index`` (``[B]``).

        Returns:
            ``input_ids``, ``attention_mask``: ``int64 [B, Lmax]``; ``rows``, ``cols``,
            ``labels``: ``int64 [M]`` for the ``M`` masked tokens of the batch.
        """
        ids, valid = pad_batch(self.ids, self.id_offsets, index)
        flat, rows = flat_positions(self.label_offsets, index)
        return {
            "input_ids": torch.from_numpy(ids.astype(np.int64)),
            "attention_mask": torch.from_numpy(valid.astype(np.int64)),
            "rows": torch.from_numpy(rows.astype(np.int64)),
            "cols": torch.from_numpy(self.positions[flat].astype(np.int64)),
            "labels": torch.from_numpy(self.labels[flat].astype(np.int64)),
        }


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


def total_steps_for(budget_tokens: int, batch_size: int, mean_length: float) -> int:
    """Steps that spend ``budget_tokens`` non-padding tokens at ``batch_size`` examples per step."""
    return max(1, math.ceil(budget_tokens / (batch_size * mean_length)))


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process: CUDA allocations on GPU, resident set size on CPU (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def train(model: BertForMaskedLM, data: MaskedExamples, cfg: Pretrain, *, seed: int, device: torch.device,
          checkpoint: Path, fingerprint: str, log: Callable[[str], None] = print) -> dict:
    """Pretrain ``model`` on ``data`` for ``cfg.token_budget`` tokens; resume from ``checkpoint``.

    Args:
        checkpoint: file of the rolling checkpoint; it is used only if its
            ``fingerprint`` (hash of params and data) matches, and deleted at the end.
    Returns:
        Summary: steps, tokens, final loss, wall time, throughput, peak memory, and
        the log rows (``LOG_FIELDS``).
    """
    total = total_steps_for(cfg.token_budget, cfg.batch_size, float(data.lengths.mean()))
    model.to(device).train()
    opt = optimizer_for(model, cfg.learning_rate, cfg.weight_decay)
    step, tokens, rows, elapsed_before = 0, 0, [], 0.0
    if checkpoint.is_file():
        state = torch.load(checkpoint, map_location=device, weights_only=False)
        if state.get("fingerprint") == fingerprint:
            model.load_state_dict(state["model"])
            opt.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["rng"])
            step, tokens, rows, elapsed_before = state["step"], state["tokens"], state["rows"], state["elapsed"]
            log(f"resuming from {checkpoint} at step {step}/{total}")
        else:
            log(f"ignoring stale checkpoint {checkpoint} (params or data changed)")
    else:
        torch.manual_seed(seed)

    schedule = BatchSchedule(data.lengths, cfg.batch_size, seed)
    t0 = time.perf_counter()
    window_loss, window_correct, window_masked, window_tokens, window_t = 0.0, 0, 0, 0, t0
    while step < total:
        lr = learning_rate(step, total, cfg.learning_rate, cfg.warmup_fraction)
        for group in opt.param_groups:
            group["lr"] = lr
        batch = {k: v.to(device, non_blocking=True)
                 for k, v in data.batch(schedule(step)).items()}
        with autocast(device):
            loss, correct = masked_lm_loss(model, batch["input_ids"], batch["attention_mask"],
                                           batch["rows"], batch["cols"], batch["labels"])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        n_tok = int(batch["attention_mask"].sum())
        tokens += n_tok
        window_tokens += n_tok
        window_loss += loss.item()
        window_correct += int(correct)
        window_masked += len(batch["labels"])
        if step % cfg.log_every == 0 or step == total:
            now = time.perf_counter()
            n_steps = cfg.log_every if step % cfg.log_every == 0 else step % cfg.log_every
            rows.append({"step": step, "tokens": tokens, "loss": round(window_loss / n_steps, 5),
                         "mlm_accuracy": round(window_correct / max(window_masked, 1), 5),
                         "learning_rate": lr, "tokens_per_sec": round(window_tokens / (now - window_t), 1),
                         "elapsed_sec": round(elapsed_before + now - t0, 2)})
            log(f"step {step}/{total} loss {rows[-1]['loss']:.4f} acc {rows[-1]['mlm_accuracy']:.3f} "
                f"{rows[-1]['tokens_per_sec']:.0f} tokens/s")
            window_loss, window_correct, window_masked, window_tokens, window_t = 0.0, 0, 0, 0, now
        if step % cfg.checkpoint_every == 0 and step < total:
            _save_checkpoint(checkpoint, {"fingerprint": fingerprint, "model": model.state_dict(),
                                          "optimizer": opt.state_dict(), "rng": torch.get_rng_state(),
                                          "step": step, "tokens": tokens, "rows": rows,
                                          "elapsed": elapsed_before + time.perf_counter() - t0})
    wall = elapsed_before + time.perf_counter() - t0
    return {"steps": total, "tokens": tokens, "final_loss": rows[-1]["loss"] if rows else None,
            "final_mlm_accuracy": rows[-1]["mlm_accuracy"] if rows else None, "wall_sec": round(wall, 2),
            "tokens_per_sec": round(tokens / wall, 1) if wall else None,
            "peak_memory_mb": round(peak_memory_mb(device), 1), "rows": rows}


def write_log(path: Path, rows: list[dict]) -> None:
    """The per-step log as CSV (``LOG_FIELDS``), for DVC plots and the report."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
