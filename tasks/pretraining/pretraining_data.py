"""Pretraining data: pack sentences into sequences, pair segments for NSP/SOP, and mask.

Packing follows BERT's ``create_pretraining_data.py``: consecutive sentences of
one document fill a sequence of at most ``max_seq_length`` tokens including
[CLS] and [SEP]; a sequence never crosses a document boundary, and a sentence
longer than a sequence is cut into pieces.

Static masking (BERT): ``dupe_factor`` copies of the packed corpus are masked
with different random draws and the corrupted sequences are written. Dynamic
masking (RoBERTa, Liu et al. 2019, §4.1): the sequences are written uncorrupted,
with their word (and lexicon) ids, and :func:`tasks.pretraining.masking.mask_batch`, the same
function, masks each batch when it is drawn (:mod:`tasks.pretraining.pretrain`).
:func:`pack_corpus` and :func:`write_shards` are the Prefect tasks of stage ``pretraining_data``.

Shard columns (``data/pretraining/<objective>/shard-NNNNN.parquet``):

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

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.core.io import write_parquet
from tasks.core.params import Objective, PretrainingData
from tasks.core.rng import named_rng
from tasks.core.stage import stage_task
from tasks.corpus.similar_words import SimilarWords, lexicon_ids
from tasks.pretraining.masking import MaskingConfig, mask_batch

SENTENCE_TASKS = ("nsp", "sop")


@dataclass
class Packed:
    """Packed sequences, padded.

    Attributes:
        input_ids: ``int32 [N, L]``, [CLS] tokens [SEP] (or [CLS] A [SEP] B [SEP]) then [PAD] (0).
        word_ids: ``int32 [N, L]``, dense word index per token within its row, -1
            for [CLS], [SEP] and padding.
        lengths: ``int32 [N]`` tokens per row including [CLS] and [SEP].
        lex_ids: ``int32 [N, L]`` similar-word lexicon entry of each token's word, -1 if none.
        piece_start: ``bool [N, L]`` first token of each sentence (piece).
        documents: ``int32 [N]`` index of each row's document.
        segment_b: ``int32 [N]`` first position of segment B (0: a single segment).
        sentence_labels: ``int8 [N]`` NSP/SOP label (-1: no sentence task).
    """

    input_ids: np.ndarray
    word_ids: np.ndarray
    lengths: np.ndarray
    lex_ids: np.ndarray
    piece_start: np.ndarray
    documents: np.ndarray
    segment_b: np.ndarray
    sentence_labels: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    def rows(self, index) -> "Packed":
        return Packed(*(getattr(self, f)[index] for f in self.__dataclass_fields__))


def masking_config(objective: Objective, data: PretrainingData) -> MaskingConfig:
    """The :class:`tasks.pretraining.masking.MaskingConfig` of an objective under the data params."""
    r = objective.replacement
    return MaskingConfig(scheme=objective.masking, masked_lm_prob=data.masked_lm_prob,
                         max_predictions=data.max_predictions_per_seq, mask=r.mask, random=r.random,
                         similar=r.similar, permute=r.permute, ngram_probs=tuple(data.ngram_probabilities))


def _dense(word_ids: np.ndarray) -> np.ndarray:
    """Renumber non-decreasing word ids as 0, 1, 2, ... without gaps."""
    if word_ids.size == 0:
        return word_ids
    return np.concatenate([[0], np.cumsum(np.diff(word_ids) != 0)]).astype(np.int32)


def pack_documents(doc_ids: list[str], input_ids: list[np.ndarray], word_ids: list[np.ndarray],
                   max_seq_length: int, cls_id: int, sep_id: int, lex_ids: list[np.ndarray] | None = None,
                   reserve: int = 0) -> Packed:
    """Greedily pack consecutive sentences of each document into sequences.

    Args:
        doc_ids: document of each sentence; sentences of a document are contiguous.
        input_ids: token ids of each sentence (no special tokens).
        word_ids: word index of each token of each sentence.
        max_seq_length: sequence length including [CLS] and [SEP].
        lex_ids: similar-word lexicon entry of each token (optional).
        reserve: tokens to leave free (1 for the middle [SEP] of a sentence pair).
    Returns:
        :class:`Packed`.
    """
    room = max_seq_length - 2 - reserve
    seqs: list[tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray], int]] = []
    cur_ids, cur_words, cur_lex = [], [], []
    cur_len, next_word, prev_doc, n_docs = 0, 0, None, -1

    def flush() -> None:
        nonlocal cur_ids, cur_words, cur_lex, cur_len, next_word
        if cur_len:
            seqs.append((cur_ids, cur_words, cur_lex, n_docs))
        cur_ids, cur_words, cur_lex, cur_len, next_word = [], [], [], 0, 0

    lex_ids = lex_ids if lex_ids is not None else [np.full(len(x), -1, dtype=np.int32) for x in input_ids]
    for doc, ids, words, lex in zip(doc_ids, input_ids, word_ids, lex_ids):
        if doc != prev_doc:
            flush()
            prev_doc, n_docs = doc, n_docs + 1
        for start in range(0, len(ids), room):  # a sentence longer than a sequence is cut
            piece, piece_words = ids[start:start + room], _dense(words[start:start + room])
            if cur_len + len(piece) > room:
                flush()
            cur_ids.append(piece)
            cur_words.append(piece_words + next_word)
            cur_lex.append(lex[start:start + room])
            cur_len += len(piece)
            next_word += int(piece_words[-1]) + 1 if len(piece_words) else 0
    flush()

    n = len(seqs)
    out_ids = np.zeros((n, max_seq_length), dtype=np.int32)
    out_words = np.full((n, max_seq_length), -1, dtype=np.int32)
    out_lex = np.full((n, max_seq_length), -1, dtype=np.int32)
    piece_start = np.zeros((n, max_seq_length), dtype=bool)
    lengths = np.zeros(n, dtype=np.int32)
    documents = np.zeros(n, dtype=np.int32)
    for r, (pieces, piece_words, piece_lex, doc) in enumerate(seqs):
        body = np.concatenate(pieces)
        k = len(body)
        out_ids[r, 0], out_ids[r, 1:k + 1], out_ids[r, k + 1] = cls_id, body, sep_id
        out_words[r, 1:k + 1] = np.concatenate(piece_words)
        out_lex[r, 1:k + 1] = np.concatenate(piece_lex)
        piece_start[r, 1 + np.cumsum([0] + [len(p) for p in pieces[:-1]])] = True
        lengths[r], documents[r] = k + 2, doc
    return Packed(out_ids, out_words, lengths, out_lex, piece_start, documents,
                  segment_b=np.zeros(n, dtype=np.int32), sentence_labels=np.full(n, -1, dtype=np.int8))


@stage_task
def pack_corpus(tokens: pa.Table, max_seq_length: int, cls_id: int, sep_id: int, *, reserve: int = 0,
                words: pa.ChunkedArray | None = None, lexicon: pa.Table | None = None) -> Packed:
    """:func:`pack_documents` of the tokenized corpus (columns ``doc_id``, ``input_ids``,
    ``word_ids``); with the segmented corpus' ``words`` (the same sentences in the same order)
    and the similar-words ``lexicon``, each token's lexicon entry too."""
    ids = [np.asarray(x, dtype=np.int32) for x in tokens.column("input_ids").to_pylist()]
    word_ids = [np.asarray(x, dtype=np.int32) for x in tokens.column("word_ids").to_pylist()]
    lex = lexicon_ids(words, tokens.column("word_ids"), lexicon) if lexicon is not None else None
    return pack_documents(tokens.column("doc_id").to_pylist(), ids, word_ids, max_seq_length, cls_id, sep_id,
                          lex_ids=lex, reserve=reserve)


