"""Named random streams: the same draws as the derivation the artifacts were made with, and
independent streams per name."""

import zlib

import numpy as np
import pytest

from tasks.core.rng import named_rng


def test_named_rng_is_the_crc32_keyed_seed_sequence():
    legacy = np.random.default_rng([42, zlib.crc32(b"wwm"), 1, 7]).integers(0, 2**31, 20)
    assert np.array_equal(named_rng(42, "wwm", 1, 7).integers(0, 2**31, 20), legacy)


def test_names_and_indices_give_independent_streams():
    draws = {tuple(named_rng(1, *key).integers(0, 2**31, 4)) for key in [("mlm",), ("wwm",), ("mlm", 1), ("mlm", 2)]}
    assert len(draws) == 4


def test_negative_seed_is_refused():
    with pytest.raises(ValueError, match="non-negative"):
        named_rng(-1, "x")
