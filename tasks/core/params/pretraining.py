"""The pretraining sections of ``params.yaml``: ``objectives``, ``similar_words``,
``pretraining_data``, ``model`` and ``pretrain``.

An objective is a token selection (masking scheme), a replacement distribution and an
optional sentence task; ``pretraining_data`` shapes the masked instances, ``model``
the encoder's size and ``pretrain`` the training run. The values live in ``params.yaml``.
"""

from __future__ import annotations

import math
from typing import Literal, get_args

from pydantic import ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from tasks.core.params.base import INFRASTRUCTURE, Device, _Strict

MaskingScheme = Literal["mlm", "wwm", "ngram", "span"]  # token selection (tasks.pretraining.masking)
SentenceTask = Literal["nsp", "sop"]  # segment-pair task (tasks.pretraining.pairing)
MASKING_SCHEMES: tuple[str, ...] = get_args(MaskingScheme)
SENTENCE_TASKS: tuple[str, ...] = get_args(SentenceTask)

MIN_GATE_SEQUENCES = 20  # fewer held-out sequences give a gate no interval (tasks/pretraining/gates.py)


class Replacement(_Strict):
    """What a chosen token becomes; the shares sum to 1 (see :mod:`tasks.pretraining.masking`).

    BERT 80/10/10 = ``{mask: 0.8, random: 0.1, keep: 0.1}``; Mac = ``{similar: 0.8,
    random: 0.1, keep: 0.1}``; PerLM = ``{permute: 0.9, keep: 0.1}``; MacBERT's
    ablations: all mask ``{mask: 0.9, keep: 0.1}``, random replace ``{random: 0.9, keep: 0.1}``;
    sound-alike correction ``{sound: 0.8, random: 0.1, keep: 0.1}``.
    """

    mask: float = Field(0.0, ge=0, le=1, description="share of the chosen units that become [MASK]")
    random: float = Field(0.0, ge=0, le=1, description="share that become a random token (a random word's "
                                                       "tokens under span masking and Mac)")
    similar: float = Field(0.0, ge=0, le=1, description="Mac (MacBERT §3.2): share of the chosen words that become "
                                                        "a similar word of the same length (stage similar_words)")
    permute: float = Field(0.0, ge=0, le=1, description="PerLM (PERT §3.2): share of the chosen tokens shuffled "
                                                        "among themselves; the labels are positions")
    sound: float = Field(0.0, ge=0, le=1, description="share of the chosen characters that become a sound-alike "
                                                      "character (same pinyin, any tone: "
                                                      "tasks/pretraining/objectives/sound_alike.py)")
    keep: float = Field(0.0, ge=0, le=1, description="share left as they are (still predicted)")

    @model_validator(mode="after")
    def _sums_to_one(self) -> "Replacement":
        total = self.mask + self.random + self.similar + self.permute + self.sound + self.keep
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(f"mask + random + similar + permute + sound + keep must sum to 1, got {total:g}")
        if self.permute and (self.mask or self.random or self.similar or self.sound):
            raise ValueError("permute (PerLM) predicts positions and cannot be mixed with mask, random, similar or "
                             "sound")
        return self


class Permutation(_Strict):
    """PerLM's options (PERT, Cui et al. 2022): the defaults are PERT's; the others its ablations (§6).

    * ``granularity``: which permuted tokens may trade places: any of the row (``none``, PERT's
      "no limit"), only those of one ``word``, one ``ngram`` (one masked span) or one ``sentence``;
    * ``space``: predict the position of each original token among the input's positions
      (``local``, PERT's), the original token over the vocabulary (``global``), or both (summed);
    * ``targets``: predict at the chosen 15% only (``partial``, PERT's) or at every token (``full``,
      ELECTRA-style: an unchosen token's target is its own position or token).
    """

    granularity: Literal["none", "word", "ngram", "sentence"] = Field(
        "none", description="which permuted tokens may trade places: any of the row (PERT's), or only those of one "
                            "word, N-gram or sentence (static data only)")
    space: Literal["local", "global", "both"] = Field(
        "local", description="predict the original token's position among the input's (PERT's), the original "
                             "token over the vocabulary, or both (summed)")
    targets: Literal["partial", "full"] = Field(
        "partial", description="predict at the chosen tokens (PERT's) or at every token (an unchosen one's "
                               "target: itself)")