def sentence_pairs(packed: Packed, task: str, rng: np.random.Generator, cls_id: int,
                   sep_id: int) -> tuple[Packed, dict]:
    """Turn each packed sequence into a segment pair ``[CLS] A [SEP] B [SEP]`` with an NSP or SOP label.

    The body of a row is cut in two at a uniformly chosen sentence boundary, or,
    when the row holds a single sentence, at a uniformly chosen word boundary
    (BERT would instead force a random next segment, which skews NSP labels; a
    row of one word cannot be cut and is dropped). Then, with probability 1/2:

    * ``nsp`` (BERT, Devlin et al. 2019, §3.1 Task #2): B is replaced by segment B
      of a uniformly drawn row of another document, truncated to fit; label 1
      ("NotNext"), else 0 ("IsNext");
    * ``sop`` (ALBERT, Lan et al. 2020, §3.1 "inter-sentence coherence loss"): A and
      B are swapped; label 1 (swapped), else 0 (in order).

    Args:
        packed: rows packed with ``reserve=1`` (room for the middle [SEP]).
        task: ``"nsp"`` or ``"sop"``.
    Returns:
        ``(pairs, stats)``: the pairs as :class:`Packed` (``segment_b``,
        ``sentence_labels`` set; word ids dense over A then B) and counts.
    Raises:
        ValueError: unknown task.
    """
    if task not in SENTENCE_TASKS:
        raise ValueError(f"unknown sentence task {task!r}; known: {', '.join(SENTENCE_TASKS)}")
    n, width = packed.input_ids.shape
    cut = np.zeros(n, dtype=np.int64)  # first body position of B
    for r in range(n):
        body = slice(1, packed.lengths[r] - 1)
        cands = np.flatnonzero(packed.piece_start[r, body])[1:]
        if len(cands) == 0:
            words = packed.word_ids[r, body]
            cands = np.flatnonzero(np.diff(words) != 0) + 1
        if len(cands):
            cut[r] = 1 + cands[rng.integers(len(cands))]
    keep = np.flatnonzero(cut > 0)
    dropped = n - len(keep)
    rows, cut = packed.rows(keep), cut[keep]
    n = len(keep)
    labels = (rng.random(n) < 0.5).astype(np.int8)
    partner = np.zeros(n, dtype=np.int64)
    if task == "nsp":  # a uniformly drawn row of another document (documents are contiguous)
        _, first, inverse, size = np.unique(rows.documents, return_index=True, return_inverse=True,
                                            return_counts=True)
        first, size = first[inverse], size[inverse]
        others = n - size
        draw = np.minimum((rng.random(n) * others).astype(np.int64), np.maximum(others - 1, 0))
        partner = np.where(draw < first, draw, draw + size)
        labels[others == 0] = 0  # a one-document corpus has no negatives

    out = replace(rows, input_ids=np.zeros_like(rows.input_ids), word_ids=np.full_like(rows.word_ids, -1),
                  lex_ids=np.full_like(rows.lex_ids, -1), segment_b=np.zeros(n, dtype=np.int32),
                  sentence_labels=labels, lengths=np.zeros(n, dtype=np.int32))
    word_start = np.zeros_like(rows.piece_start)
    word_start[:, 1:] = (rows.word_ids[:, 1:] != rows.word_ids[:, :-1]) & (rows.word_ids[:, 1:] >= 0)
    for i in range(n):
        end = rows.lengths[i] - 1
        a, b = slice(1, cut[i]), slice(cut[i], end)
        src_b, b_from = i, b
        if task == "nsp" and labels[i]:
            p = partner[i]
            src_b, b_from = p, slice(cut[p], rows.lengths[p] - 1)
        parts = [(i, a), (src_b, b_from)]
        if task == "sop" and labels[i]:
            parts = parts[::-1]
        room_b = width - 3 - (parts[0][1].stop - parts[0][1].start)
        (ra, sa), (rb, sb) = parts
        sb = slice(sb.start, min(sb.stop, sb.start + room_b))
        la, lb = sa.stop - sa.start, sb.stop - sb.start
        ids = out.input_ids[i]
        ids[0], ids[1:1 + la], ids[1 + la] = cls_id, rows.input_ids[ra, sa], sep_id
        ids[2 + la:2 + la + lb], ids[2 + la + lb] = rows.input_ids[rb, sb], sep_id
        starts = np.concatenate([word_start[ra, sa], word_start[rb, sb]])
        starts[0] = True
        if lb:
            starts[la] = True
        dense = np.cumsum(starts) - 1
        out.word_ids[i, 1:1 + la] = dense[:la]
        out.word_ids[i, 2 + la:2 + la + lb] = dense[la:]
        out.lex_ids[i, 1:1 + la] = rows.lex_ids[ra, sa]
        out.lex_ids[i, 2 + la:2 + la + lb] = rows.lex_ids[rb, sb]
        out.segment_b[i], out.lengths[i] = 2 + la, 3 + la + lb
    return out, {"pairs": n, "dropped_single_word_rows": int(dropped),
                 "positive_share": round(float(labels.mean()), 4) if n else None}


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

    def ragged(values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(offsets, pa.array(values[valid], pa.int32()))

    if batch is not None:
        r, c = np.nonzero(batch.chosen)
        label_offsets = pa.array(np.concatenate([[0], np.cumsum(np.bincount(r, minlength=len(rows)))]
                                                ).astype(np.int32))
        columns = {"input_ids": ragged(batch.input_ids),
                   "masked_positions": pa.ListArray.from_arrays(label_offsets, pa.array(c.astype(np.int32))),
                   "masked_labels": pa.ListArray.from_arrays(label_offsets, pa.array(batch.labels[r, c]))}
    else:
        columns = {"input_ids": ragged(rows.input_ids), "word_ids": ragged(rows.word_ids)}
        if with_lex:
            columns["lex_ids"] = ragged(rows.lex_ids)
    if with_pairs:
        columns["segment_b"] = pa.array(rows.segment_b, pa.int32())
        columns["sentence_label"] = pa.array(rows.sentence_labels, pa.int8())
    return pa.table(columns)


def _mask_shard(args) -> tuple[pa.Table, dict]:
    rows, config, rng_key, mask_token_id, random_ids, similar, with_pairs = args
    batch = mask_batch(rows.input_ids, rows.word_ids, config, shard_rng(*rng_key), mask_token_id=mask_token_id,
                       random_token_ids=random_ids, lex_ids=rows.lex_ids, similar=similar)
    stats = {"sequences": len(rows), "tokens": int(rows.lengths.sum()),
             "maskable_tokens": int((rows.word_ids >= 0).sum()), **batch.counts}
    return _shard_table(rows, batch, with_pairs=with_pairs), stats


@stage_task
def write_shards(packed: Packed, config: MaskingConfig, out_dir: Path, *, objective: str, seed: int,
                 dynamic: bool, dupe_factor: int, shard_size: int, mask_token_id: int,
                 random_token_ids: np.ndarray, similar: SimilarWords | None = None, workers: int = 1) -> dict:
    """Write the pretraining shards of an objective: ``dupe_factor`` masked copies (static), or
    the uncorrupted rows once (dynamic; masks are drawn at batch time).

    Static shards are masked in parallel; each shard's generator is a pure
    function of (seed, objective, copy, shard) (:func:`shard_rng`), so the bytes
    do not depend on ``workers``.

    Returns:
        Stats: sequences, tokens, and (static) the chosen tokens and their
        corruption breakdown (``tasks.pretraining.masking.MaskedBatch.counts``).
    Raises:
        SourceError: nothing to write (empty corpus).
    """
    n = len(packed)
    if n == 0:
        raise SourceError("no sequence to write: the tokenized corpus is empty")
    with_pairs = bool((packed.sentence_labels >= 0).any())
    out_dir.mkdir(parents=True, exist_ok=True)
    shards = [slice(start, start + shard_size) for start in range(0, n, shard_size)]
    if dynamic:
        for i, sl in enumerate(shards):
            write_parquet(out_dir / f"shard-{i:05d}.parquet",
                          _shard_table(packed.rows(sl), with_lex=config.similar > 0, with_pairs=with_pairs))
        return {"sequences": n, "tokens": int(packed.lengths.sum()),
                "maskable_tokens": int((packed.word_ids >= 0).sum()), "shards": len(shards), "dynamic": True}
    jobs = [(packed.rows(sl), config, (seed, objective, copy, shard), mask_token_id, random_token_ids, similar,
             with_pairs) for copy in range(dupe_factor) for shard, sl in enumerate(shards)]
    if workers > 1 and len(jobs) > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_mask_shard, jobs))
    else:
        results = [_mask_shard(job) for job in jobs]
    totals: dict[str, int] = {}
    for i, (table, stats) in enumerate(results):
        write_parquet(out_dir / f"shard-{i:05d}.parquet", table)
        for k, v in stats.items():
            totals[k] = totals.get(k, 0) + v
    chosen = max(totals["chosen"], 1)
    shares = {f"{k}_share": round(totals[k] / chosen, 5) for k in ("mask", "random", "similar", "permute", "keep")}
    stats = {**totals, **shares, "shards": len(results), "dynamic": False,
             "chosen_rate": round(totals["chosen"] / totals["maskable_tokens"], 5)}
    if config.similar:  # share of the words drawn for a similar word that fell back to a random word
        fallbacks = sum(v for k, v in totals.items() if k.startswith("similar_fallback"))
        stats["similar_fallback_rate"] = round(fallbacks / max(fallbacks + totals["similar_words"], 1), 5)
    return stats


def _columns(table: pa.Table) -> str:
    return ", ".join(f"{field.name}: {field.type}" for field in table.schema)


def read_shards(folder: Path) -> pa.Table:
    """All shards of a pretraining data folder, in order.

    Raises:
        SourceError: the folder holds no shard, a shard is unreadable (e.g.
            truncated), or the shards' columns differ; the message names the shard.
    """
    files = sorted(Path(folder).glob("shard-*.parquet"))
    if not files:
        raise SourceError(f"{folder}: no pretraining data shards (run the pretraining_data stage)")
    tables = []
    for f in files:
        try:
            tables.append(pq.read_table(f))
        except (pa.ArrowException, OSError) as e:
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise SourceError(f"{f}: unreadable pretraining data shard ({reason}); "
                              "rerun the pretraining_data stage") from None
        if not tables[-1].schema.equals(tables[0].schema):
            raise SourceError(f"{f}: columns ({_columns(tables[-1])}) differ from those of {files[0].name} "
                              f"({_columns(tables[0])}); rerun the pretraining_data stage")
    return pa.concat_tables(tables)
