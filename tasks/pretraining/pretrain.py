"""Pretrain: a BERT encoder from scratch on masked pretraining data.

One readable loop (after nanoGPT): AdamW with linear warm-up and linear decay,
gradient clipping, a fixed budget of non-padding tokens, predictions only at the
chosen positions (:class:`tasks.pretraining.modeling.PretrainingModel`: MLM or PerLM, plus
NSP/SOP), static or dynamic masking, a CSV log of loss and throughput, and
regular checkpoints from which a killed run resumes where it stopped (same data
order, same masks, same optimizer state, same result).

Data order is a pure function of (seed, step) (:class:`tasks.training.batching.BatchSchedule`:
seeded permutations, length-grouped batches), so a resumed run needs only the
step number to continue the same stream. Checkpoints hold only tensors and plain
values and are read with ``torch.load(weights_only=True)``: a crafted file runs no code.
:func:`train` is the Prefect task of stages ``pretrain`` and ``continue_pretrain``;
:func:`objective_masker` and :func:`pretrain_checkpoint` give ``pretrain`` its masker and checkpoint.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os
import pickle
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from pydantic import BaseModel

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.io import sha256_tree
from tasks.core.params import Pretrain
from tasks.core.rng import named_rng
from tasks.core.stage import stage_task
from tasks.corpus.similar_words import SimilarWords, similar_words_from_table
from tasks.corpus.tokenize import random_token_ids
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.modeling import PretrainingModel
from tasks.training.batching import BatchSchedule, flat_positions, pad_batch, ragged
from tasks.training.device import autocast
from tasks.training.optim import learning_rate, optimizer_for

LOG_FIELDS = ["step", "tokens", "loss", "token_accuracy", "sentence_loss", "sentence_accuracy", "learning_rate",
              "tokens_per_sec", "elapsed_sec"]


@dataclass
class DynamicMasker:
    """Masks a batch when it is drawn (dynamic masking, RoBERTa §4.1) with
    :func:`tasks.pretraining.masking.mask_batch`, the function that writes static data.

    The generator of step ``s`` is seeded by ``(seed, objective, s)``, so a
    resumed run draws the same masks as an uninterrupted one.
    """

    config: MaskingConfig
    seed: int
    objective: str
    mask_token_id: int
    random_token_ids: np.ndarray
    similar: SimilarWords | None = None

    def __call__(self, input_ids: np.ndarray, word_ids: np.ndarray, lex_ids: np.ndarray | None, step: int):
        rng = named_rng(self.seed, self.objective, step)
        return mask_batch(input_ids, word_ids, self.config, rng, mask_token_id=self.mask_token_id,
                          random_token_ids=self.random_token_ids, lex_ids=lex_ids, similar=self.similar)


@dataclass
class PretrainingExamples:
    """Pretraining examples in flat Arrow layout (see :mod:`tasks.training.batching` and the shard
    columns in :mod:`tasks.pretraining.pretraining_data`): static (positions and labels stored) or
    dynamic (word ids stored, masked by ``masker`` at batch time)."""

    ids: np.ndarray
    id_offsets: np.ndarray
    positions: np.ndarray | None = None
    labels: np.ndarray | None = None
    label_offsets: np.ndarray | None = None
    word_ids: np.ndarray | None = None
    lex_ids: np.ndarray | None = None
    segment_b: np.ndarray | None = None
    sentence_labels: np.ndarray | None = None
    masker: DynamicMasker | None = None

    @classmethod
    def from_table(cls, table: pa.Table, masker: DynamicMasker | None = None) -> "PretrainingExamples":
        """Raises: SourceError: static shards given a masker, or dynamic shards without one."""
        columns = set(table.column_names)
        ids, id_offsets = ragged(table.column("input_ids"))
        out = cls(ids, id_offsets, masker=masker)
        if ("word_ids" in columns) != (masker is not None):
            raise SourceError("pretraining data and objective disagree on dynamic masking: rerun pretraining_data")
        if masker is None:
            out.positions, out.label_offsets = ragged(table.column("masked_positions"))
            out.labels, _ = ragged(table.column("masked_labels"))
        else:
            out.word_ids, _ = ragged(table.column("word_ids"))
            if "lex_ids" in columns:
                out.lex_ids, _ = ragged(table.column("lex_ids"))
        if "sentence_label" in columns:
            out.segment_b = table.column("segment_b").to_numpy()
            out.sentence_labels = table.column("sentence_label").to_numpy().astype(np.int64)
        return out

    def __len__(self) -> int:
        return len(self.id_offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.id_offsets)

    def batch(self, index: np.ndarray, step: int = 0) -> dict[str, torch.Tensor]:
        """Padded tensors for the examples ``index`` (``[B]``) at training step ``step``.

        Returns:
            ``input_ids``, ``attention_mask``, ``token_type_ids``: ``int64 [B, Lmax]``;
            ``rows``, ``cols``, ``labels``: ``int64 [M]`` for the ``M`` predicted
            tokens of the batch; ``sentence_labels``: ``int64 [B]`` with NSP/SOP.
        """
        ids, valid = pad_batch(self.ids, self.id_offsets, index)
        if self.masker is None:
            flat, rows = flat_positions(self.label_offsets, index)
            cols, labels = self.positions[flat], self.labels[flat]
        else:
            words, _ = pad_batch(self.word_ids, self.id_offsets, index, pad_value=-1)
            lex = pad_batch(self.lex_ids, self.id_offsets, index, pad_value=-1)[0] if self.lex_ids is not None else None
            masked = self.masker(ids, words, lex, step)
            rows, cols = np.nonzero(masked.chosen)
            ids, labels = masked.input_ids, masked.labels[rows, cols]
        out = {"input_ids": ids, "attention_mask": valid, "rows": rows, "cols": cols, "labels": labels,
               "token_type_ids": np.zeros_like(ids)}
        if self.sentence_labels is not None:
            b = self.segment_b[index]
            out["token_type_ids"] = valid & (np.arange(ids.shape[1])[None, :] >= b[:, None])
            out["sentence_labels"] = self.sentence_labels[index]
        return {k: torch.from_numpy(np.asarray(v).astype(np.int64)) for k, v in out.items()}


def total_steps_for(budget_tokens: int, batch_size: int, mean_length: float) -> int:
    """Steps that spend ``budget_tokens`` non-padding tokens at ``batch_size`` examples per step."""
    return max(1, math.ceil(budget_tokens / (batch_size * mean_length)))


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory of this process: CUDA allocations on GPU, resident set size on CPU (MiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def checkpoint_fingerprint(*parts, data: Iterable[Path] = ()) -> str:
    """Hex SHA-256 identifying a training run, for :func:`train`'s rolling checkpoint.

    Args:
        parts: everything that changes the result: params objects (pydantic
            models, hashed as their JSON ``model_dump``) and plain JSON values.
        data: files or folders the run reads, hashed with :func:`tasks.core.io.sha256_tree`.
    Returns:
        The SHA-256 of the canonical JSON (sorted keys) of the parts and data hashes.
    """
    dumped = [p.model_dump(mode="json") if isinstance(p, BaseModel) else p for p in parts]
    hashes = [sha256_tree(d) for d in data]
    return hashlib.sha256(json.dumps([dumped, hashes], sort_keys=True).encode()).hexdigest()


def objective_masker(objective: str, spec, masking: MaskingConfig, seed: int, tokenizer,
                     lexicon: Path) -> DynamicMasker | None:
    """The batch-time masker of a dynamic objective (with the similar words of ``lexicon``
    when its scheme replaces words by similar ones); None under static masking."""
    if not spec.dynamic:
        return None
    similar = similar_words_from_table(pq.read_table(lexicon)) if masking.similar else None
    return DynamicMasker(masking, seed, objective, tokenizer.mask_token_id, random_token_ids(tokenizer), similar)


def pretrain_checkpoint(objective: str, params, spec, masking: MaskingConfig) -> tuple[Path, str]:
    """The rolling checkpoint file of ``pretrain@<objective>`` and its fingerprint: a checkpoint
    is reused only by a run with the same params and inputs (the masking params,
    ``pretraining_data``, act at batch time under dynamic masking)."""
    lexicon = [paths.LEXICON] if spec.dynamic and masking.similar else []
    fingerprint = checkpoint_fingerprint(
        "pretrain", objective, params.model, params.pretrain, spec, params.pretraining_data, params.seed,
        data=[paths.PRETRAINING / objective, paths.TOKENIZER] + lexicon)
    return paths.CHECKPOINTS / "pretrain" / objective / "last.pt", fingerprint


def _save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _load_checkpoint(path: Path, fingerprint: str, log: Callable[[str], None]) -> dict | None:
    """The state saved at ``path`` if it is readable and has ``fingerprint``, else None (logged)."""
    if not path.is_file():
        return None
    try:  # weights_only: tensors and plain values only; unpickling a crafted file runs no code
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        log(f"warning: ignoring checkpoint {path}: it holds objects other than tensors and plain values "
            "(corrupt, or not written by this pipeline); training from scratch")
        return None
    except Exception as e:  # truncated or corrupt (zip or storage errors): any means a restart
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        log(f"warning: ignoring unreadable checkpoint {path} ({reason}); training from scratch")
        return None
    if not isinstance(state, dict) or state.get("fingerprint") != fingerprint:
        log(f"ignoring stale checkpoint {path} (params or data changed); training from scratch")
        return None
    return state


@stage_task
def train(model: PretrainingModel, data: PretrainingExamples, cfg: Pretrain, *, seed: int, device: torch.device,
          checkpoint: Path, fingerprint: str, log: Callable[[str], None] = print) -> dict:
    """Pretrain ``model`` on ``data`` for ``cfg.token_budget`` tokens; resume from ``checkpoint``.

    Args:
        checkpoint: file of the rolling checkpoint, written every ``cfg.checkpoint_every``
            steps (the caller deletes it once the model is saved). It is resumed only if
            its ``fingerprint`` (:func:`checkpoint_fingerprint`) matches; a stale,
            truncated or unreadable one is logged and training starts from scratch.
        fingerprint: identifies the run (params and data).
        log: receives progress lines and warnings.
    Returns:
        Summary: steps, tokens, final loss, wall time, throughput, peak memory, and
        the log rows (``LOG_FIELDS``).
    """
    total = total_steps_for(cfg.token_budget, cfg.batch_size, float(data.lengths.mean()))
    model.to(device).train()
    opt = optimizer_for(model, cfg.learning_rate, cfg.weight_decay)
    step, tokens, rows, elapsed_before = 0, 0, [], 0.0
    state = _load_checkpoint(checkpoint, fingerprint, log)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])  # moves the state to the parameters' device
        torch.set_rng_state(state["rng"])
        if device.type == "cuda" and "cuda_rng" in state:  # dropout on GPU draws from the CUDA generator
            torch.cuda.set_rng_state(state["cuda_rng"], device)
        step, tokens, rows, elapsed_before = state["step"], state["tokens"], state["rows"], state["elapsed"]
        log(f"resuming from {checkpoint} at step {step}/{total}")
    else:
        torch.manual_seed(seed)

    schedule = BatchSchedule(data.lengths, cfg.batch_size, seed)
    t0 = time.perf_counter()
    window = _Window(t0)
    while step < total:
        lr = learning_rate(step, total, cfg.learning_rate, cfg.warmup_fraction)
        for group in opt.param_groups:
            group["lr"] = lr
        batch = {k: v.to(device, non_blocking=True)
                 for k, v in data.batch(schedule(step), step).items()}
        with autocast(device):
            loss, parts = model(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        n_tok = int(batch["attention_mask"].sum())
        tokens += n_tok
        window.add(loss, parts, n_tok, len(batch["labels"]), len(batch["input_ids"]))
        if step % cfg.log_every == 0 or step == total:
            rows.append({"step": step, "tokens": tokens, "learning_rate": lr,
                         **window.flush(elapsed_before + time.perf_counter() - t0)})
            log(f"step {step}/{total} loss {rows[-1]['loss']:.4f} acc {rows[-1]['token_accuracy']:.3f} "
                f"{rows[-1]['tokens_per_sec']:.0f} tokens/s")
        if step % cfg.checkpoint_every == 0 and step < total:
            # The data order and the dynamic masks are pure functions of (seed, step): ``step``
            # is their whole state; numpy's and Python's global generators are not used.
            state = {"fingerprint": fingerprint, "model": model.state_dict(), "optimizer": opt.state_dict(),
                     "rng": torch.get_rng_state(), "step": step, "tokens": tokens, "rows": rows,
                     "elapsed": elapsed_before + time.perf_counter() - t0}
            if device.type == "cuda":
                state["cuda_rng"] = torch.cuda.get_rng_state(device)
            _save_checkpoint(checkpoint, state)
    wall = elapsed_before + time.perf_counter() - t0
    last = rows[-1] if rows else {}
    return {"steps": total, "tokens": tokens, "final_loss": last.get("loss"),
            "final_token_accuracy": last.get("token_accuracy"),
            "final_sentence_accuracy": last.get("sentence_accuracy"), "wall_sec": round(wall, 2),
            "tokens_per_sec": round(tokens / wall, 1) if wall else None,
            "peak_memory_mb": round(peak_memory_mb(device), 1), "rows": rows}


class _Window:
    """Sums of the steps since the last log row."""

    def __init__(self, start: float):
        self.start = start
        self.steps = self.tokens = self.predicted = self.sequences = 0
        self.has_sentence = False
        self.sums = {"loss": 0.0, "token_correct": 0, "sentence_loss": 0.0, "sentence_correct": 0}

    def add(self, loss, parts, tokens: int, predicted: int, sequences: int) -> None:
        self.steps, self.tokens = self.steps + 1, self.tokens + tokens
        self.predicted, self.sequences = self.predicted + predicted, self.sequences + sequences
        self.sums["loss"] += loss.item()
        self.has_sentence = "sentence_loss" in parts
        for k in ("token_correct", "sentence_loss", "sentence_correct"):
            if k in parts:
                self.sums[k] += parts[k].item()

    def flush(self, elapsed: float) -> dict:
        now = time.perf_counter()
        has_sentence = self.has_sentence
        row = {"loss": round(self.sums["loss"] / self.steps, 5),
               "token_accuracy": round(self.sums["token_correct"] / max(self.predicted, 1), 5),
               "sentence_loss": round(self.sums["sentence_loss"] / self.steps, 5) if has_sentence else None,
               "sentence_accuracy": round(self.sums["sentence_correct"] / self.sequences, 5) if has_sentence
               else None,
               "tokens_per_sec": round(self.tokens / (now - self.start), 1), "elapsed_sec": round(elapsed, 2)}
        self.__init__(now)
        return row


def write_log(path: Path, rows: list[dict]) -> None:
    """The per-step log as CSV (``LOG_FIELDS``), for DVC plots and the report."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
