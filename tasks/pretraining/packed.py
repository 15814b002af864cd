"""Packed sequences: the rows of the pretraining data before masking, in memory (:class:`Packed`)
or spilled to disk (:class:`PackedStore`), read by rows or as whole fields.

Made by :mod:`tasks.pretraining.packing`, paired by :mod:`tasks.pretraining.pairing`, masked and
written as shards by :mod:`tasks.pretraining.pretraining_data`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


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
