"""Cost of drawing a pretraining batch (``PretrainingExamples.batch``) from chunked, memory-mapped data.

The pipeline's :class:`tasks.training.batching.RaggedTake` (each example's span looked up
once per offsets list and shared by the columns that have those offsets) vs the former
gather (the spans looked up again for every column: ``take_ragged``, kept here as the peer).
Batches are those of :class:`tasks.training.batching.BatchSchedule` (random, length-grouped)
over the pretraining data of ``--objective`` (``data/pretraining/<objective>-<seed>``, one chunk per
shard; synthetic shards of the same shape when it is missing), in two settings:

* static: ``input_ids`` and the stored ``masked_positions``/``masked_labels``;
* dynamic: ``input_ids`` with ``word_ids`` and ``lex_ids`` on the same offsets (built from the
  static shards' ids; an identity masker, so only the gathering and padding are timed).

Prints batches/s of both and the speed-up, for the whole ``batch`` and for the gathering alone::

    python benchmarks/batching.py [--objective wwm-42] [--batch-size 32] [--batches 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import torch

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.pretraining_data import read_shards
from tasks.training.batching import BatchSchedule, RaggedTake, pad_batch

from results import write_results  # benchmarks/results.py (scripts run from their folder)

ROOT = Path(__file__).resolve().parents[1]


def take_ragged(values, offsets, chunk, row):
    """The peer: the former gather, a Python loop over the batch's examples, once per column."""
    parts = [values[c][offsets[c][r]:offsets[c][r + 1]] for c, r in zip(np.asarray(chunk).tolist(),
                                                                          np.asarray(row).tolist())]
    out_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=out_offsets[1:])
    dtype = values[0].dtype if len(values) else np.int32
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)), out_offsets


def loop_batch(data: PretrainingExamples, index: np.ndarray, step: int = 0) -> dict[str, torch.Tensor]:
    """The peer: ``PretrainingExamples.batch`` as it was, with :func:`take_ragged` (no sentence task)."""
    chunk = np.searchsorted(data.chunk_starts, index, side="right") - 1
    row, local = index - data.chunk_starts[chunk], np.arange(len(index))
    flat_ids, offsets = take_ragged(data.ids, data.id_offsets, chunk, row)
    ids, valid = pad_batch(flat_ids, offsets, local)
    if data.masker is None:
        cols, label_offsets = take_ragged(data.positions, data.label_offsets, chunk, row)
        labels = take_ragged(data.labels, data.label_offsets, chunk, row)[0]
        rows = np.repeat(local, np.diff(label_offsets))
    else:
        words = pad_batch(take_ragged(data.word_ids, data.id_offsets, chunk, row)[0], offsets, local, pad_value=-1)[0]
        lex = pad_batch(take_ragged(data.lex_ids, data.id_offsets, chunk, row)[0], offsets, local, pad_value=-1)[0]
        masked = data.masker(ids, words, lex, step)
        rows, cols = np.nonzero(masked.chosen)
        ids, labels = masked.input_ids, masked.labels[rows, cols]
    out = {"input_ids": ids, "attention_mask": valid, "rows": rows, "cols": cols, "labels": labels,
           "token_type_ids": np.zeros_like(ids)}
    return {k: torch.from_numpy(np.asarray(v).astype(np.int64)) for k, v in out.items()}


def gathers(data: PretrainingExamples, index: np.ndarray, loop: bool) -> list[np.ndarray]:
    """Only the gathering of ``batch`` (every ragged column of the batch's examples, no padding):
    one :class:`RaggedTake` per offsets list, or one :func:`take_ragged` per column (``loop``)."""
    chunk = np.searchsorted(data.chunk_starts, index, side="right") - 1
    row = index - data.chunk_starts[chunk]
    shared = [(data.id_offsets, [data.ids, data.word_ids, data.lex_ids]),
              (data.label_offsets, [data.positions, data.labels])]
    out = []
    for offsets, columns in shared:
        columns = [c for c in columns if c is not None]
        if loop:
            out += [take_ragged(c, offsets, chunk, row)[0] for c in columns]
        elif columns:
            take = RaggedTake(offsets, chunk, row)
            out += [take(c) for c in columns]
    return out


def identity_masker(ids, words, lex, step):
    """Chooses every word token and changes nothing: the batch's cost without the masking."""
    return SimpleNamespace(chosen=words >= 0, input_ids=ids, labels=lex)


