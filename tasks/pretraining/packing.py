"""Packing sentences into sequences: BERT's ``create_pretraining_data.py`` by default.

``pretraining_data.packing`` follows BERT (RoBERTa's DOC-SENTENCES, Liu et al. 2019, §4.2):
consecutive sentences of one document fill a sequence of at most ``max_seq_length`` tokens
including [CLS] and [SEP], and a sequence never crosses a document boundary. With
``full_sentences`` (RoBERTa's FULL-SENTENCES) a sequence goes on into the next document after
an extra [SEP], so short documents no longer leave rows half empty; it has no NSP/SOP (RoBERTa
drops NSP with it). Either way a sentence longer than a sequence is cut into pieces, at a word
boundary (:func:`cut_points`), so that whole-word schemes never mask half a word.

Out of core: :func:`pack_corpus` streams the tokenized corpus by Parquet record batches (the
open sequence and document carry across batches, so the rows are those of packing the whole
table at once) and spills the packed rows to a :class:`tasks.pretraining.packed.PackedStore`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.io import stream_parquet
from tasks.core.stage import stage_task
from tasks.corpus.similar_words import lexicon_ids
from tasks.pretraining.packed import Packed, PackedStore
from tasks.training.batching import ragged

BATCH_ROWS = 8192  # sentences per record batch read (memory only)


def _dense(word_ids: np.ndarray) -> np.ndarray:
    """Renumber non-decreasing word ids as 0, 1, 2, ... without gaps."""
    if word_ids.size == 0:
        return word_ids
    return np.concatenate([[0], np.cumsum(np.diff(word_ids) != 0)]).astype(np.int32)


def cut_points(word_ids: np.ndarray, room: int) -> list[int]:
    """Where a sentence of ``word_ids`` (``int [T]``, non-decreasing) is cut into pieces of at most
    ``room`` tokens: each piece ends at the last word boundary that fits, and inside a word only
    when one word alone is longer than ``room``. Returns the piece starts (``[]`` for an empty
    sentence)."""
    starts, start, n = [0] if len(word_ids) else [], 0, len(word_ids)
    while n - start > room:
        end = start + room
        while end > start and word_ids[end] == word_ids[end - 1]:
            end -= 1  # back to the first token of the word the cut falls in
        start = end if end > start else start + room
        starts.append(start)
    return starts


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
            starts = cut_points(words, room)  # a sentence longer than a sequence is cut between words
            for start, stop in zip(starts, starts[1:] + [len(ids)]):
                piece, piece_words, piece_lex = ids[start:stop], _dense(words[start:stop]), lex[start:stop]
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