class Rtd(_Strict):
    """ELECTRA's replaced-token detection (Clark et al. 2020, §2): a small MLM generator fills the
    masked positions with its samples and the discriminator tells every token original or replaced."""

    generator_size: float = Field(0.25, gt=0, le=1, description="the generator's hidden size, FFN size and "
                                                                 "heads as a share of the discriminator's (§3.2)")
    weight: float = Field(50.0, gt=0, description="λ: loss = MLM loss + λ · RTD loss (§2)")


# The knobs of `pretrain` an objective may set for itself (objectives.<name>.pretrain): its recipe.
RECIPE_KNOBS = ("learning_rate", "batch_size", "accumulation_steps", "warmup_fraction", "weight_decay",
                "max_grad_norm")


class Objective(_Strict):
    """A pretraining objective: token selection, replacement, sentence task, static or dynamic masking,
    and the options of SpanBERT (``sbo``), ELECTRA (``rtd``), PERT (``permutation``) and PLOME (``pinyin``)."""

    masking: str = Field(description=f"token selection: one of {', '.join(MASKING_SCHEMES)}")
    replacement: Replacement = Field(description="BERT's 80/10/10 is {mask: 0.8, random: 0.1, keep: 0.1}")
    sentence_task: str | None = Field(None, description=f"one of {', '.join(SENTENCE_TASKS)}, or null")
    dynamic: bool = Field(False, description="draw masks at batch time (RoBERTa) instead of in the data")
    sbo: bool = Field(False, description="SpanBERT's span boundary objective beside MLM (masking span)")
    rtd: Rtd | None = Field(None, description="ELECTRA: pretrain a discriminator by replaced-token detection")
    pinyin: bool = Field(False, description="PLOME's phonic prediction beside MLM: also predict each chosen token's "
                                            "toneless pinyin (tasks/pretraining/objectives/pinyin.py)")
    permutation: Permutation = Field(default_factory=Permutation, description="PerLM's options (replacement.permute)")
    budget: Literal["tokens", "mlm_flops"] = Field(
        "tokens", description="tokens: pretrain.token_budget tokens; mlm_flops: the model FLOPs an MLM of the same "
                              "size spends on that many tokens of the same batches (equal compute)")
    pretrain: dict[str, float | int] = Field(
        default_factory=dict, description=f"this objective's recipe: overrides of pretrain's "
                                          f"{', '.join(RECIPE_KNOBS)} ({{}}: pretrain's)")

    @field_validator("masking")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in MASKING_SCHEMES:
            raise ValueError(f"unknown masking scheme {value!r}; known: {', '.join(MASKING_SCHEMES)}")
        return value

    @field_validator("sentence_task")
    @classmethod
    def _known_sentence_task(cls, value: str | None) -> str | None:
        if value is not None and value not in SENTENCE_TASKS:
            raise ValueError(f"unknown sentence task {value!r}; known: {', '.join(SENTENCE_TASKS)} (or null)")
        return value

    @field_validator("pretrain")
    @classmethod
    def _recipe_knobs(cls, value: dict) -> dict:
        bad = set(value) - set(RECIPE_KNOBS)
        if bad:
            raise ValueError(f"unknown knob(s) {', '.join(sorted(bad))}; an objective may set "
                             f"{', '.join(RECIPE_KNOBS)}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "Objective":
        if self.replacement.similar and self.masking in ("mlm", "span"):
            raise ValueError("replacement.similar (Mac) replaces whole words one by one: use masking wwm or ngram")
        if self.sbo and self.masking != "span":
            raise ValueError("sbo (SpanBERT's span boundary objective) predicts spans: use masking span")
        if self.permutation != Permutation() and not self.replacement.permute:
            raise ValueError("permutation: options of PerLM, which needs replacement.permute > 0")
        if self.permutation.granularity == "sentence" and self.dynamic:
            raise ValueError("permutation.granularity sentence needs the sentence starts, which only static data "
                             "has: set dynamic false")
        if self.rtd and (self.replacement.permute or self.replacement.similar or self.replacement.sound or self.sbo):
            raise ValueError("rtd (ELECTRA): its generator is an MLM; use replacement mask/random/keep, no sbo")
        if self.pinyin and (self.replacement.permute or self.rtd):
            raise ValueError("pinyin reads the original character at each chosen token: not with permute (PerLM "
                             "predicts positions) or rtd (ELECTRA's model has no such head)")
        return self


class PretrainingData(_Strict):
    """The masked pretraining sequences (stage ``pretraining_data@<objective>-<seed>``): packed sentences,
    each objective's masking at the same rates."""

    max_seq_length: int = Field(ge=8, le=512, description="tokens per pretraining sequence, [CLS] and [SEP] included")
    masked_lm_prob: float = Field(gt=0, lt=1, description="share of a sequence's maskable tokens chosen (BERT: 0.15)")
    max_predictions_per_seq: int = Field(ge=1, description="at most this many chosen tokens per sequence "
                                                           "(BERT: 20 at length 128)")
    ngram_probabilities: list[float] = Field(min_length=1, description="P(span of 1, 2, ... words), N-gram masking")
    span_p: float = Field(0.2, gt=0, lt=1, description="span masking: span lengths in words ~ Geometric(span_p)")
    span_max_words: int = Field(10, ge=1, description="span masking: the geometric law clipped at this many words")
    dupe_factor: int = Field(ge=1, description="masked copies of the corpus (static masking only)")
    shard_size: int = Field(ge=1, description="sequences per Arrow shard of the pretraining data (one worker's job)",
                            json_schema_extra=INFRASTRUCTURE)
    packing: Literal["doc_sentences", "full_sentences"] = Field(
        "doc_sentences", description="RoBERTa §4.2: a sequence holds sentences of one document (doc_sentences, "
                                     "BERT's) or goes on into the next after a [SEP] (full_sentences; no NSP/SOP)")

    @field_validator("ngram_probabilities")
    @classmethod
    def _distribution(cls, value: list[float]) -> list[float]:
        if min(value) < 0 or not math.isclose(sum(value), 1.0, abs_tol=1e-6):
            raise ValueError(f"must be non-negative and sum to 1, got {value} (sum {sum(value):g})")
        return value


class SimilarWordsSpec(_Strict):
    """Where Mac's similar words come from (stage ``similar_words``)."""

    source: str = Field(description="the source (under sources) of the word vectors")
    file: str = Field(description="the word-vector file of that source (gensim KeyedVectors)")
    neighbours: int = Field(ge=1, le=100, description="nearest neighbours considered per word")


class ModelSize(_Strict):
    """An encoder's size and initialisation (BERT's names)."""

    hidden_size: int = Field(ge=8, description="H: width of the token states")
    num_hidden_layers: int = Field(ge=1, description="L: Transformer layers")
    num_attention_heads: int = Field(ge=1, description="A: attention heads per layer (a divisor of hidden_size)")
    intermediate_size: int = Field(ge=8, description="FFN inner width (BERT: 4H)")
    hidden_dropout_prob: float = Field(ge=0, lt=1, description="dropout on the embeddings and each sub-layer's "
                                                               "output while pretraining")
    attention_probs_dropout_prob: float = Field(ge=0, lt=1, description="dropout on the attention weights while "
                                                                        "pretraining")
    sinusoidal_position_amplitude: float = Field(
        ge=0, description="initialise position embeddings as sinusoids of this amplitude; 0 = BERT's normal init")
    local_attention_layers: int = Field(
        0, ge=0, description="bottom layers whose heads start attending to the previous or next token "
                             "(tasks.pretraining.initialization); 0 = BERT's init")
    local_attention_strength: float = Field(3.0, gt=0, description="scale of the local heads' q·k at init")

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> "ModelSize":
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"
            )
        if self.local_attention_layers > self.num_hidden_layers:
            raise ValueError(f"local_attention_layers {self.local_attention_layers} exceeds num_hidden_layers "
                             f"{self.num_hidden_layers}")
        if self.local_attention_layers and not self.sinusoidal_position_amplitude:
            raise ValueError("local_attention_layers needs sinusoidal_position_amplitude > 0: the local heads "
                             "find their neighbours through the sinusoidal position table")
        return self


