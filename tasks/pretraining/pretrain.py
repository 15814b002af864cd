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
from contextlib import nullcontext
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
from tasks.training.batching import BatchSchedule, RaggedTake, pad_batch, ragged
from tasks.training.device import autocast
from tasks.training.distributed import Ranks, split_batch, wrap
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
    """Pretraining examples in flat Arrow layout, chunked (see :mod:`tasks.training.batching` and the
    shard columns in :mod:`tasks.pretraining.pretraining_data`): static (positions and labels stored)
    or dynamic (word ids stored, masked by ``masker`` at batch time).

    Out of core, after Megatron-LM's memory-mapped indexed datasets: each ragged field is a
    list with one flat array per chunk (one per shard of
    :func:`tasks.pretraining.pretraining_data.read_shards`: views of the memory-mapped
    files, nothing copied; a single array is one chunk). Example ``i`` is row
    ``i - chunk_starts[c]`` of chunk ``c``, the last with ``chunk_starts[c] <= i``;
    :meth:`batch` reads only its examples' values. Memory holds the ``[N]`` per-example
    arrays (``lengths``, ``segment_b``, ``sentence_labels``: 4 to 9 bytes an example) and
    the pages that batches touch (file-backed: the kernel drops them under pressure).

    Attributes:
        ids: per chunk ``c``, ``int32 [T_c]`` token ids ([CLS] ... [SEP], corrupted when static).
        id_offsets: per chunk, ``int [N_c + 1]``: example ``r`` is ``ids[c][id_offsets[c][r]:id_offsets[c][r + 1]]``.
        positions, labels: static, per chunk, ``int32 [M_c]`` positions to predict and their labels,
            with offsets ``label_offsets`` (``int [N_c + 1]``).
        word_ids, lex_ids: dynamic, per chunk, ``int32 [T_c]`` word index and lexicon entry per
            token (-1 for specials), with the offsets ``id_offsets``.
        segment_b: ``int32 [N]`` first position of segment B; sentence_labels: ``int8 [N]``
            NSP/SOP labels (both None without a sentence task).
        masker: the batch-time masker of dynamic data (None: static).
        lengths: ``int32 [N]`` tokens per example (derived); chunk_starts: ``int64 [C + 1]``
            first example of each chunk, then ``N`` (derived).
    """

    ids: list[np.ndarray]
    id_offsets: list[np.ndarray]
    positions: list[np.ndarray] | None = None
    labels: list[np.ndarray] | None = None
    label_offsets: list[np.ndarray] | None = None
    word_ids: list[np.ndarray] | None = None
    lex_ids: list[np.ndarray] | None = None
    segment_b: np.ndarray | None = None
    sentence_labels: np.ndarray | None = None
    masker: DynamicMasker | None = None

    def __post_init__(self) -> None:
        for name in ("ids", "id_offsets", "positions", "labels", "label_offsets", "word_ids", "lex_ids"):
            if isinstance(getattr(self, name), np.ndarray):  # one flat array (e.g. built in memory) is one chunk
                setattr(self, name, [getattr(self, name)])
        counts = [len(o) - 1 for o in self.id_offsets]
        self.chunk_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self.lengths = np.concatenate([np.diff(o) for o in self.id_offsets]) if counts else np.zeros(0, np.int32)

    @classmethod
    def from_table(cls, table: pa.Table, masker: DynamicMasker | None = None) -> "PretrainingExamples":
        """The examples of a table of shard rows, one chunk per record batch, zero-copy (so
        memory-mapped when ``table`` comes from :func:`tasks.pretraining.pretraining_data.read_shards`).

        Raises: SourceError: static shards given a masker, or dynamic shards without one.
        """
        columns = set(table.column_names)
        if ("word_ids" in columns) != (masker is not None):
            raise SourceError("pretraining data and objective disagree on dynamic masking: rerun pretraining_data")
        batches = table.to_batches()  # the columns cut into the same chunks, zero-copy

        def chunks(name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
            pairs = [ragged(b.column(name)) for b in batches]
            return [v for v, _ in pairs], [o for _, o in pairs]

        ids, id_offsets = chunks("input_ids")
        fields = {}
        if masker is None:
            fields["positions"], fields["label_offsets"] = chunks("masked_positions")
            fields["labels"] = chunks("masked_labels")[0]
        else:  # word (and lexicon) ids have one value per token: the offsets of input_ids
            fields["word_ids"] = chunks("word_ids")[0]
            if "lex_ids" in columns:
                fields["lex_ids"] = chunks("lex_ids")[0]
        if "sentence_label" in columns:
            fields["segment_b"] = table.column("segment_b").to_numpy()
            fields["sentence_labels"] = table.column("sentence_label").to_numpy()
        return cls(ids, id_offsets, masker=masker, **fields)

    def __len__(self) -> int:
        return int(self.chunk_starts[-1])

    def batch(self, index: np.ndarray, step: int = 0) -> dict[str, torch.Tensor]:
        """Padded tensors for the examples ``index`` (``int [B]``) at training step ``step``.

        Returns:
            ``input_ids``, ``attention_mask``, ``token_type_ids``: ``int64 [B, Lmax]``;
            ``rows``, ``cols``, ``labels``: ``int64 [M]`` for the ``M`` predicted
            tokens of the batch; ``sentence_labels``: ``int64 [B]`` with NSP/SOP.
        Raises:
            IndexError: an index outside ``[0, N)``.
        """
        index = np.asarray(index)
        if len(index) and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"example index outside [0, {len(self)}): {index.tolist()}")
        chunk = np.searchsorted(self.chunk_starts, index, side="right") - 1
        row, local = index - self.chunk_starts[chunk], np.arange(len(index))
        # one gather index per offsets list, shared by every column that has those offsets
        tokens = RaggedTake(self.id_offsets, chunk, row)
        ids, valid = pad_batch(tokens(self.ids), tokens.offsets, local)
        if self.masker is None:
            predicted = RaggedTake(self.label_offsets, chunk, row)
            cols, labels = predicted(self.positions), predicted(self.labels)
            rows = np.repeat(local, np.diff(predicted.offsets))
        else:
            words = pad_batch(tokens(self.word_ids), tokens.offsets, local, pad_value=-1)[0]
            lex = (pad_batch(tokens(self.lex_ids), tokens.offsets, local, pad_value=-1)[0]
                   if self.lex_ids is not None else None)
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


