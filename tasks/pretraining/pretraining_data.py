"""Pretraining data: pack sentences into sequences, pair segments for NSP/SOP, and mask.

Packing (``pretraining_data.packing``) follows BERT's ``create_pretraining_data.py``
by default (RoBERTa's DOC-SENTENCES, Liu et al. 2019, §4.2): consecutive sentences
of one document fill a sequence of at most ``max_seq_length`` tokens including
[CLS] and [SEP], and a sequence never crosses a document boundary. With
``full_sentences`` (RoBERTa's FULL-SENTENCES) a sequence goes on into the next
document after an extra [SEP], so short documents no longer leave rows half
empty; it has no NSP/SOP (RoBERTa drops NSP with it). Either way a sentence
longer than a sequence is cut into pieces.

Static masking (BERT): ``dupe_factor`` copies of the packed corpus are masked
with different random draws and the corrupted sequences are written. Dynamic
masking (RoBERTa, Liu et al. 2019, §4.1): the sequences are written uncorrupted,
with their word (and lexicon) ids, and :func:`tasks.pretraining.masking.mask_batch`, the same
function, masks each batch when it is drawn (:mod:`tasks.pretraining.pretrain`).
:func:`pack_corpus` and :func:`write_shards` are the Prefect tasks of stage ``pretraining_data``.

Out of core: :func:`pack_corpus` streams the tokenized corpus by Parquet record
batches (the open sequence and document carry across batches, so the rows are
those of packing the whole table at once) and spills the packed rows to a
:class:`PackedStore` on disk; :func:`write_shards` reads it a shard at a time and
:func:`sentence_pairs` through memory maps, writing a chunk of pairs at a time, so
peak memory depends on the shard size, not on the corpus size (beyond a few
bytes a row). NSP draws segment B from a uniformly chosen row of the whole
corpus: that row is read from the mapped store, in place.

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

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
from numba import njit

from tasks.core.errors import SourceError
from tasks.core.io import stream_parquet
from tasks.core.params import Objective, PretrainingData
from tasks.core.rng import named_rng
from tasks.core.shards import map_tasks
from tasks.core.stage import stage_task
from tasks.corpus.similar_words import SimilarWords, lexicon_ids
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.training.batching import ragged

SENTENCE_TASKS = ("nsp", "sop")
BATCH_ROWS = 8192  # sentences per record batch read, and rows per chunk of the pairing pass (memory only)


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
        documents: ``int32 [N]`` index of each row's document (full_sentences: of its last one).
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

    def column(self, name: str) -> np.ndarray:
        """A ``[N]`` field (the :class:`PackedStore` interface)."""
        return getattr(self, name)

    def fields(self, names: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """Whole fields, as they are (the :class:`PackedStore` interface)."""
        return tuple(getattr(self, name) for name in names)

    @staticmethod
    def empty(n: int, width: int) -> "Packed":
        """``n`` rows of padding only (word and lexicon ids -1, no sentence task)."""
        return Packed(np.zeros((n, width), np.int32), np.full((n, width), -1, np.int32), np.zeros(n, np.int32),
                      np.full((n, width), -1, np.int32), np.zeros((n, width), bool), np.zeros(n, np.int32),
                      np.zeros(n, np.int32), np.full(n, -1, np.int8))

    @staticmethod
    def concat(parts: list["Packed"], width: int) -> "Packed":
        """The rows of ``parts`` in order (an empty ``[0, width]`` Packed for none)."""
        if not parts:
            return Packed.empty(0, width)
        return Packed(*(np.concatenate([getattr(p, f) for p in parts]) for f in Packed.__dataclass_fields__))


_DTYPES = {"input_ids": np.int32, "word_ids": np.int32, "lengths": np.int32, "lex_ids": np.int32,
           "piece_start": np.bool_, "documents": np.int32, "segment_b": np.int32, "sentence_labels": np.int8}
_ROW_FIELDS = ("lengths", "documents", "segment_b", "sentence_labels")  # [N]; the others are [N, L]


class PackedStore:
    """:class:`Packed` rows spilled to disk: one raw native-endian file per field (``<field>.bin``,
    row-major, the layout of ``np.memmap``), appended chunk by chunk, read back by row.

    The stage's intermediate for corpora larger than memory, after the ``.bin`` data
    files of Megatron-LM's indexed datasets. Rows are padded to ``width`` (packed rows
    are nearly full, so padding costs little disk). Each read maps the files only while
    it copies the rows asked for, so the pages read leave the resident set afterwards.
    Picklable (a folder and two ints), so worker processes read their own shard.

    Args:
        folder: created (emptied of earlier fields) by the constructor.
        width: ``L``, the padded row length (``max_seq_length``).
    """

    def __init__(self, folder: Path, width: int):
        self.folder, self.width, self.n = Path(folder), width, 0
        self.folder.mkdir(parents=True, exist_ok=True)
        for name in _DTYPES:
            self._file(name).write_bytes(b"")

    def _file(self, name: str) -> Path:
        return self.folder / f"{name}.bin"

    def __len__(self) -> int:
        return self.n

    def append(self, rows: Packed) -> None:
        """Append rows (``[n, width]`` and ``[n]`` fields)."""
        for name, dtype in _DTYPES.items():
            with open(self._file(name), "ab") as f:
                np.ascontiguousarray(getattr(rows, name), dtype=dtype).tofile(f)
        self.n += len(rows)

    def _map(self, name: str) -> np.ndarray:
        """The whole field as a read-only memory map (a plain array over the mapped file; an
        empty array while the store is empty). The map lives as long as the array."""
        shape = (self.n,) if name in _ROW_FIELDS else (self.n, self.width)
        if self.n == 0:
            return np.zeros(shape, dtype=_DTYPES[name])
        return np.asarray(np.memmap(self._file(name), dtype=_DTYPES[name], mode="r", shape=shape))

    def _read(self, name: str, index) -> np.ndarray:
        return np.array(self._map(name)[index])  # a copy; the map is dropped on return

    def rows(self, index: slice | np.ndarray) -> Packed:
        """The rows ``index`` (a slice or ``int [k]`` positions) in memory."""
        return Packed(**{name: self._read(name, index) for name in _DTYPES})

    def column(self, name: str) -> np.ndarray:
        """A whole ``[N]`` field in memory (1-4 bytes a row), e.g. ``lengths``."""
        if name not in _ROW_FIELDS:
            raise ValueError(f"{name} is a [N, L] field; read it by rows")
        return self._read(name, slice(None))

    def fields(self, names: tuple[str, ...]) -> tuple[np.ndarray, ...]:
        """Whole fields as read-only memory maps (:meth:`_map`): nothing is read until touched,
        and the pages touched are file-backed, so the kernel can drop them under memory pressure."""
        return tuple(self._map(name) for name in names)


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


def _assemble(seqs: list, width: int, cls_id: int, sep_id: int) -> Packed:
    """Padded :class:`Packed` rows of sequences ``(pieces, piece_words, piece_lex, document)``."""
    out = Packed.empty(len(seqs), width)
    for r, (pieces, piece_words, piece_lex, doc) in enumerate(seqs):
        body = np.concatenate(pieces)
        k = len(body)
        out.input_ids[r, 0], out.input_ids[r, 1:k + 1], out.input_ids[r, k + 1] = cls_id, body, sep_id
        out.word_ids[r, 1:k + 1] = np.concatenate(piece_words)
        out.lex_ids[r, 1:k + 1] = np.concatenate(piece_lex)
        out.piece_start[r, 1 + np.cumsum([0] + [len(p) for p in pieces[:-1]])] = True
        out.lengths[r], out.documents[r] = k + 2, doc
    return out


class Packer:
    """Greedy packing of consecutive sentences of each document into sequences, fed a
    stream of sentences: the open sequence (and the open document) carry from one
    :meth:`feed` to the next, so the rows do not depend on how the stream is cut.

    Args:
        max_seq_length: sequence length including [CLS] and [SEP].
        reserve: tokens to leave free (1 for the middle [SEP] of a sentence pair).
        cross_documents: RoBERTa's FULL-SENTENCES: a row goes on into the next document,
            the two separated by a [SEP] (word and lexicon id -1: never masked), instead of
            ending with its document (DOC-SENTENCES).
    """

    def __init__(self, max_seq_length: int, cls_id: int, sep_id: int, reserve: int = 0,
                 cross_documents: bool = False):
        self.width, self.cls_id, self.sep_id = max_seq_length, cls_id, sep_id
        self.room = max_seq_length - 2 - reserve
        self.cross_documents = cross_documents
        self._ids, self._words, self._lex, self._len, self._next_word = [], [], [], 0, 0
        self._doc, self._n_docs = None, -1
        self._done: list = []

    def _flush(self) -> None:
        if self._len:
            self._done.append((self._ids, self._words, self._lex, self._n_docs))
        self._ids, self._words, self._lex, self._len, self._next_word = [], [], [], 0, 0

    def _take(self) -> Packed:
        done, self._done = self._done, []
        return _assemble(done, self.width, self.cls_id, self.sep_id)

    def feed(self, doc_ids: list[str], input_ids: list[np.ndarray], word_ids: list[np.ndarray],
             lex_ids: list[np.ndarray] | None = None) -> Packed:
        """Pack more sentences; returns the rows completed by them (the last one stays open).

        Args:
            doc_ids: document of each sentence; sentences of a document are contiguous.
            input_ids: ``int32`` token ids of each sentence (no special tokens).
            word_ids: ``int32`` word index of each token of each sentence.
            lex_ids: ``int32`` similar-word lexicon entry of each token (optional, else -1).
        """
        room = self.room
        lex_ids = lex_ids if lex_ids is not None else [np.full(len(x), -1, dtype=np.int32) for x in input_ids]
        for doc, ids, words, lex in zip(doc_ids, input_ids, word_ids, lex_ids):
            new_document = doc != self._doc
            if new_document:
                if not self.cross_documents:
                    self._flush()
                self._doc, self._n_docs = doc, self._n_docs + 1
            for start in range(0, len(ids), room):  # a sentence longer than a sequence is cut
                piece, piece_words = ids[start:start + room], _dense(words[start:start + room])
                piece_lex = lex[start:start + room]
                sep = int(new_document and self._len > 0)  # the [SEP] between two documents of a row
                if self._len + sep + len(piece) > room:
                    self._flush()
                    sep = 0
                self._ids.append(np.concatenate([[self.sep_id], piece]).astype(np.int32) if sep else piece)
                self._words.append(np.concatenate([[-1], piece_words + self._next_word]).astype(np.int32)
                                   if sep else piece_words + self._next_word)
                self._lex.append(np.concatenate([[-1], piece_lex]).astype(np.int32) if sep else piece_lex)
                self._len += sep + len(piece)
                self._next_word += int(piece_words[-1]) + 1 if len(piece_words) else 0
                new_document = False
        return self._take()

    def finish(self) -> Packed:
        """The last, open row (if any)."""
        self._flush()
        return self._take()


def pack_documents(doc_ids: list[str], input_ids: list[np.ndarray], word_ids: list[np.ndarray],
                   max_seq_length: int, cls_id: int, sep_id: int, lex_ids: list[np.ndarray] | None = None,
                   reserve: int = 0, cross_documents: bool = False) -> Packed:
    """:class:`Packer` of sentences held in memory, all at once (arguments as :meth:`Packer.feed`).

    Returns:
        :class:`Packed`.
    """
    packer = Packer(max_seq_length, cls_id, sep_id, reserve=reserve, cross_documents=cross_documents)
    return Packed.concat([packer.feed(doc_ids, input_ids, word_ids, lex_ids), packer.finish()], max_seq_length)


class _Aligned:
    """One column of a second Parquet file, served in the row counts of the first's batches."""

    def __init__(self, path: Path, column: str, batch_rows: int):
        self.path = path
        self._batches = stream_parquet(path).iter_batches(batch_size=batch_rows, columns=[column])
        self._rest: pa.Array | None = None

    def take(self, n: int) -> pa.Array:
        parts = [self._rest] if self._rest is not None else []
        have = sum(len(p) for p in parts)
        while have < n:
            batch = next(self._batches, None)
            if batch is None:
                raise SourceError(f"{self.path}: fewer sentences than the tokenized corpus; rerun its stage")
            parts.append(batch.column(0))
            have += batch.num_rows
        merged = pa.concat_arrays(parts)
        self._rest = merged.slice(n)
        return pa.concat_arrays([merged.slice(0, n)])  # unsliced (offsets from 0) for lexicon_ids


