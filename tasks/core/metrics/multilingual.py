"""Metrics of the multilingual stages: documents, vocabulary extension, resampling,
continued pretraining and vocabulary pruning."""

from __future__ import annotations

from tasks.core.metrics.base import Metrics, Record, absent
from tasks.core.metrics.pretraining import PretrainSummary


class LanguageDocuments(Record):
    script: str
    """ISO 15924 code of the language's script."""
    read: int
    """Documents read from the inputs."""
    short: int
    """Documents dropped as shorter than ``multilingual.min_document_chars``."""
    duplicates: int
    documents: int
    """Documents kept (train and held out)."""
    heldout: int
    characters: int
    """Code points of the kept documents."""


class MissingInput(Record):
    """A declared input whose optional source was not acquired."""

    lang: str
    source: str | None
    files: list[str]
    """Glob patterns in the source (empty: all its files)."""
    reason: str


class MultilingualMetrics(Metrics):
    """Stage ``multilingual``: documents per language, inputs skipped, languages left with no text."""

    file = "multilingual.json"
    languages: dict[str, LanguageDocuments]
    missing_inputs: list[MissingInput]
    absent_languages: list[str]


class Coverage(Record):
    """A tokenizer on a language's held-out text (training text when none is held out)."""

    characters: int
    tokens: int
    unk_rate: float
    """Share of the tokens that are [UNK] (a fraction, 0-1)."""
    tokens_per_char: float


class TokenizerCoverage(Record):
    chinese_bert: Coverage
    base: Coverage
    """The pipeline's tokenizer."""
    extended: Coverage


class VocabExtensionMetrics(Metrics):
    """Stage ``vocab_extension``: coverage per language before and after extending the vocabulary."""

    file = "vocab_extension.json"
    base_vocab_size: int
    chinese_bert_vocab_size: int
    extended_languages: list[str]
    """Languages whose training-text [UNK] rate exceeded ``multilingual.vocab.unk_rate_threshold``."""
    train_unk_rate: dict[str, float]
    """Language -> [UNK] rate (fraction) of the base tokenizer on its training text."""
    new_tokens: int
    extended_vocab_size: int
    new_token_examples: list[str]
    """The first 40 tokens added."""
    coverage: dict[str, TokenizerCoverage]


class LanguageSample(Record):
    """One language under p_i ∝ n_i^α / l_i^β. Shares and probabilities are fractions (0-1)."""

    documents: int
    """n_i: training documents with at least one token."""
    tokens: int
    mean_length: float
    """l_i: tokens per document."""
    probability: float
    """p_i."""
    drawn_documents: int
    """m_i: documents drawn (copies counted)."""
    drawn_tokens: int
    repeat_factor: float
    """m_i / n_i."""
    max_copies: int
    """Most copies of one document drawn."""
    expected_token_share: float
    """p_i·l_i / Σ_j p_j·l_j: the token share the probabilities should give."""
    document_share_before: float
    """n_i / Σ n_j: the language's share of the training documents."""
    token_share_before: float
    """The language's share of the training tokens."""
    document_share_after: float
    """The language's share of the drawn documents."""
    token_share_after: float
    """The language's share of the drawn tokens."""


class ResampleMetrics(Metrics):
    """Stage ``resample@<mixture>``: the mixture's shares per language."""

    file = "resample/<mixture>.json"
    mixture: str
    alpha: float
    beta: float
    requested_tokens: int
    """``multilingual.total_tokens``."""
    documents: int
    tokens: int
    languages: dict[str, LanguageSample]


class HeldoutMlm(Record):
    """MLM on a language's held-out sequences (the same masked positions for every model)."""

    predictions: int
    """Masked positions scored."""
    loss: float | None
    """Cross-entropy in nats per masked token; null without predictions (likewise below)."""
    accuracy: float | None
    """Argmax accuracy (0-1)."""
    perplexity: float | None
    """exp(loss)."""


class Heldout(Record):
    before: dict[str, HeldoutMlm]
    """Language -> scores of the base model with the resized embeddings, before training."""
    after: dict[str, HeldoutMlm]


class ContinuePretrainMetrics(PretrainSummary, Metrics):
    """Stage ``continue_pretrain@<mixture>``: the training summary and held-out MLM per language."""

    file = "continue_pretrain/<mixture>.json"
    mixture: str
    base_model: str
    vocab_size_before: int
    vocab_size: int
    """Rows of the embeddings after the extension."""
    sequences: int
    """Training sequences of the mixture."""
    threads: int
    """torch CPU threads."""
    heldout: Heldout
    fast_mlm_vocab: dict[str, int] = absent()
    """CINO's fast MLM: per language, the tokens its softmax covered in training (absent: the full vocabulary)."""


class BeforeAfter(Record):
    before: int
    after: int


class PruneVocabMetrics(Metrics):
    """Stage ``prune_vocab``: the continued-pretrained model pruned to some languages' tokens."""

    file = "prune_vocab.json"
    mixture: str
    languages: list[str]
    vocab_size: BeforeAfter
    parameters: BeforeAfter
    model_bytes: BeforeAfter
    """Bytes of ``model.safetensors``."""
    tokenization_identical: bool
    """The pruned tokenizer splits the languages' training text as the original one does."""
    sequences_checked: int
    """Held-out sequences whose tokens are all kept, on which the logits were compared."""
    sequences_with_dropped_tokens: int
    max_abs_logit_diff: float = absent()
    """Largest |logit difference| over the checked sequences; absent when none was checked."""
