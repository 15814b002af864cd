"""Batching of ragged (variable-length) sequences held in flat Arrow layout.

A ragged column is a pair ``(values, offsets)``: example ``i`` is
``values[offsets[i]:offsets[i + 1]]``. Batches are gathered with one fancy
index, no per-example Python loop.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def ragged(column: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(values, offsets)`` of an Arrow list column (zero-copy where possible)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    offsets = np.asarray(column.offsets)
    values = np.asarray(column.values)
    return values[offsets[0]:offsets[-1]], offsets - offsets[0]


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
