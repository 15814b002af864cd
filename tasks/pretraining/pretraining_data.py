"""Pretraining data: the masked shards of stage ``pretraining_data``, written and read back.

The stage packs the tokenized corpus into sequences (:mod:`tasks.pretraining.packing`), pairs
segments for NSP/SOP (:mod:`tasks.pretraining.pairing`), and masks them here.

Static masking (BERT): ``dupe_factor`` copies of the packed corpus are masked
with different random draws and the corrupted sequences are written. Dynamic
masking (RoBERTa, Liu et al. 2019, §4.1): the sequences are written uncorrupted,
with their word (and lexicon) ids, and :func:`tasks.pretraining.masking.mask_batch`, the same
function, masks each batch when it is drawn (:mod:`tasks.pretraining.pretrain`).
Out of core: :func:`write_shards` reads the packed rows (a
:class:`tasks.pretraining.packed.PackedStore` on disk) a shard at a time, so peak memory depends
on the shard size, not on the corpus size.

Shards (``data/pretraining/<objective>/shard-NNNNN.arrow``) are uncompressed Arrow IPC
files of one record batch, so that training memory-maps them and reads the
rows of a batch in place (:func:`read_shards`; the layout of Megatron-LM's
memory-mapped indexed datasets, in a standard format). Shard ``copy * S + s`` is
copy ``copy`` of the ``s``-th slice of ``shard_size`` rows (``S`` slices); columns:

================  ==============  =====================================================
column            type            meaning
================  ==============  =====================================================
input_ids         list<int32>     [CLS] ... [SEP] (corrupted when static), no padding
masked_positions  list<int32>     static: positions to predict, ascending
masked_labels     list<int32>     static: label at each of those positions (token id,
                                  or for PerLM the position of the original token)
word_ids          list<int32>     dynamic: word index per token, -1 for [CLS]/[SEP]
lex_ids           list<int32>     dynamic Mac: similar-word lexicon entry per token, -1
segment_b         int32           NSP/SOP: position of the first token of segment B
sentence_label    int8            NSP: 1 = B is from another document; SOP: 1 = swapped
================  ==============  =====================================================
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.rng import named_rng
from tasks.core.shards import map_tasks
from tasks.core.stage import stage_task
from tasks.corpus.similar_words import SimilarWords
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.packed import Packed, PackedStore


def shard_rng(seed: int, objective: str, copy: int, shard: int) -> np.random.Generator:
    """The generator of one shard: a pure function of (seed, objective, copy, shard),
    so shards can be made in any order or in parallel with identical results."""
    return named_rng(seed, objective, copy, shard)


def _shard_table(rows: Packed, batch=None, with_lex: bool = False, with_pairs: bool = False) -> pa.Table:
    """Arrow table of packed rows: corrupted with positions and labels (static, ``batch``) or
    uncorrupted with word (and lexicon) ids (dynamic)."""
    lengths = rows.lengths
    valid = np.arange(rows.input_ids.shape[1])[None, :] < lengths[:, None]
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))

    def ragged_column(values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(offsets, pa.array(values[valid], pa.int32()))

    if batch is not None:
        r, c = np.nonzero(batch.chosen)
        label_offsets = pa.array(np.concatenate([[0], np.cumsum(np.bincount(r, minlength=len(rows)))]
                                                ).astype(np.int32))
        columns = {"input_ids": ragged_column(batch.input_ids),
                   "masked_positions": pa.ListArray.from_arrays(label_offsets, pa.array(c.astype(np.int32))),
                   "masked_labels": pa.ListArray.from_arrays(label_offsets, pa.array(batch.labels[r, c]))}
    else:
        columns = {"input_ids": ragged_column(rows.input_ids), "word_ids": ragged_column(rows.word_ids)}
        if with_lex:
            columns["lex_ids"] = ragged_column(rows.lex_ids)
    if with_pairs:
        columns["segment_b"] = pa.array(rows.segment_b, pa.int32())
        columns["sentence_label"] = pa.array(rows.sentence_labels, pa.int8())
    return pa.table(columns)


def write_arrow(path: Path, table: pa.Table) -> None:
    """``table`` as an uncompressed Arrow IPC file of one record batch: the layout that
    :func:`read_shards` memory-maps without copying (same table, same bytes)."""
    table = table.combine_chunks()
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _mask_shard(args) -> dict:
    """Mask one shard's rows, write its file; returns its stats (runs in a worker process)."""
    source, sl, path, config, rng_key, mask_token_id, random_ids, similar, with_pairs = args
    rows = source.rows(sl)
    sentences = np.cumsum(rows.piece_start, axis=1) if config.granularity == "sentence" else None
    batch = mask_batch(rows.input_ids, rows.word_ids, config, shard_rng(*rng_key), mask_token_id=mask_token_id,
                       random_token_ids=random_ids, lex_ids=rows.lex_ids, similar=similar, sentence_ids=sentences)
    write_arrow(path, _shard_table(rows, batch, with_pairs=with_pairs))
    return {"sequences": len(rows), "tokens": int(rows.lengths.sum()),
            "maskable_tokens": int((rows.word_ids >= 0).sum()), **batch.counts}