def resolve_model_preset(raw: dict) -> dict:
    """``raw`` params with ``model: {preset: NAME, <overrides>}`` replaced by the row
    ``model_presets.NAME`` updated with the overrides (a plain ``model`` mapping without
    ``preset`` is left as it is), so that ``Params.model`` is always a :class:`ModelSize`.

    Raises:
        ValueError: (naming ``model.preset``) the preset is not a key of ``model_presets``.
    """
    model = raw.get("model") if isinstance(raw, dict) else None
    if not isinstance(model, dict) or "preset" not in model:
        return raw
    presets = raw.get("model_presets") or {}
    overrides = {k: v for k, v in model.items() if k != "preset"}
    name = model["preset"]
    if not isinstance(name, str) or not isinstance(presets.get(name), dict):
        raise ValueError(f"model.preset: unknown preset {name!r}; model_presets declares: "
                         f"{', '.join(map(str, presets)) or 'none'}")
    return {**raw, "model": {**presets[name], **overrides}}


class Pretrain(_Strict):
    """Pretraining (stages ``sweep@``, ``pretrain@``): the budget, the recipe (which an objective's own
    ``pretrain`` and a sweep setting override), and how the run is computed."""

    seeds: list[NonNegativeInt] = Field(min_length=1, description="pretraining seeds: each compared objective and "
                                        "the random-init baseline exist once per seed (models/<objective>-<seed>)")
    snapshots: list[float] = Field(description="fractions of the budget at which the model is also kept "
                                               "(models/<name>/snapshots/<fraction>), for the score-for-compute curves")
    init_from: str | None = Field(None, description=(
        "null: random weights; else a BERT checkpoint to continue (as HFL initialised BERT-wwm from "
        "BERT-base-chinese): a pipeline model (models/<name>), a hub_models name (after import_model@<name>), a "
        "local folder, or a hub id (online only). Its own size replaces model.preset, its MLM head is kept (a "
        "fresh one tied to its embeddings if it has none), and its vocabulary must be the one stage tokenize used "
        "(tokenizer.vocab: its vocabulary's source). DVC tracks the name, not the folder: after changing the folder "
        "in place, dvc repro -f pretrain (tasks.pretraining.init_from.resolve_init_from)"))
    token_budget: int = Field(ge=1, description="non-padding tokens to train on")
    batch_size: int = Field(ge=1, description="global batch: examples per optimizer step over all processes and "
                                              "accumulation steps")
    accumulation_steps: int = Field(1, ge=1, description="micro-batches per process per optimizer step")
    learning_rate: float = Field(gt=0, description=(
        "peak learning rate (AdamW, linear warm-up then linear decay to 0). The sweep owns it when sweep.settings "
        "set it: the chosen setting's replaces it, and this value is the recipe only with no sweep (the default run)"))
    warmup_fraction: float = Field(ge=0, lt=1, description="share of the steps of linear warm-up")
    weight_decay: float = Field(ge=0, description="AdamW's decoupled weight decay (not on biases and LayerNorm)")
    max_grad_norm: float = Field(gt=0, description="the global gradient norm is clipped to this")
    log_every: int = Field(ge=1, description="steps per row of metrics/pretrain/<name>.csv",
                           json_schema_extra=INFRASTRUCTURE)
    checkpoint_every: int = Field(ge=1, description="steps between resumable checkpoints",
                                  json_schema_extra=INFRASTRUCTURE)
    device: Device = Field(description="auto (CUDA when present, else CPU), cpu, cuda, cuda:<n> or mps",
                           json_schema_extra=INFRASTRUCTURE)
    threads: int | None = Field(None, ge=1, description="CPU intra-op threads of the training process (torch."
                                "set_num_threads): float rounding depends on them, so they are part of the recipe "
                                "and no number of study workers changes a result; null: the process's own",
                                json_schema_extra=INFRASTRUCTURE)
    # precision and speed (tasks.pretraining.modeling.prepare_model, tasks.training.device.use_bf16)
    bf16: bool | Literal["auto"] = Field(
        "auto", description="bf16 autocast (mixed precision): auto on CUDA only; true also on CPUs with native "
        "bf16 (avx512_bf16 or AMX; fp32 elsewhere), where it measured slower for the same loss (docs/running.md); "
        "false: fp32", json_schema_extra=INFRASTRUCTURE)
    tf32: bool = Field(True, description="CUDA: TF32 tensor cores for the fp32 matmuls left outside autocast",
                       json_schema_extra=INFRASTRUCTURE)
    fused_adamw: bool = Field(True, description="the fused AdamW kernel (CPU and CUDA): one kernel for all parameters",
                              json_schema_extra=INFRASTRUCTURE)
    compile: bool = Field(False, description="torch.compile the encoder (any device; the first steps compile)",
                          json_schema_extra=INFRASTRUCTURE)
    activation_checkpointing: bool = Field(False, description="recompute each layer's activations in the backward "
                                                              "pass: less memory, about 1/3 more compute",
                                           json_schema_extra=INFRASTRUCTURE)

    def for_objective(self, objective: Objective, setting: dict | None = None) -> "Pretrain":
        """These knobs with ``objective``'s recipe (``objectives.<name>.pretrain``) over them, then a
        sweep ``setting``'s (both checked when the params are loaded: :meth:`check_recipe`)."""
        overrides = {**objective.pretrain, **(setting or {})}
        return self.model_copy(update=overrides) if overrides else self

    def check_recipe(self, overrides: dict) -> None:
        """Raises pydantic.ValidationError: an override of the wrong type or range for these knobs."""
        Pretrain.model_validate({**self.model_dump(), **overrides})

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, value: list[int]) -> list[int]:
        if len(set(value)) != len(value):
            raise ValueError(f"seeds repeat: {value}")
        return value

    @field_validator("snapshots")
    @classmethod
    def _fractions(cls, value: list[float]) -> list[float]:
        if any(not 0 < f < 1 for f in value) or sorted(set(value)) != list(value):
            raise ValueError(f"snapshots must be ascending distinct fractions in (0, 1) (the end is the model): "
                             f"{value}")
        return value


