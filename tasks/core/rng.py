"""Named random streams: one seeded NumPy generator per (seed, name, index...) key.

Every random choice of the pipeline draws from a stream keyed by what it is for (an
objective, a language, a shard, a step), so adding a language or an objective never
shifts the draws of another, and the streams are the same on every machine and in every
process (names are hashed with CRC-32, not Python's salted ``hash``).
"""

from __future__ import annotations

import zlib

import numpy as np


def named_rng(seed: int, *keys: str | int) -> np.random.Generator:
    """``np.random.default_rng([seed, *keys])`` with each string key replaced by its CRC-32.

    Args:
        seed: the run's seed (``params.seed``), non-negative.
        keys: names (``str``) and indices (non-negative ``int``) of the stream.
    Raises:
        ValueError: a negative seed or index (NumPy's SeedSequence takes none).
    """
    entropy = [seed, *(zlib.crc32(k.encode()) if isinstance(k, str) else k for k in keys)]
    if any(int(e) < 0 for e in entropy):
        raise ValueError(f"seed and indices must be non-negative, got {entropy}")
    return np.random.default_rng(entropy)