@stage_task
def write_shards(packed: Packed | PackedStore, config: MaskingConfig, out_dir: Path, *, objective: str, seed: int,
                 dynamic: bool, dupe_factor: int, shard_size: int, mask_token_id: int,
                 random_token_ids: np.ndarray, similar: SimilarWords | None = None, executor=None) -> dict:
    """Write the pretraining shards of an objective: ``dupe_factor`` masked copies (static), or
    the uncorrupted rows once (dynamic; masks are drawn at batch time).

    Static shards are masked in parallel on the ``executor`` params
    (:func:`tasks.core.shards.map_tasks`: local processes, or Prefect tasks on Dask; ``None``:
    this process), each worker reading its ``shard_size`` rows from ``packed`` (a
    :class:`PackedStore`: memory holds one shard per worker) and writing its file; each
    shard's generator is a pure function of (seed, objective, copy, shard)
    (:func:`shard_rng`), so the bytes depend on neither the executor nor its workers.

    Returns:
        Stats: sequences, tokens, and (static) the chosen tokens and their
        corruption breakdown (``tasks.pretraining.masking.MaskedBatch.counts``).
    Raises:
        SourceError: nothing to write (empty corpus).
    """
    n = len(packed)
    if n == 0:
        raise SourceError("no sequence to write: the tokenized corpus is empty")
    with_pairs = bool((packed.column("sentence_labels") >= 0).any())
    out_dir.mkdir(parents=True, exist_ok=True)
    shards = [slice(start, start + shard_size) for start in range(0, n, shard_size)]
    if dynamic:
        maskable = 0
        for i, sl in enumerate(shards):
            rows = packed.rows(sl)
            maskable += int((rows.word_ids >= 0).sum())
            write_arrow(out_dir / f"shard-{i:05d}.arrow",
                        _shard_table(rows, with_lex=config.similar > 0, with_pairs=with_pairs))
        return {"sequences": n, "tokens": int(packed.column("lengths").sum()),
                "maskable_tokens": maskable, "shards": len(shards), "dynamic": True}
    # a store travels to the workers as its folder; rows in memory travel as their shard
    jobs = [(packed, sl, out_dir / f"shard-{copy * len(shards) + shard:05d}.arrow", config,
             (seed, objective, copy, shard), mask_token_id, random_token_ids, similar, with_pairs)
            if isinstance(packed, PackedStore) else
            (packed.rows(sl), slice(None), out_dir / f"shard-{copy * len(shards) + shard:05d}.arrow", config,
             (seed, objective, copy, shard), mask_token_id, random_token_ids, similar, with_pairs)
            for copy in range(dupe_factor) for shard, sl in enumerate(shards)]
    results = (map_tasks(f"pretraining_data@{objective}", _mask_shard, jobs, executor) if executor is not None
               else [_mask_shard(job) for job in jobs])
    totals: dict[str, int] = {}
    for stats in results:
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
    chosen = max(totals["chosen"], 1)
    shares = {f"{k}_share": round(totals[k] / chosen, 5)
              for k in ("mask", "random", "similar", "permute", "substitute", "keep") if k in totals}
    stats = {**totals, **shares, "shards": len(results), "dynamic": False,
             "chosen_rate": round(totals["chosen"] / totals["maskable_tokens"], 5)}
    if config.similar:  # share of the words drawn for a similar word that fell back to a random word
        fallbacks = sum(v for k, v in totals.items() if k.startswith("similar_fallback"))
        stats["similar_fallback_rate"] = round(fallbacks / max(fallbacks + totals["similar_words"], 1), 5)
    return stats


def _columns(schema: pa.Schema) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in schema)


def read_shards(folder: Path) -> pa.Table:
    """All shards of a pretraining data folder, in order, memory-mapped: one chunk per
    shard whose buffers lie in the mapped files (zero-copy; pages are read when touched).

    Raises:
        SourceError: the folder holds no shard (or only Parquet shards of the former
            format), a shard is unreadable (e.g. truncated), or the shards' columns
            differ; the message names the shard.
    """
    folder = Path(folder)
    files = sorted(folder.glob("shard-*.arrow"))
    if not files:
        if any(folder.glob("shard-*.parquet")):
            raise SourceError(f"{folder}: holds Parquet shards of an older format (now Arrow IPC .arrow files); "
                              "rerun the pretraining_data stage")
        raise SourceError(f"{folder}: no pretraining data shards (run the pretraining_data stage)")
    tables = []
    for f in files:
        try:
            table = pa.ipc.open_file(pa.memory_map(str(f), "r")).read_all()
            table.validate()  # buffer sizes against lengths (cheap: reads no values)
        except (pa.ArrowException, OSError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise SourceError(f"{f}: unreadable pretraining data shard ({reason}); "
                              "rerun the pretraining_data stage") from None
        if tables and not table.schema.equals(tables[0].schema):
            raise SourceError(f"{f}: columns ({_columns(table.schema)}) differ from those of {files[0].name} "
                              f"({_columns(tables[0].schema)}); rerun the pretraining_data stage")
        tables.append(table)
    return pa.concat_tables(tables)
