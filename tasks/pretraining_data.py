"""Pretraining data: pack sentences into sequences and mask them (static masking).

Packing follows BERT's ``create_pretraining_data.py``: consecutive sentences of
one document fill a sequence of at most ``max_seq_length`` tokens including
[CLS] and [SEP]; a sequence never crosses a document boundary, and a sentence
longer than a sequence is cut into pieces. ``dupe_factor`` copies of the packed
corpus are masked with different random draws (BERT's duplication factor).

Shard schema (``data/pretraining/<objective>/shard-NNNNN.parquet``):

================  ==============  =====================================================
column            type            meaning
================  ==============  =====================================================
input_ids         list<int32>     corrupted sequence, [CLS] ... [SEP], no padding
masked_positions  list<int32>     positions to predict, ascending
masked_labels     list<int32>     original token id at each of those positions
================  ==============  =====================================================
"""

from __future__ import annotations

import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.errors import SourceError
from tasks.io import write_parquet
from tasks.masking import MaskingConfig, mask_batch

SHARD_SCHEMA = pa.schema([("input_ids", pa.list_(pa.int32())), ("masked_positions", pa.list_(pa.int32())),
                          ("masked_labels", pa.list_(pa.int32()))])


@dataclass
class Packed:
    """Packed sequences, padded.

    Attributes:
        input_ids: ``int32 [N, L]``, [CLS] tokens [SEP] then [PAD] (0).
        word_ids: ``int32 [N, L]``, dense word index per token within its row, -1
            for [CLS], [SEP] and padding.
        lengths: ``int32 [N]`` tokens per row including [CLS] and [SEP].
    """

    input_ids: np.ndarray
    word_ids: np.ndarray
    lengths: np.ndarray


def _dense(word_ids: np.ndarray) -> np.ndarray:
    """Renumber non-decreasing word ids as 0, 1, 2, ... without gaps."""
    if word_ids.size == 0:
        return word_ids
    return np.concatenate([[0], np.cumsum(np.diff(word_ids) != 0)]).astype(np.int32)


def pack_documents(doc_ids: list[str], input_ids: list[np.ndarray], word_ids: list[np.ndarray],
                   max_seq_length: int, cls_id: int, sep_id: int) -> Packed:
    """Greedily pack consecutive sentences of each document into sequences.

    Args:
        doc_ids: document of each sentence; sentences of a document are contiguous.
        input_ids: token ids of each sentence (no special tokens).
        word_ids: word index of each token of each sentence.
        max_seq_length: sequence length including [CLS] and [SEP].
    Returns:
        :class:`Packed`.
    """
    room = max_seq_length - 2
    seqs: list[tuple[list[np.ndarray], list[np.ndarray]]] = []
    cur_ids: list[np.ndarray] = []
    cur_words: list[np.ndarray] = []
    cur_len, next_word, prev_doc = 0, 0, None

    def flush() -> None:
        nonlocal cur_ids, cur_words, cur_len, next_word
        if cur_len:
            seqs.append((cur_ids, cur_words))
        cur_ids, cur_words, cur_len, next_word = [], [], 0, 0

    for doc, ids, words in zip(doc_ids, input_ids, word_ids):
        if doc != prev_doc:
            flush()
            prev_doc = doc
        for start in range(0, len(ids), room):  # a sentence longer than a sequence is cut
            piece, piece_words = ids[start:start + room], _dense(words[start:start + room])
            if cur_len + len(piece) > room:
                flush()
            cur_ids.append(piece)
            cur_words.append(piece_words + next_word)
            cur_len += len(piece)
            next_word += int(piece_words[-1]) + 1 if len(piece_words) else 0
    flush()

    n = len(seqs)
    out_ids = np.zeros((n, max_seq_length), dtype=np.int32)
    out_words = np.full((n, max_seq_length), -1, dtype=np.int32)
    lengths = np.zeros(n, dtype=np.int32)
    for r, (pieces, piece_words) in enumerate(seqs):
        body = np.concatenate(pieces)
        k = len(body)
        out_ids[r, 0], out_ids[r, 1:k + 1], out_ids[r, k + 1] = cls_id, body, sep_id
        out_words[r, 1:k + 1] = np.concatenate(piece_words)
        lengths[r] = k + 2
    return Packed(out_ids, out_words, lengths)


