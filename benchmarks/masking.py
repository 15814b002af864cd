"""Throughput and peak memory of MLM and WWM masking (tasks/masking.py).

Masks packed batches of ``N x L`` tokens and prints tokens/s and the peak memory
that masking allocates (tracemalloc, which sees NumPy's buffers). Uses the
pipeline's packed data when ``data/tokens/sentences.parquet`` exists, otherwise
synthetic rows with 1-4 token words (jieba's mean word length on People's Daily
is about 1.6 characters)::

    python benchmarks/masking.py [--rows 8192] [--length 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from pathlib import Path

import numpy as np

from tasks.masking import MaskingConfig, mask_batch

TOKENS = Path("data/tokens/sentences.parquet")


def synthetic(rows: int, length: int, vocab: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    input_ids = rng.integers(5, vocab, (rows, length), dtype=np.int32)
    word_lengths = rng.choice([1, 2, 3, 4], size=(rows, length), p=[0.45, 0.45, 0.07, 0.03])
    starts = np.zeros((rows, length), dtype=bool)
    for r in range(rows):  # word starts at cumulative word lengths
        cuts = np.cumsum(word_lengths[r])
        starts[r, cuts[cuts < length]] = True
    word_ids = np.cumsum(starts, axis=1).astype(np.int32)
    word_ids[:, 0] = word_ids[:, -1] = -1  # [CLS], [SEP]
    return input_ids, word_ids


def real(rows: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow.parquet as pq

    from tasks.pretraining_data import pack_documents

    table = pq.read_table(TOKENS)
    ids = [np.asarray(x, dtype=np.int32) for x in table.column("input_ids").to_pylist()]
    words = [np.asarray(x, dtype=np.int32) for x in table.column("word_ids").to_pylist()]
    packed = pack_documents(table.column("doc_id").to_pylist(), ids, words, length, cls_id=2, sep_id=3)
    reps = -(-rows // len(packed.input_ids))
    return np.tile(packed.input_ids, (reps, 1))[:rows], np.tile(packed.word_ids, (reps, 1))[:rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    input_ids, word_ids = real(args.rows, args.length) if TOKENS.exists() else synthetic(
        args.rows, args.length, 21128, rng)
    tokens = int((word_ids >= 0).sum())
    print(f"data: {'pipeline tokens' if TOKENS.exists() else 'synthetic'}, {args.rows} rows x {args.length}, "
          f"{tokens:,} maskable tokens")
    random_ids = np.arange(5, 21128, dtype=np.int32)
    for scheme in ("mlm", "wwm"):
        config = MaskingConfig(scheme=scheme)
        tracemalloc.start()
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            mask_batch(input_ids, word_ids, config, rng, mask_token_id=4, random_token_ids=random_ids)
            best = min(best, time.perf_counter() - t0)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{scheme}: {tokens / best / 1e6:6.2f} M tokens/s (best of {args.repeats}), "
              f"peak {peak / 2**20:6.1f} MiB ({peak / input_ids.size:.1f} bytes/token)")


if __name__ == "__main__":
    main()
