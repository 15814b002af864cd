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
import multiprocessing
import os
from pathlib import Path

import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.io import sha256_file
from tasks.core.shards import ShardedStep, die_with_parent

_tokenizer = None
_loaded = None  # the user dictionary _tokenizer was built with (a worker keeps it for every shard)
_hmm = True


def _init_worker(user_dict: str | None, hmm: bool, parent: int | None = None) -> None:
    global _tokenizer, _loaded, _hmm
    import jieba

    if parent is not None:
        die_with_parent(parent)
    if _tokenizer is None or _loaded != user_dict:
        jieba.setLogLevel(logging.WARNING)
        tokenizer = jieba.Tokenizer()
        tokenizer.initialize()
        if user_dict:
            tokenizer.load_userdict(user_dict)
        _tokenizer, _loaded = tokenizer, user_dict
    _hmm = hmm


def _cut_chunk(texts: list[str]) -> list[list[str]]:
    return [list(_tokenizer.cut(t, cut_all=False, HMM=_hmm)) for t in texts]


def segment_texts(texts: list[str], *, hmm: bool = True, user_dict: str | None = None, workers: int = 1,
                  chunk_size: int = 4000) -> list[list[str]]:
    """Segment every text into words with jieba's precise mode.

    Args:
        texts: the sentences.
        hmm: let jieba's HMM join unknown words.
        user_dict: a jieba user dictionary file (``word [freq] [pos]`` lines).
        workers: processes; each loads its own jieba dictionary.
    Returns:
        One list of words per text, in input order; each joins back to its text.
    Raises:
        SourceError: the user dictionary is missing.
    """
    if user_dict and not Path(user_dict).is_file():
        raise SourceError(f"segment.user_dict: {user_dict} does not exist")
    chunks = [texts[i:i + chunk_size] for i in range(0, len(texts), chunk_size)]
    if workers == 1 or len(chunks) == 1:
        _init_worker(user_dict, hmm)
        return [words for chunk in chunks for words in _cut_chunk(chunk)]
    # multiprocessing.Pool, unlike ProcessPoolExecutor, terminates its workers when the
    # block exits on an exception (Prefect's TerminationSignal on SIGTERM, Ctrl-C)
    # instead of waiting for every queued chunk; map() keeps the input order.
    with multiprocessing.Pool(workers, initializer=_init_worker, initargs=(user_dict, hmm, os.getpid())) as pool:
        return [words for result in pool.map(_cut_chunk, chunks, chunksize=1) for words in result]


def segment_shard(rows: pa.Table, index: int, params: tuple[str | None, bool]) -> pa.Table:
    """A shard of the sentence table with a ``words`` column (the sharded step of :func:`segment_step`;
    ``params`` is ``(user_dict, hmm)``; ``index`` is unused: segmentation draws nothing at random)."""
    user_dict, hmm = params
    _init_worker(user_dict, hmm)
    words = _cut_chunk(rows.column("text").to_pylist())
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