def shard_rng(seed: int, objective: str, copy: int, shard: int) -> np.random.Generator:
    """The generator of one shard: a pure function of (seed, objective, copy, shard),
    so shards can be made in any order or in parallel with identical results."""
    return np.random.default_rng([seed, zlib.crc32(objective.encode()), copy, shard])


def _mask_shard(args) -> tuple[pa.Table, dict]:
    ids, words, lengths, config, rng_key, mask_token_id, random_ids = args
    batch = mask_batch(ids, words, config, shard_rng(*rng_key), mask_token_id=mask_token_id,
                       random_token_ids=random_ids)
    rows, cols = np.nonzero(batch.chosen)
    counts = np.bincount(rows, minlength=len(ids))
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    flat_ids = batch.input_ids[np.arange(ids.shape[1])[None, :] < lengths[:, None]]
    label_offsets = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
    table = pa.table({
        "input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat_ids, pa.int32())),
        "masked_positions": pa.ListArray.from_arrays(label_offsets, pa.array(cols.astype(np.int32))),
        "masked_labels": pa.ListArray.from_arrays(label_offsets, pa.array(ids[rows, cols].astype(np.int32))),
    }, schema=SHARD_SCHEMA)
    chosen_new = batch.input_ids[batch.chosen]
    stats = {
        "sequences": int(len(ids)),
        "tokens": int(lengths.sum()),
        "maskable_tokens": int((words >= 0).sum()),
        "chosen_tokens": int(batch.chosen.sum()),
        "replaced_by_mask": int((chosen_new == mask_token_id).sum()),
        "unchanged": int((chosen_new == ids[batch.chosen]).sum()),
    }
    return table, stats


def write_masked_shards(packed: Packed, config: MaskingConfig, out_dir: Path, *, objective: str, seed: int,
                        dupe_factor: int, shard_size: int, mask_token_id: int, random_token_ids: np.ndarray,
                        workers: int = 1) -> dict:
    """Mask ``dupe_factor`` copies of the packed corpus and write them as shards.

    Returns:
        Stats: sequences, tokens, chosen tokens and their corruption breakdown.
    Raises:
        SourceError: nothing to write (empty corpus).
    """
    n = len(packed.lengths)
    if n == 0:
        raise SourceError("no sequence to mask: the tokenized corpus is empty")
    jobs = []
    for copy in range(dupe_factor):
        for shard, start in enumerate(range(0, n, shard_size)):
            sl = slice(start, start + shard_size)
            jobs.append((packed.input_ids[sl], packed.word_ids[sl], packed.lengths[sl], config,
                         (seed, objective, copy, shard), mask_token_id, random_token_ids))
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_mask_shard, jobs))
    else:
        results = [_mask_shard(job) for job in jobs]
    out_dir.mkdir(parents=True, exist_ok=True)
    totals: dict[str, int] = {}
    for i, (table, stats) in enumerate(results):
        write_parquet(out_dir / f"shard-{i:05d}.parquet", table)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
    chosen = totals["chosen_tokens"]
    return {**totals, "shards": len(results),
            "chosen_rate": chosen / totals["maskable_tokens"],
            "mask_share": totals["replaced_by_mask"] / chosen,
            "unchanged_share": totals["unchanged"] / chosen}


def read_shards(folder: Path) -> pa.Table:
    """All shards of a pretraining data folder, in order.

    Raises:
        SourceError: the folder holds no shard.
    """
    files = sorted(Path(folder).glob("shard-*.parquet"))
    if not files:
        raise SourceError(f"{folder}: no pretraining data shards (run the pretraining_data stage)")
    return pa.concat_tables(pq.read_table(f, schema=SHARD_SCHEMA) for f in files)
