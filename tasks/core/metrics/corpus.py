"""Metrics of the corpus stages: ingest (``corpus.json``), segment, tokenize, similar_words."""

from __future__ import annotations

from tasks.core.metrics.base import Metrics, Record, absent


class LanguageCounts(Record):
    documents: int
    sentences: int
    characters: int
    """Unicode code points of the kept sentences."""


class Dropped(Record):
    """What ingest removed, and why."""

    empty_records: int = 0
    """Records with no text after normalisation (absent in runs before they were counted)."""
    empty_documents: int
    """Documents left without a sentence after the sentence drops."""
    duplicate_documents: int
    eval_overlap_sentences: int
    """Sentences that occur in a downstream dev or test split."""
    short_sentences: int


class CorpusMetrics(Metrics):
    """Stage ``ingest``: the pretraining corpus per language and what was dropped."""

    file = "corpus.json"
    languages: dict[str, LanguageCounts]
    dropped: Dropped


class SegmentMetrics(Metrics):
    """Stage ``segment``: jieba word segmentation of the corpus."""

    file = "segment.json"
    sentences: int
    characters: int
    words: int
    mean_word_chars: float
    """Characters per word."""
    workers: int
    """Workers of the executor that segmented (``executor.workers``; the output does not depend on it)."""
    shards: int = absent()
    """Shards of ``shards.rows`` sentences (tasks/core/shards.py)."""
    shards_run: int = absent()
    """Shards this run processed; the others were finished by an earlier, killed run."""
    wall_sec: float
    """Wall-clock seconds of the segmentation (2 decimals)."""
    chars_per_sec: int
    """Characters segmented per wall-clock second (rounded)."""


class TokenizeMetrics(Metrics):
    """Stage ``tokenize``: the tokenizer and the tokenized corpus."""

    file = "tokenize.json"
    vocab_size: int
    tokens: int
    unk_rate: float
    """Share of the corpus tokens that are [UNK] (a fraction, 0-1)."""
    tokens_per_char: float
    shards: int = absent()
    """Shards of ``shards.rows`` sentences (tasks/core/shards.py)."""
    shards_run: int = absent()
    """Shards this run processed; the others were finished by an earlier, killed run."""


class SimilarWordsMetrics(Metrics):
    """Stage ``similar_words``: the lexicon of corpus words and their similar words (Mac)."""

    file = "similar_words.json"
    vector_words: int
    """Words with a vector in the word-vector file."""
    corpus_distinct_words: int
    lexicon_words: int
    """Corpus words with a vector (the lexicon's entries)."""
    lexicon_words_with_candidates: int
    """Lexicon words with at least one similar word."""
    mean_candidates: float
    """Similar words per lexicon word (3 decimals)."""
    corpus_occurrences_in_lexicon: float
    """Fraction (0-1, 4 decimals) of the corpus word occurrences that are lexicon words."""
    corpus_occurrences_with_candidates: float
    """Fraction (0-1, 4 decimals) of the corpus word occurrences that have a similar word."""
    neighbours: int
    """Nearest neighbours searched per word (``similar_words.neighbours``)."""
    wall_sec: float
    """Wall-clock seconds of the stage (2 decimals)."""