def pretrain_checkpoint(objective: str, params, spec, masking: MaskingConfig,
                        init_folder: Path | None = None) -> tuple[Path, str]:
    """The rolling checkpoint file of ``pretrain@<objective>`` and its fingerprint: a checkpoint
    is reused only by a run with the same params and inputs (the masking params,
    ``pretraining_data``, act at batch time under dynamic masking; ``init_folder``, the
    ``pretrain.init_from`` checkpoint, is hashed file by file, since DVC does not track it)."""
    lexicon = [paths.LEXICON] if spec.dynamic and masking.similar else []
    init = [init_folder] if init_folder is not None else []
    fingerprint = checkpoint_fingerprint(
        "pretrain", objective, params.model, params.pretrain, spec, params.pretraining_data, params.seed,
        data=[paths.PRETRAINING / objective, paths.TOKENIZER] + lexicon + init)
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


def micro_batches(data: PretrainingExamples, index: np.ndarray, step: int, ranks: Ranks,
                  accumulation_steps: int) -> list[dict[str, torch.Tensor]]:
    """This rank's micro-batches of the global batch ``index`` (:func:`tasks.training.distributed.split_batch`).

    Static data: each rank gathers only its own rows. Dynamic masking draws the masks of the
    whole global batch (the same draws as one process) and keeps this rank's rows.

    Raises:
        ParamsError: the global batch does not split over processes and accumulation steps.
    """
    mine = split_batch(index, ranks, accumulation_steps, "pretrain.batch_size")
    if data.masker is None:
        return [data.batch(part, step) for part in mine]
    full, size = data.batch(index, step), len(mine[0])
    first = ranks.rank * accumulation_steps * size
    return [_rows(full, first + m * size, first + (m + 1) * size) for m in range(accumulation_steps)]