class Sweep(_Strict):
    """The cheap recipe search run for every compared objective (stage ``sweep@<objective>``): each
    setting trains for ``fraction`` of the budget (pretraining seed ``seed``) and is measured on the
    held-out task's *dev* text; the best becomes the objective's recipe in ``pretrain``."""

    seed: NonNegativeInt = Field(description="the pretraining seed every setting trains with (one of pretrain.seeds): "
                                             "a fixed one, so that a study split into units by seed sweeps once")
    fraction: float = Field(gt=0, le=1, description="share of the objective's budget each setting trains for")
    settings: dict[str, dict[str, float | int]] = Field(
        description=f"name -> overrides of the objective's recipe ({', '.join(RECIPE_KNOBS)}); {{}}: no search, "
                    "pretrain trains with params' own recipe (the default run's: "
                    "docs/running.md#the-default-run-and-what-runs-at-full-scale)")
    learned_only: bool = Field(True, description=(
        "only a setting whose model learned (finite loss, every gate passed at the sweep's horizon) can be "
        "chosen, and a sweep with none fails; false: the best finite score whatever the gates (runs too small "
        "to learn, such as the end-to-end tests')"))

    @field_validator("settings")
    @classmethod
    def _recipe_knobs(cls, value: dict) -> dict:
        for name, overrides in value.items():
            bad = set(overrides) - set(RECIPE_KNOBS)
            if bad:
                raise ValueError(f"{name}: unknown knob(s) {', '.join(sorted(bad))}; a setting may set "
                                 f"{', '.join(RECIPE_KNOBS)}")
        return value


