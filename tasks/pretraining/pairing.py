"""Segment pairs for the sentence tasks: NSP (BERT) and SOP (ALBERT), see :func:`sentence_pairs`.

The cut points and the pair assembly are compiled loops over rows (Numba); every random number
is drawn with NumPy beforehand, so the pairs are a pure function of the packed rows and the
generator. NSP draws segment B from a uniformly chosen row of the whole corpus, read from the
packed rows in place (a :class:`tasks.pretraining.packed.PackedStore` through memory maps).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from numba import njit

from tasks.core.params.pretraining import SENTENCE_TASKS
from tasks.pretraining.packed import Packed, PackedStore

CHUNK_ROWS = 8192  # pairs assembled at a time (memory only)


@njit(cache=True)
def _cut_point(piece_start: np.ndarray, word_ids: np.ndarray, length: int, pick: int) -> int:
    """Where a row (``[L]`` fields) can be cut in two: its number of cut points if ``pick < 0``,
    else its ``pick``-th cut point (a position). The cut points are the body's sentence starts
    after its first one or, in a row of one sentence, its word starts after the first token."""
    if pick < 0:  # counts: branch-free loops, which vectorise
        starts = 0
        for p in range(1, length - 1):
            starts += piece_start[p]
        if starts >= 2:
            return starts - 1
        words = 0
        for p in range(2, length - 1):
            words += word_ids[p] != word_ids[p - 1]
        return words
    n = 0
    for p in range(1, length - 1):
        if piece_start[p]:
            if n == pick + 1:
                return p
            n += 1
    n = 0  # fewer than two sentence starts: a word start
    for p in range(2, length - 1):
        if word_ids[p] != word_ids[p - 1]:
            if n == pick:
                return p
            n += 1
    return n


@njit(cache=True)
def _cuts(piece_start: np.ndarray, word_ids: np.ndarray, lengths: np.ndarray, pick: np.ndarray) -> np.ndarray:
    """:func:`_cut_point` of every row (``int32 [N]``)."""
    out = np.empty(len(lengths), np.int32)
    for r in range(len(lengths)):
        out[r] = _cut_point(piece_start[r], word_ids[r], lengths[r], pick[r])
    return out


@njit(cache=True)
def _put_segment(dst: tuple, k: int, at: int, src: tuple, row: int, start: int, stop: int, word: int) -> int:
    """Copy tokens ``start:stop`` of ``src`` row ``row`` (``(input_ids, word_ids, lex_ids)``) to
    ``dst`` row ``k`` from position ``at``, renumbering its words densely from ``word + 1`` (its
    first token starts one); returns the last word index written."""
    ids, words, lex = src[0][row], src[1][row], src[2][row]
    out_ids, out_words, out_lex = dst[0][k], dst[1][k], dst[2][k]
    shift, prev = at - start, words[start - 1]
    for p in range(start, stop):
        w = words[p]
        word += (p == start) | ((w != prev) & (w >= 0))  # branch-free
        prev = w
        out_ids[p + shift] = ids[p]
        out_words[p + shift] = word
        out_lex[p + shift] = lex[p]
    return word


@njit(cache=True)
def _write_pairs(dst: tuple, src: tuple, segments: np.ndarray, cls_id: int, sep_id: int,
                 segment_b: np.ndarray, lengths: np.ndarray) -> None:
    """``[CLS] A [SEP] B [SEP]`` into row ``k`` of ``dst`` for each row of ``segments``
    (``int64 [M, 6]``: row of ``src``, start and stop of A, then of B); B is cut to what fits."""
    width = dst[0].shape[1]
    for k in range(len(segments)):
        a_row, a_start, a_stop, b_row, b_start, b_stop = segments[k]
        la = a_stop - a_start
        lb = min(b_stop - b_start, width - 3 - la)
        dst[0][k, 0] = cls_id
        word = _put_segment(dst, k, 1, src, a_row, a_start, a_stop, -1)
        dst[0][k, 1 + la] = sep_id
        _put_segment(dst, k, 2 + la, src, b_row, b_start, b_start + lb, word)
        dst[0][k, 2 + la + lb] = sep_id
        segment_b[k], lengths[k] = 2 + la, 3 + la + lb


def sentence_pairs(packed: Packed | PackedStore, task: str, rng: np.random.Generator, cls_id: int, sep_id: int,
                   out: Path | None = None, chunk_rows: int = CHUNK_ROWS) -> tuple[Packed | PackedStore, dict]:
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

    Two passes: the cuts (one draw per cuttable row, in row order; kept as ``int32 [N]``),
    then, after the labels of all kept rows (``int8 [n]``), the pairs with their NSP
    partners, ``chunk_rows`` at a time. Both read the packed fields in place (a
    :class:`PackedStore`'s through read-only memory maps, :meth:`PackedStore.fields`), so a
    partner is read wherever it lies and nothing is copied but the pairs. Memory holds
    ``[N]`` arrays (about 60 bytes a row) and one chunk of pairs.

    Args:
        packed: rows packed with ``reserve=1`` (room for the middle [SEP]), in memory
            or in a :class:`PackedStore`.
        task: ``"nsp"`` or ``"sop"``.
        out: folder of the :class:`PackedStore` of the pairs; None: the pairs in memory.
        chunk_rows: pairs assembled at a time (memory only: the pairs do not depend on it).
    Returns:
        ``(pairs, stats)``: the pairs (``segment_b``, ``sentence_labels`` set; word ids
        dense over A then B) and counts.
    Raises:
        ValueError: unknown task.
    """
    if task not in SENTENCE_TASKS:
        raise ValueError(f"unknown sentence task {task!r}; known: {', '.join(SENTENCE_TASKS)}")
    input_ids, word_ids, lex_ids, piece_start = packed.fields(("input_ids", "word_ids", "lex_ids", "piece_start"))
    lengths, documents = packed.column("lengths"), packed.column("documents")
    total, width = input_ids.shape
    pick = np.full(total, -1, dtype=np.int64)
    counts = _cuts(piece_start, word_ids, lengths, pick)
    cuttable = counts > 0
    pick[cuttable] = rng.integers(0, counts[cuttable])  # the draws of one integers(count) per row
    cut = _cuts(piece_start, word_ids, lengths, pick)  # first position of B; 0: not cuttable (pick -1: no cut points)
    keep = np.flatnonzero(cut > 0)
    cut = cut[keep].astype(np.int64)
    n, stop = len(keep), lengths[keep].astype(np.int64) - 1  # stop: the body's end, before the last [SEP]
    labels = (rng.random(n) < 0.5).astype(np.int8)
    docs = documents[keep]  # non-decreasing (the packer numbers documents in order)

    store = PackedStore(out, width) if out is not None else None
    pairs = Packed.empty(n, width) if store is None else None  # in memory: written chunk by chunk in place
    for lo in range(0, n, chunk_rows):
        hi = min(lo + chunk_rows, n)
        own = keep[lo:hi]
        if task == "nsp":  # a uniformly drawn row of another document (documents are contiguous)
            first = np.searchsorted(docs, docs[lo:hi], side="left")
            size = np.searchsorted(docs, docs[lo:hi], side="right") - first
            others = n - size
            # one double per row, drawn chunk by chunk: the stream of one draw of n doubles
            draw = np.minimum((rng.random(hi - lo) * others).astype(np.int64), np.maximum(others - 1, 0))
            partner = np.where(draw < first, draw, draw + size)  # index into the kept rows
            labels[lo:hi][others == 0] = 0  # a one-document corpus has no negatives
        negative = labels[lo:hi] == 1
        # A and B of each row as (row, start, stop)
        segments = np.stack([own, np.ones(hi - lo, np.int64), cut[lo:hi], own, cut[lo:hi], stop[lo:hi]], axis=1)
        if task == "nsp":  # B: segment B of the partner row
            q = partner[negative]
            segments[negative, 3:] = np.stack([keep[q], cut[q], stop[q]], axis=1)
        else:  # sop: A and B swapped
            segments[negative] = segments[negative][:, [3, 4, 5, 0, 1, 2]]
        chunk = pairs.rows(slice(lo, hi)) if store is None else Packed.empty(hi - lo, width)
        np.take(piece_start, own, axis=0, out=chunk.piece_start)
        chunk.documents[:] = docs[lo:hi]
        chunk.sentence_labels[:] = labels[lo:hi]
        _write_pairs((chunk.input_ids, chunk.word_ids, chunk.lex_ids), (input_ids, word_ids, lex_ids), segments,
                     cls_id, sep_id, chunk.segment_b, chunk.lengths)
        if store is not None:
            store.append(chunk)
    stats = {"pairs": n, "dropped_single_word_rows": int(total - n),
             "positive_share": round(float(labels.mean()), 4) if n else None}
    return (store if store is not None else pairs), stats
