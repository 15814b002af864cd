"""Metrics of pretraining: the masked data (``pretraining_data``) and the training loop
(``pretrain``; its summary is shared with ``continue_pretrain``).

The fields an objective kind adds (:mod:`tasks.pretraining.objectives`: the loss parts its heads log, its
own held-out measure) are one block per kind (``SentenceFinal``, ``PinyinFinal``, ``RtdFinal``, ``RtdPoint``,
``RtdSwept``), composed into the stage's schemas, so a new kind adds its block here and its name to the composition."""

from __future__ import annotations

from typing import Literal

from tasks.core.metrics.base import Metrics, Record, absent


class PretrainingDataMetrics(Metrics):
    """Stage ``pretraining_data@<objective>-<seed>``: packed sequences, segment pairs, and how the
    chosen tokens were corrupted (counts summed over the ``dupe_factor`` masked copies)."""

    file = "pretraining_data/<objective>-<seed>.json"
    objective: str
    seed: int = absent()
    """The pretraining seed (absent in runs from before there were several)."""
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
    substitute: int = absent()
    keep: int = absent()
    mask_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens replaced by [MASK]."""
    random_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens replaced by a random token."""
    similar_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens replaced by a similar word's (Mac)."""
    permute_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens permuted (PerLM)."""
    substitute_share: float = absent()
    """Fraction (0-1, 5 decimals) of the chosen tokens replaced by a candidate of a substitution table
    (sound-alike characters)."""
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
    # substitution (sound-alike; absent otherwise)
    substitute_fallback: int = absent()
    """Tokens drawn for a substitute that had no candidate and got a random token instead."""


class GateResult(Record):
    """One gate of :mod:`tasks.pretraining.gates`: did the model beat the trivial solution of its objective?"""

    name: str
    value: float | None
    """Null when the data cannot give it (e.g. an AUC without a replaced token): the gate fails."""
    low: float | None
    """95% interval of ``value`` (see the gate's module for how it is computed)."""
    high: float | None
    threshold: float
    above: bool
    """The gate wants the value above the threshold (else below)."""
    passed: bool
    """The whole interval is on the wanted side of the threshold."""


class SentenceFinal(Record):
    """NSP/SOP's logged accuracy (:mod:`tasks.pretraining.objectives.sentence`)."""

    final_sentence_accuracy: float | None = absent()
    """NSP/SOP accuracy (0-1), last logging window; absent without a sentence task (null in runs from before
    the kinds logged their own parts)."""


class RtdFinal(Record):
    """ELECTRA's logged accuracy (the replaced-token detection kind)."""

    final_rtd_accuracy: float | None = absent()
    """The discriminator's accuracy (0-1) over the tokens, last logging window (its token accuracy is the
    generator's)."""


class PinyinFinal(Record):
    """PLOME's logged accuracy (the pinyin kind, :mod:`tasks.pretraining.objectives.pinyin`)."""

    final_pinyin_accuracy: float | None = absent()
    """The pinyin head's accuracy (0-1) at the chosen tokens, last logging window."""


class PretrainSummary(SentenceFinal, RtdFinal, PinyinFinal):
    """What :func:`tasks.pretraining.pretrain.train` returns (its log rows go to the CSV)."""

    steps: int
    tokens: int
    """Non-padding tokens trained on."""
    final_loss: float | None
    """Mean loss of the last logging window; null when no step was logged."""
    final_token_accuracy: float | None
    """Argmax accuracy (0-1) at the chosen positions, last logging window (ELECTRA: the generator's)."""
    wall_sec: float
    """Wall-clock seconds of training, resumed runs included (2 decimals)."""
    flops: float = absent()
    """Model FLOPs of the training steps (forward and backward, counted from the configs the same way
    for every objective: :meth:`tasks.pretraining.modeling.PretrainingModel.flops`); absent in runs
    from before they were counted."""
    tokens_per_sec: float | None
    """Tokens per wall-clock second (1 decimal)."""
    precision: Literal["fp32", "bf16"] = absent()
    """The forward passes' matmuls: bf16 autocast or fp32 (``pretrain.bf16``:
    :func:`tasks.training.device.use_bf16`); absent in runs from before CPUs could run bf16."""
    peak_memory_mb: float
    """Peak memory in MiB (2^20 bytes): CUDA allocations on GPU, resident set size on CPU."""


class SnapshotPoint(Record):
    """The model at a fraction of its pretraining budget (``models/<name>/snapshots/<fraction>``)."""

    fraction: float
    step: int
    tokens: int
    seconds: float
    """Wall-clock seconds of training up to the snapshot."""
    flops: float | None
    """Model FLOPs of training up to the snapshot (null for a model that does not count them)."""


class PretrainMetrics(PretrainSummary, Metrics):
    """Stage ``pretrain@<objective>-<seed>``: the training summary and the run's set-up."""

    file = "pretrain/<objective>-<seed>.json"
    objective: str
    seed: int = absent()
    """The pretraining seed (absent in runs from before there were several)."""
    recipe: str = absent()
    """The ``sweep.settings`` entry it trained with (stage ``sweep``); absent in runs from before the sweep."""
    learning_rate: float = absent()
    """The peak learning rate of its recipe."""
    batch_size: int = absent()
    """The global batch of its recipe (sequences per optimizer step)."""
    parameters: int
    """Parameters of the saved model: the encoder and its MLM head (ELECTRA: its RTD head)."""
    device: str
    threads: int
    """torch CPU threads."""
    dynamic: bool
    sentence_task: Literal["nsp", "sop"] | None
    token_target: Literal["token", "position", "replaced"]
    """What the pretrained encoder learns to predict: the original token, (PerLM) its position, or
    (ELECTRA) whether each token was replaced."""
    budget: Literal["tokens", "mlm_flops"] = absent()
    """The objective's budget: ``pretrain.token_budget`` tokens, or the model FLOPs an MLM spends on
    them (absent in runs from before there was a choice)."""
    snapshots: list[SnapshotPoint] = absent()
    """The snapshots kept (``pretrain.snapshots``); absent in runs from before there were any."""
    gates: list[GateResult] = absent()
    """Gates read from the end of the training log (NSP/SOP, PerLM: :func:`tasks.pretraining.gates.training_log_gate`);
    [] when none applies; absent in runs from before there were gates."""


class RtdPoint(Record):
    """ELECTRA's held-out measure (the replaced-token detection kind's ``evaluate_rtd`` and ``rtd_gates``)."""

    rtd_loss: float | None = absent()
    """Held-out replaced-token detection, binary cross-entropy in nats per token."""
    rtd_accuracy: float | None = absent()
    """Held-out replaced-token detection accuracy (0-1) over the tokens."""
    replaced_share: float = absent()
    """Share (0-1) of held-out tokens the generator replaced (its samples that differ)."""
    base_rate_loss: float = absent()
    """Binary entropy of ``replaced_share`` (nats), the loss of a constant discriminator."""
    sample_match: float = absent()
    """Share (0-1) of the generator's samples equal to the original token."""
    auc: float = absent()
    """ROC AUC of the discriminator's scores for replaced tokens."""
    precision: float = absent()
    """Share (0-1) of the tokens called replaced that were."""
    recall: float = absent()
    """Share (0-1) of the replaced tokens called replaced."""


class CurvePoint(RtdPoint):
    fraction: float
    """Of the pretraining budget (1.0: the model itself)."""
    loss: float | None
    """Held-out MLM cross-entropy, nats per masked token (null without an MLM measure)."""
    accuracy: float | None
    """Held-out MLM accuracy (0-1) at the masked positions (null without an MLM measure)."""
    unigram_loss: float = absent()
    """MLM: the context-free loss, the pretraining corpus's unigram distribution at the same positions (nats)."""
    top_token_accuracy: float = absent()
    """MLM: accuracy (0-1) of predicting the corpus's most frequent token at every masked position."""
    copy_accuracy: float = absent()
    """Mac: accuracy (0-1) of copying the similar word's token the model saw at each chosen position."""
    gates: list[GateResult] = absent()
    """Whether the model learned its objective by this point (:mod:`tasks.pretraining.gates`)."""
    sequences: int = absent()
    """Held-out sequences measured: the independent units of the gates' intervals (``curves.heldout_sequences``,
    or fewer when the held-out task has fewer)."""


class CurvesMetrics(Metrics):
    """Stage ``curves@<objective>-<seed>``: the held-out measure at each snapshot and at the end
    (:mod:`tasks.pretraining.heldout`); tokens, seconds and FLOPs of each point are in
    ``pretrain/<objective>-<seed>.json``."""

    file = "curves/<objective>-<seed>.json"
    objective: str
    seed: int
    heldout_task: str
    sequences: int
    measure: Literal["mlm", "mac", "sound", "rtd"] | None = absent()
    """The held-out measure: MLM ([MASK] on single tokens), Mac (similar words on its own word units:
    MLM as correction), ELECTRA's replaced-token detection, or none (PerLM predicting positions
    only, whose MLM head is untrained)."""
    predictions: int | None
    """Positions measured: the masked ones (MLM: the same for every model; Mac: the same for every
    Mac model), or every token (RTD)."""
    points: list[CurvePoint]


class RtdSwept(Record):
    """What a sweep records of ELECTRA's held-out measure (the replaced-token detection kind's ``RtdMeasure``)."""

    rtd_loss: float | None = absent()
    """Held-out RTD binary cross-entropy on the dev text, nats per token."""
    auc: float | None = absent()
    """Held-out RTD ROC AUC on the dev text."""


class SweepSetting(RtdSwept):
    """One setting of a recipe sweep and how it did (:mod:`tasks.pretraining.sweep`)."""

    name: str
    overrides: dict[str, float | int]
    """What the setting changes in the objective's recipe."""
    score: float | None
    """What the choice maximises: its measure's score (minus the held-out MLM loss, Mac's under its own
    corruption; ELECTRA's RTD AUC); null without a measure."""
    loss: float | None = absent()
    """Held-out MLM cross-entropy on the dev text, nats per masked token."""
    accuracy: float | None = absent()
    """Held-out MLM accuracy (0-1) on the dev text."""
    tokens: int
    steps: int
    wall_sec: float
    """Wall-clock seconds of the setting's training (2 decimals)."""
    gates: list[GateResult] = absent()
    """The gates of the setting's model at the sweep's horizon, on the dev text: only a setting that passes
    them all can be chosen."""
    diverged: str | None = absent()
    """Why the setting stopped: its loss became non-finite (it cannot be chosen)."""


class SweepMetrics(Metrics):
    """Stage ``sweep@<objective>``: every setting of ``sweep.settings`` trained for ``fraction`` of the
    budget and measured on the held-out task's dev text, and the one chosen."""

    file = "sweep/<objective>.json"
    objective: str
    seed: int
    """The pretraining seed every setting trained with (``sweep.seed``)."""
    fraction: float
    heldout_task: str
    split: Literal["dev"]
    settings: list[SweepSetting]
    chosen: str
    """The setting ``pretrain`` trains this objective with."""
    wall_sec: float
    """Wall-clock seconds of the whole sweep (2 decimals)."""
