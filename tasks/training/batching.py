"""Batching of ragged (variable-length) sequences held in flat Arrow layout.

A ragged column is a pair ``(values, offsets)``: example ``i`` is
``values[offsets[i]:offsets[i + 1]]``. Batches are gathered with one fancy
index, no per-example Python loop. A column too large for memory is a list of
such pairs (chunks, e.g. one per memory-mapped shard, Megatron-LM's
``MMapIndexedDataset`` layout): :class:`RaggedTake` reads only a batch's examples.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tasks.core.rng import named_rng

IGNORE_INDEX = -100  # label of positions no loss counts (PyTorch's cross-entropy default)


def ragged(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)`` of an Arrow list column, offsets from 0.

    Zero-copy (views of the Arrow buffers, e.g. of a memory-mapped file) for an
    unsliced array of a primitive type without nulls; a ChunkedArray of several
    chunks is concatenated (a copy), and a sliced array's offsets are rebased (a copy).
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    offsets = np.asarray(column.offsets)
    values = np.asarray(column.values)
    if len(offsets):
        values = values[offsets[0]:offsets[-1]]
        if offsets[0] != 0:
            offsets = offsets - offsets[0]
    return values, offsets


class RaggedTake:
    """Examples ``row[b]`` of chunks ``chunk[b]`` (``int [B]`` each) of chunked ragged columns
    that share one offsets list, gathered in batch order.

    Each example's span (chunk, start, end) is looked up once, then serves every values
    column with those offsets (:meth:`__call__`). An example is one contiguous slice of its
    chunk, and chunks are separate (memory-mapped) buffers, so a column is gathered as one
    slice per example (a view) and one ``np.concatenate`` (the only copy); a NumPy fancy
    index per chunk would cost more at training batch sizes (``benchmarks/batching.py``).

    Args:
        offsets: per chunk, ``int [N_c + 1]`` offsets of a ragged column (:func:`ragged`).
        chunk, row: ``int [B]`` chunk and row within it of each example of the batch.
    Attributes:
        offsets: ``int64 [B + 1]`` offsets of the gathered examples.
    Raises:
        IndexError: a chunk or a row that does not exist (or is negative).
    """

    def __init__(self, offsets: list[np.ndarray], chunk: np.ndarray, row: np.ndarray):
        chunks, rows = np.asarray(chunk).tolist(), np.asarray(row).tolist()
        if chunks and min(min(chunks), min(rows)) < 0:  # would wrap around silently
            raise IndexError(f"negative chunk or row in a batch: chunks {chunks}, rows {rows}")
        self._spans = [(c, offsets[c][r], offsets[c][r + 1]) for c, r in zip(chunks, rows)]
        self.offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
        np.cumsum([end - start for _, start, end in self._spans], out=self.offsets[1:])

    def __call__(self, values: list[np.ndarray]) -> np.ndarray:
        """The batch's values of a column with these offsets: ``[offsets[-1]]``, the dtype of
        the chunks (``values``: one flat array per chunk), example after example in batch order."""
        if not self._spans:
            return np.zeros(0, dtype=values[0].dtype if len(values) else np.int32)
        return np.concatenate([values[c][start:end] for c, start, end in self._spans])


def pad_batch(values: np.ndarray, offsets: np.ndarray, index: np.ndarray, pad_value: int = 0,
              max_length: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ``[B, W]`` array of examples ``index`` and its ``[B, W]`` validity mask.

    ``W`` is the longest selected example, cut to ``max_length`` when given.
    """
    lengths = offsets[np.asarray(index) + 1] - offsets[index]
    if max_length is not None:
        lengths = np.minimum(lengths, max_length)
    width = int(lengths.max()) if len(lengths) else 0
    grid = np.arange(width)[None, :]
    valid = grid < lengths[:, None]
    gather = np.minimum(offsets[index][:, None] + grid, max(len(values) - 1, 0))
    out = np.where(valid, values[gather] if len(values) else pad_value, pad_value)
    return out, valid


class BatchSchedule:
    """The batches of an endless stream of epochs, a pure function of (seed, step).

    Each epoch is a permutation seeded by ``(seed, epoch)``, cut into chunks of
    ``bucket`` batches; within a chunk, examples are sorted by length before the
    chunk is cut into batches, and the epoch's batches are then shuffled. Batches
    hold examples of similar length, so little compute goes to padding (as
    Hugging Face's ``group_by_length``), while the order stays random. The last
    ``len % batch_size`` examples of an epoch's permutation wait for the next epoch.

    Args:
        lengths: ``int [N]`` example lengths.
        bucket: batches per length-sorted chunk; 1 means plain random batches.
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, seed: int, bucket: int = 50):
        if len(lengths) < batch_size:
            raise ValueError(f"{len(lengths)} examples are fewer than one batch of {batch_size}")
        self.lengths, self.batch_size, self.seed, self.bucket = np.asarray(lengths), batch_size, seed, bucket
        self.per_epoch = len(lengths) // batch_size
        self._epoch, self._batches = -1, np.empty((0, batch_size), dtype=np.int64)

    def _epoch_batches(self, epoch: int) -> np.ndarray:
        rng = named_rng(self.seed, epoch)
        perm = rng.permutation(len(self.lengths))[: self.per_epoch * self.batch_size]
        chunk = self.bucket * self.batch_size
        for start in range(0, len(perm), chunk):
            part = perm[start:start + chunk]
            perm[start:start + chunk] = part[np.argsort(-self.lengths[part], kind="stable")]
        batches = perm.reshape(self.per_epoch, self.batch_size)
        return batches[rng.permutation(self.per_epoch)]

    def __call__(self, step: int) -> np.ndarray:
        """Example indices of batch ``step`` (``int64 [batch_size]``)."""
        epoch, k = divmod(step, self.per_epoch)
        if epoch != self._epoch:
            self._epoch, self._batches = epoch, self._epoch_batches(epoch)
        return self._batches[k]
