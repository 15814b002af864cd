"""Metrics of pretraining: the masked data (``pretraining_data``) and the training loop
(``pretrain``; its summary is shared with ``continue_pretrain``)."""

from __future__ import annotations

from typing import Literal

from tasks.core.metrics.base import Metrics, Record, absent


class PretrainingDataMetrics(Metrics):
    """Stage ``pretraining_data@<objective>``: packed sequences, segment pairs, and how the
    chosen tokens were corrupted (counts summed over the ``dupe_factor`` masked copies)."""

    file = "pretraining_data/<objective>.json"
    objective: str
    sequences: int
    tokens: int
    """Non-padding tokens of the sequences (per copy for static masking)."""
    maskable_tokens: int
    """Tokens of words (specials excluded), the ones masking may choose."""
    packing: Literal["doc_sentences", "full_sentences"]
    fill_rate: float
    """Non-padding share (0-1, 4 decimals) of the ``sequences x max_seq_length`` positions."""
    shards: int
    dynamic: bool
    """Masks drawn at batch time; the static counts below are then absent."""
    # the sentence task (absent without one)
    sentence_task: Literal["nsp", "sop"] = absent()
    pairs: int = absent()
    dropped_single_word_rows: int = absent()
    """Rows of a single word, which cannot be cut into two segments."""
    positive_share: float | None = absent()
    """Fraction (0-1, 4 decimals) of pairs labelled positive (in order / next); null without pairs."""
    # static masking (absent for dynamic masking)
    chosen: int = absent()
    chosen_rate: float = absent()
    """Chosen tokens per maskable token (a fraction, 5 decimals)."""
    mask: int = absent()
    random: int = absent()
    similar: int = absent()
    permute: int = absent()
    keep: int = absent()
    mask_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens replaced by [MASK]."""
    random_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens replaced by a random token."""
    similar_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens replaced by a similar word's (Mac)."""
    permute_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens permuted (PerLM)."""
    keep_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens kept as they are."""
    # similar-word replacement (Mac; absent otherwise)
    similar_words: int = absent()
    """Words replaced by a similar word."""
    similar_fallback_not_in_lexicon: int = absent()
    similar_fallback_no_candidate: int = absent()
    similar_fallback_length_mismatch: int = absent()
    similar_fallback_rate: float = absent()
    """Fraction (0-1, 5 decimals) of the words drawn for a similar word that got a random word instead."""


class PretrainSummary(Record):
    """What :func:`tasks.pretraining.pretrain.train` returns (its log rows go to the CSV)."""

    steps: int
    tokens: int
    """Non-padding tokens trained on."""
    final_loss: float | None
    """Mean loss of the last logging window; null when no step was logged."""
    final_token_accuracy: float | None
    """Argmax accuracy (0-1) at the chosen positions, last logging window."""
    final_sentence_accuracy: float | None
    """NSP/SOP accuracy (0-1), last logging window; null without a sentence task."""
    wall_sec: float
    """Wall-clock seconds of training, resumed runs included (2 decimals)."""
    tokens_per_sec: float | None
    """Tokens per wall-clock second (1 decimal)."""
    peak_memory_mb: float
    """Peak memory in MiB (2^20 bytes): CUDA allocations on GPU, resident set size on CPU."""


class PretrainMetrics(PretrainSummary, Metrics):
    """Stage ``pretrain@<objective>``: the training summary and the run's set-up."""

    file = "pretrain/<objective>.json"
    objective: str
    parameters: int
    """Parameters of the encoder and the MLM head."""
    device: str
    threads: int
    """torch CPU threads."""
    dynamic: bool
    sentence_task: Literal["nsp", "sop"] | None
    token_target: Literal["token", "position"]
    """What the token head predicts: the original token, or (PerLM) its position."""
