"""Segment: jieba word segmentation of the corpus, shard by shard on every worker.

Adds a ``words`` column (``list<string>``) to the sentence table: jieba's
precise mode (``cut_all=False``), HMM for unknown words and a user dictionary as
params. jieba keeps every character, so ``"".join(words) == text`` holds for
every row, and a character's word is found from the cumulative word lengths;
that is what whole word masking needs. The stage runs :func:`segment_step` with
:mod:`tasks.core.shards` (resumable, out of core, on any executor).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.io import sha256_file
from tasks.core.shards import ShardedStep

_tokenizer = None
_loaded = None  # the user dictionary _tokenizer was built with (a worker keeps it for every shard)


def _tokenizer_for(user_dict: str | None):
    """This process's jieba tokenizer with ``user_dict`` loaded, built once per process and dictionary."""
    global _tokenizer, _loaded
    import jieba

    if _tokenizer is None or _loaded != user_dict:
        jieba.setLogLevel(logging.WARNING)
        tokenizer = jieba.Tokenizer()
        tokenizer.initialize()
        if user_dict:
            tokenizer.load_userdict(user_dict)
        _tokenizer, _loaded = tokenizer, user_dict
    return _tokenizer


def segment_shard(rows: pa.Table, index: int, params: tuple[str | None, bool]) -> pa.Table:
    """A shard of the sentence table with a ``words`` column (the sharded step of :func:`segment_step`;
    ``params`` is ``(user_dict, hmm)``; ``index`` is unused: segmentation draws nothing at random)."""
    user_dict, hmm = params
    tokenizer = _tokenizer_for(user_dict)
    words = [list(tokenizer.cut(t, cut_all=False, HMM=hmm)) for t in rows.column("text").to_pylist()]
    return rows.append_column("words", pa.array(words, type=pa.list_(pa.string())))


def segment_step(corpus_schema: pa.Schema, *, hmm: bool, user_dict: str | None) -> ShardedStep:
    """The ``segment`` stage's sharded step: the corpus schema plus ``words``.

    Raises:
        SourceError: the user dictionary is missing.
    """
    if user_dict and not Path(user_dict).is_file():
        raise SourceError(f"segment.user_dict: {user_dict} does not exist")
    # the dictionary's content, not only its path, decides the words
    key = json.dumps({"hmm": hmm, "user_dict": user_dict,
                      "user_dict_sha256": sha256_file(user_dict) if user_dict else None})
    return ShardedStep(name="segment", fn=segment_shard, params=(user_dict, hmm), key=key,
                       schema=corpus_schema.append(pa.field("words", pa.list_(pa.string()))))