def _sentences(column: pa.Array) -> list[np.ndarray]:
    """The ``int32`` arrays of a ``list<int32>`` column (views, no Python list of ints)."""
    values, offsets = ragged(column)
    return np.split(values.astype(np.int32, copy=False), offsets[1:-1]) if len(column) else []


def pack_stream(tokens: Path, max_seq_length: int, cls_id: int, sep_id: int, *, reserve: int = 0,
                cross_documents: bool = False, words: Path | None = None, lexicon: pa.Table | None = None,
                batch_rows: int = BATCH_ROWS) -> Iterator[Packed]:
    """The packed rows of a tokenized corpus, chunk by chunk (one chunk per record batch of
    ``batch_rows`` sentences, then the last open row).

    Args:
        tokens: Parquet file with ``doc_id``, ``input_ids``, ``word_ids`` (stage ``tokenize``).
        words: Parquet file with ``words``, the same sentences in the same order (stage
            ``segment``), with ``lexicon``: each token's lexicon entry is packed too.
    Raises:
        SourceError: ``words`` holds fewer sentences than ``tokens``.
    """
    packer = Packer(max_seq_length, cls_id, sep_id, reserve=reserve, cross_documents=cross_documents)
    aligned = _Aligned(words, "words", batch_rows) if lexicon is not None else None
    for batch in stream_parquet(tokens).iter_batches(batch_size=batch_rows,
                                                     columns=["doc_id", "input_ids", "word_ids"]):
        word_ids = batch.column("word_ids")
        lex = (lexicon_ids(pa.chunked_array([aligned.take(batch.num_rows)]), pa.chunked_array([word_ids]), lexicon)
               if aligned is not None else None)
        yield packer.feed(batch.column("doc_id").to_pylist(), _sentences(batch.column("input_ids")),
                          _sentences(word_ids), lex_ids=lex)
    yield packer.finish()