def synthetic(shards: int = 10, rows: int = 8192, seed: int = 0) -> pa.Table:
    """Shards shaped like the pipeline's (16 to 128 tokens, 15 % of them predicted), one chunk each."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(shards):
        lengths = rng.integers(16, 129, rows)
        picks = np.maximum(1, (lengths * 0.15).astype(int))
        list_of = lambda n, high: pa.ListArray.from_arrays(  # noqa: E731
            np.r_[0, np.cumsum(n)].astype(np.int32), rng.integers(0, high, int(n.sum())).astype(np.int32))
        batches.append(pa.RecordBatch.from_arrays([list_of(lengths, 21128), list_of(picks, 128), list_of(picks, 21128)],
                                                  names=["input_ids", "masked_positions", "masked_labels"]))
    return pa.Table.from_batches(batches)


def best_rate(fn, batches: list[np.ndarray], repeats: int) -> float:
    """Batches per second, best of ``repeats`` passes over ``batches``."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for step, index in enumerate(batches):
            fn(index, step)
        best = min(best, time.perf_counter() - t0)
    return len(batches) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objective", default="wwm-42", help="folder of data/pretraining to read")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--batches", type=int, default=2000, help="batches per timed pass")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    folder = ROOT / paths.PRETRAINING / args.objective
    try:
        table, source = read_shards(folder), str(folder)
    except SourceError as e:
        print(f"{e}: synthetic shards instead")
        table, source = synthetic(), "synthetic"
    if "masked_positions" not in table.column_names:
        raise SystemExit(f"{folder}: dynamic shards; give a static objective (e.g. --objective wwm-42)")
    static = PretrainingExamples.from_table(table.select(["input_ids", "masked_positions", "masked_labels"]))
    # word and lexicon ids: any int32 values on the token offsets cost the same to gather
    dynamic = PretrainingExamples(static.ids, static.id_offsets, word_ids=[v // 2 for v in static.ids],
                                  lex_ids=[v % 97 - 1 for v in static.ids], masker=identity_masker)
    schedule = BatchSchedule(static.lengths, args.batch_size, seed=0)
    batches = [schedule(step) for step in range(args.batches)]
    tokens = np.mean([static.lengths[b].sum() for b in batches]) / args.batch_size
    labels = float(np.mean(np.concatenate([np.diff(o) for o in static.label_offsets])))
    print(f"{source}: {len(static):,} examples in {len(static.ids)} chunks, batches of {args.batch_size} "
          f"(mean {tokens:.0f} tokens, {labels:.1f} labels an example), {args.batches} batches x {args.repeats}")
    figures = {}
    for name, data in [("static", static), ("dynamic", dynamic)]:
        for index in batches[:50]:  # the same tensors, or the comparison means nothing
            new, old = data.batch(index), loop_batch(data, index)
            assert new.keys() == old.keys() and all(torch.equal(new[k], old[k]) for k in new)
        ours = best_rate(data.batch, batches, args.repeats)
        peer = best_rate(lambda index, step: loop_batch(data, index, step), batches, args.repeats)
        print(f"{name:>8}: RaggedTake {ours:,.0f} batches/s ({1e6 / ours:.0f} us), per-example loop "
              f"{peer:,.0f} batches/s ({1e6 / peer:.0f} us), x{ours / peer:.2f}")
        gather = best_rate(lambda index, step: gathers(data, index, loop=False), batches, args.repeats)
        loop = best_rate(lambda index, step: gathers(data, index, loop=True), batches, args.repeats)
        print(f"{'':>8}  gathering alone: RaggedTake {1e6 / gather:.0f} us, per-example loop {1e6 / loop:.0f} us, "
              f"x{gather / loop:.2f}")
        figures[name] = {"batches_per_sec": round(ours), "loop_batches_per_sec": round(peer),
                         "speedup": round(ours / peer, 2), "gather_per_sec": round(gather),
                         "loop_gather_per_sec": round(loop), "gather_speedup": round(gather / loop, 2)}
    write_results("batching", {"source": source, "examples": len(static), "chunks": len(static.ids),
                               "batch_size": args.batch_size, "mean_tokens": round(float(tokens), 1),
                               "mean_labels": round(labels, 1), "batches": args.batches, "repeats": args.repeats},
                  figures)


if __name__ == "__main__":
    main()
