"""Segment: jieba word segmentation of the corpus, on every core.

Adds a ``words`` column (``list<string>``) to the sentence table: jieba's
precise mode (``cut_all=False``), HMM for unknown words and a user dictionary as
params. jieba keeps every character, so ``"".join(words) == text`` holds for
every row, and a character's word is found from the cumulative word lengths;
that is what whole word masking needs.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
from pathlib import Path

import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.stage import stage_task

_tokenizer = None
_hmm = True


def _die_with_parent(parent: int) -> None:
    """Make this worker die with its parent. Forked workers inherit the parent's
    SIGTERM handler (Prefect's raises an exception, which a pool worker reports
    and survives), so restore the default; ask Linux to send SIGTERM when the
    parent dies (even by SIGKILL); leave Ctrl-C to the parent, which then
    terminates the pool."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's pool.terminate() still applies
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _init_worker(user_dict: str | None, hmm: bool, parent: int | None = None) -> None:
    global _tokenizer, _hmm
    import jieba

    if parent is not None:
        _die_with_parent(parent)

    jieba.setLogLevel(logging.WARNING)
    _tokenizer = jieba.Tokenizer()
    _tokenizer.initialize()
    if user_dict:
        _tokenizer.load_userdict(user_dict)
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


@stage_task
def add_words(table: pa.Table, **kwargs) -> pa.Table:
    """The sentence table with a ``words`` column from :func:`segment_texts`."""
    words = segment_texts(table.column("text").to_pylist(), **kwargs)
    return table.append_column("words", pa.array(words, type=pa.list_(pa.string())))