@stage_task
def pack_corpus(tokens: Path, out: Path, max_seq_length: int, cls_id: int, sep_id: int, *, reserve: int = 0,
                cross_documents: bool = False, words: Path | None = None, lexicon: pa.Table | None = None,
                batch_rows: int = BATCH_ROWS) -> PackedStore:
    """:func:`pack_stream` of the tokenized corpus, spilled to a :class:`PackedStore` in ``out``
    (a scratch folder the caller deletes); memory holds one record batch at a time."""
    store = PackedStore(out, max_seq_length)
    for chunk in pack_stream(tokens, max_seq_length, cls_id, sep_id, reserve=reserve,
                             cross_documents=cross_documents, words=words,
                             lexicon=lexicon, batch_rows=batch_rows):
        store.append(chunk)
    return store


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
                   out: Path | None = None, chunk_rows: int = BATCH_ROWS) -> tuple[Packed | PackedStore, dict]:
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
    batch = mask_batch(rows.input_ids, rows.word_ids, config, shard_rng(*rng_key), mask_token_id=mask_token_id,
                       random_token_ids=random_ids, lex_ids=rows.lex_ids, similar=similar)
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
    shares = {f"{k}_share": round(totals[k] / chosen, 5) for k in ("mask", "random", "similar", "permute", "keep")}
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
