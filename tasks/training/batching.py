"""Batching of ragged (variable-length) sequences held in flat Arrow layout.

A ragged column is a pair ``(values, offsets)``: example ``i`` is
``values[offsets[i]:offsets[i + 1]]``. Batches are gathered with one fancy
index, no per-example Python loop. A column too large for memory is a list of
such pairs (chunks, e.g. one per memory-mapped shard, Megatron-LM's
``MMapIndexedDataset`` layout): :func:`take_ragged` reads only a batch's examples.
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


def take_ragged(values: list[np.ndarray], offsets: list[np.ndarray], chunk: np.ndarray,
                row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Examples ``row[b]`` of chunks ``chunk[b]`` (``int [B]`` each) as one small ragged pair, in batch order.

    Args:
        values, offsets: per chunk, a ragged column (:func:`ragged`).
    Returns:
        ``(values, offsets)``: the ``B`` examples' values (dtype of the chunks) and
        ``int64 [B + 1]`` offsets. Only those examples are read: a loop over ``B``
        slices, cheap next to a training step, and no copy of a chunk.
    """
    parts = [values[c][offsets[c][r]:offsets[c][r + 1]] for c, r in zip(np.asarray(chunk).tolist(),
                                                                          np.asarray(row).tolist())]
    out_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=out_offsets[1:])
    dtype = values[0].dtype if len(values) else np.int32
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)), out_offsets


def flat_positions(offsets: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flat value positions of examples ``index`` and the batch row of each.

    Returns:
        ``(flat, rows)``: ``int64 [T]`` positions into ``values`` and ``int64 [T]``
        batch rows, where ``T`` is the total length of the selected examples.
    """
    starts, counts = offsets[index], offsets[np.asarray(index) + 1] - offsets[index]
    rows = np.repeat(np.arange(len(index)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    return np.repeat(starts, counts) + np.arange(counts.sum()) - first, rows


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