def _rows(batch: dict[str, torch.Tensor], lo: int, hi: int) -> dict[str, torch.Tensor]:
    """Rows ``lo:hi`` of a batch of :meth:`PretrainingExamples.batch`, padding trimmed."""
    keep = (batch["rows"] >= lo) & (batch["rows"] < hi)
    width = int(batch["attention_mask"][lo:hi].sum(1).max())
    out = {k: batch[k][lo:hi, :width] for k in ("input_ids", "attention_mask", "token_type_ids")}
    out.update(rows=batch["rows"][keep] - lo, cols=batch["cols"][keep], labels=batch["labels"][keep])
    for key in ("sentence_labels", "groups"):  # [B]: one per row (groups: fast MLM's languages)
        if key in batch:
            out[key] = batch[key][lo:hi]
    return out


@stage_task
def train(model: PretrainingModel, data: PretrainingExamples, cfg: Pretrain, *, seed: int, device: torch.device,
          checkpoint: Path, fingerprint: str, log: Callable[[str], None] = print, ranks: Ranks = Ranks()) -> dict:
    """Pretrain ``model`` on ``data`` for ``cfg.token_budget`` tokens; resume from ``checkpoint``.

    Each optimizer step consumes one global batch of ``cfg.batch_size`` examples, split over
    ``ranks.world`` DDP processes and ``cfg.accumulation_steps`` micro-batches
    (:func:`micro_batches`). Each micro-batch's mean losses are weighted by its share of the
    global batch's predicted tokens (MLM) and sequences (NSP/SOP), so the summed gradient is
    the global batch's mean-loss gradient: the loss curve does not depend on the number of
    processes or accumulation steps, up to float rounding (tests/test_distributed.py). With one
    process and one micro-batch the step is the plain one, unweighted.

    Args:
        checkpoint: file of the rolling checkpoint, written by rank 0 every ``cfg.checkpoint_every``
            steps (the caller deletes it once the model is saved). It is resumed only if
            its ``fingerprint`` (:func:`checkpoint_fingerprint`) matches; a stale,
            truncated or unreadable one is logged and training starts from scratch.
        fingerprint: identifies the run (params and data).
        log: receives progress lines and warnings (called on rank 0 only).
        ranks: this process among the DDP processes (:func:`tasks.training.distributed.process_group`).
    Returns:
        Summary: steps, tokens, final loss, wall time, throughput, peak memory, and
        the log rows (``LOG_FIELDS``), the same on every rank.
    Raises:
        ParamsError: the global batch does not split over processes and accumulation steps.
    """
    log = log if ranks.is_main else (lambda _: None)
    total = total_steps_for(cfg.token_budget, cfg.batch_size, float(data.lengths.mean()))
    model.to(device).train()
    opt = optimizer_for(model, cfg.learning_rate, cfg.weight_decay, fused=cfg.fused_adamw)
    step, tokens, rows, elapsed_before = 0, 0, [], 0.0
    state = _load_checkpoint(checkpoint, fingerprint, log)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])  # moves the state to the parameters' device
        _set_rng_states(state, ranks, device)
        step, tokens, rows, elapsed_before = state["step"], state["tokens"], state["rows"], state["elapsed"]
        log(f"resuming from {checkpoint} at step {step}/{total}")
    else:
        torch.manual_seed(seed + ranks.rank)  # rank 0 draws as a single process does
    # PerLM predicts with its position head: the MLM head's transform gets no gradient.
    net = wrap(model, ranks, device, find_unused_parameters=model.position_head is not None)
    accumulate = ranks.world > 1 or cfg.accumulation_steps > 1

    schedule = BatchSchedule(data.lengths, cfg.batch_size, seed)
    t0 = time.perf_counter()
    window = _Window(t0, ranks)
    while step < total:
        lr = learning_rate(step, total, cfg.learning_rate, cfg.warmup_fraction)
        for group in opt.param_groups:
            group["lr"] = lr
        index = schedule(step)
        micro = micro_batches(data, index, step, ranks, cfg.accumulation_steps)
        if accumulate:  # shares of the global batch; DDP averages gradients over ranks, hence x world
            predicted = ranks.all_sum([float(sum(len(b["labels"]) for b in micro))])[0]
            for b in micro:
                b["token_weight"] = torch.tensor(ranks.world * len(b["labels"]) / predicted)
                b["sentence_weight"] = torch.tensor(ranks.world * len(b["input_ids"]) / len(index))
        for m, batch in enumerate(micro):
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            sync = m == len(micro) - 1 or ranks.world == 1
            with (nullcontext() if sync else net.no_sync()), autocast(device, cfg.bf16):
                loss, parts = net(batch)
            loss.backward()
            weight = 1.0 / ranks.world if accumulate else 1.0  # this micro-batch's part of the step's loss
            window.add(loss.detach() * weight, parts, int(batch["attention_mask"].sum()), len(batch["labels"]),
                       len(batch["input_ids"]), sentence_weight=weight)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        window.steps += 1
        step += 1
        tokens += int(data.lengths[index].sum())
        if step % cfg.log_every == 0 or step == total:
            rows.append({"step": step, "tokens": tokens, "learning_rate": lr,
                         **window.flush(elapsed_before + time.perf_counter() - t0)})
            log(f"step {step}/{total} loss {rows[-1]['loss']:.4f} acc {rows[-1]['token_accuracy']:.3f} "
                f"{rows[-1]['tokens_per_sec']:.0f} tokens/s")
        if step % cfg.checkpoint_every == 0 and step < total:
            # The data order and the dynamic masks are pure functions of (seed, step): ``step``
            # is their whole state; numpy's and Python's global generators are not used.
            rng = _rng_states(ranks, device)
            if ranks.is_main:
                _save_checkpoint(checkpoint, {
                    "fingerprint": fingerprint, "model": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "tokens": tokens, "rows": rows,
                    "elapsed": elapsed_before + time.perf_counter() - t0, **rng})
    wall = elapsed_before + time.perf_counter() - t0
    last = rows[-1] if rows else {}
    return {"steps": total, "tokens": tokens, "final_loss": last.get("loss"),
            "final_token_accuracy": last.get("token_accuracy"),
            "final_sentence_accuracy": last.get("sentence_accuracy"), "wall_sec": round(wall, 2),
            "tokens_per_sec": round(tokens / wall, 1) if wall else None,
            "peak_memory_mb": round(peak_memory_mb(device), 1), "rows": rows}


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
    """Sums of the steps since the last log row (this rank's; summed over ranks when flushed)."""

    def __init__(self, start: float, ranks: Ranks = Ranks()):
        self.start, self.ranks = start, ranks
        self.steps = self.tokens = self.predicted = self.sequences = 0
        self.has_sentence = False
        self.sums = {"loss": 0.0, "token_correct": 0, "sentence_loss": 0.0, "sentence_correct": 0}

    def add(self, loss, parts, tokens: int, predicted: int, sequences: int, sentence_weight: float = 1.0) -> None:
        """One micro-batch: its weighted loss, its parts and counts (``steps`` is counted by the caller)."""
        self.tokens, self.predicted, self.sequences = self.tokens + tokens, self.predicted + predicted, \
            self.sequences + sequences
        self.sums["loss"] += loss.item()
        self.has_sentence = "sentence_loss" in parts
        for k in ("token_correct", "sentence_loss", "sentence_correct"):
            if k in parts:
                self.sums[k] += parts[k].item() * (sentence_weight if k == "sentence_loss" else 1)

    def flush(self, elapsed: float) -> dict:
        now = time.perf_counter()
        has_sentence = self.has_sentence
        keys = ("loss", "token_correct", "sentence_loss", "sentence_correct")
        totals = self.ranks.all_sum([self.sums[k] for k in keys] + [self.tokens, self.predicted, self.sequences])
        sums, (tokens, predicted, sequences) = dict(zip(keys, totals[:4])), totals[4:]
        row = {"loss": round(sums["loss"] / self.steps, 5),
               "token_accuracy": round(sums["token_correct"] / max(predicted, 1), 5),
               "sentence_loss": round(sums["sentence_loss"] / self.steps, 5) if has_sentence else None,
               "sentence_accuracy": round(sums["sentence_correct"] / sequences, 5) if has_sentence else None,
               "tokens_per_sec": round(tokens / (now - self.start), 1), "elapsed_sec": round(elapsed, 2)}
        self.__init__(now, self.ranks)
        return row


def write_log(path: Path, rows: list[dict]) -> None:
    """The per-step log as CSV (``LOG_FIELDS``), for DVC plots and the report."""
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=LOG_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