class Curves(_Strict):
    """Score-for-compute curves: the held-out MLM measure of each model and its snapshots (stage
    ``curves@<objective>-<seed>``), and the snapshots fine-tuned (``finetune_snapshot``)."""

    heldout_task: str = Field(description="a task whose evaluation text (dev and test, never pretrained on) is "
                                          "the held-out text of the MLM measure")
    heldout_sequences: int = Field(ge=MIN_GATE_SEQUENCES, description=(
        "held-out sequences of max_seq_length the measure masks: the independent units of the gates' intervals, "
        f"at least {MIN_GATE_SEQUENCES} (tasks/pretraining/gates.py); a task with fewer gives what it has, and "
        "the report says how many"))
    tasks: list[str] = Field(description="fine-tuning tasks each snapshot is also fine-tuned on ([]: none)")


class Distributed(_Strict):
    """``torchrun`` processes of the training stages (:mod:`tasks.training.distributed`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=INFRASTRUCTURE)

    nproc_per_node: int = Field(ge=1, description="training processes per machine (DDP ranks)")
    nnodes: int = Field(ge=1, description="machines")
    rdzv_endpoint: str | None = Field(description="host:port of the rendezvous (node 0) when nnodes > 1")
    rdzv_id: str = Field(description="job id shared by the nodes of one run")

    @model_validator(mode="after")
    def _endpoint_for_several_nodes(self) -> "Distributed":
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("rdzv_endpoint: several nodes (nnodes > 1) need the host:port of node 0")
        return self
