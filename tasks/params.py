"""The schema of ``params.yaml``, validated before any stage does work.

Every knob of the pipeline lives in ``params.yaml``; this module turns it into
typed objects. Unknown keys, unknown objective names, and impossible values
(ratios that do not sum to 1, probabilities outside [0, 1]) raise
:class:`~tasks.errors.ParamsError` naming the offending key, at the start of a
stage rather than minutes into it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tasks.errors import ParamsError

PARAMS_FILE = "params.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------- sources


class PackageFile(_Strict):
    """One file taken from a package archive."""

    member: str = Field(description="path of the file inside the package (as installed)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="pinned SHA-256 of the file")


class PackageSource(_Strict):
    """Files shipped inside a package of a registry (PyPI), pinned by exact version."""

    type: Literal["pypi"]
    package: str
    version: str
    licence: str
    files: dict[str, PackageFile] = Field(min_length=1)


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

MASKING_SCHEMES = ("mlm", "wwm")


class Replacement(_Strict):
    """How a chosen token is corrupted (BERT: 80% [MASK], 10% random, 10% kept)."""

    mask: float = Field(ge=0, le=1)
    random: float = Field(ge=0, le=1)
    keep: float = Field(ge=0, le=1)

    @model_validator(mode="after")
    def _sums_to_one(self) -> "Replacement":
        total = self.mask + self.random + self.keep
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ValueError(f"mask + random + keep must sum to 1, got {total:g}")
        return self


class Objective(_Strict):
    masking: str = Field(description=f"one of {', '.join(MASKING_SCHEMES)}")

    @field_validator("masking")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in MASKING_SCHEMES:
            raise ValueError(f"unknown masking scheme {value!r}; known: {', '.join(MASKING_SCHEMES)}")
        return value


class PretrainingData(_Strict):
    max_seq_length: int = Field(ge=8, le=512)
    masked_lm_prob: float = Field(gt=0, lt=1)
    max_predictions_per_seq: int = Field(ge=1)
    replacement: Replacement
    dupe_factor: int = Field(ge=1)
    shard_size: int = Field(ge=1)
    workers: int = Field(ge=1)


# --------------------------------------------------------------------------- models and training


class ModelSize(_Strict):
    hidden_size: int = Field(ge=8)
    num_hidden_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    intermediate_size: int = Field(ge=8)
    hidden_dropout_prob: float = Field(ge=0, lt=1)
    attention_probs_dropout_prob: float = Field(ge=0, lt=1)

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
    device: str = "auto"


class Classification(_Strict):
    source: str
    dev_fraction: float = Field(gt=0, lt=1)
    test_fraction: float = Field(gt=0, lt=1)


class Finetune(_Strict):
    models: list[str] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    max_seq_length: int = Field(ge=8, le=512)
    epochs: float = Field(gt=0)
    batch_size: int = Field(ge=1)
    learning_rate: float = Field(gt=0)
    warmup_fraction: float = Field(ge=0, lt=1)
    weight_decay: float = Field(ge=0)
    max_grad_norm: float = Field(gt=0)
    device: str = "auto"


class Params(_Strict):
    seed: int
    sources: dict[str, Source]
    corpus: Corpus
    segment: Segment
    tokenizer: Tokenizer
    objectives: dict[str, Objective] = Field(min_length=1)
    pretraining_data: PretrainingData
    model: ModelSize
    pretrain: Pretrain
    sentiment: Classification
    finetune: Finetune

    @model_validator(mode="after")
    def _references_resolve(self) -> "Params":
        for i, item in enumerate(self.corpus.inputs):
            if item.source not in self.sources:
                raise ValueError(f"corpus.inputs[{i}].source: no source named {item.source!r} in sources")
        if self.sentiment.source not in self.sources:
            raise ValueError(f"sentiment.source: no source named {self.sentiment.source!r} in sources")
        if self.tokenizer.vocab != "train" and self.tokenizer.vocab not in self.sources:
            raise ValueError(f"tokenizer.vocab: {self.tokenizer.vocab!r} is neither 'train' nor a source name")
        if self.sentiment.dev_fraction + self.sentiment.test_fraction >= 1:
            raise ValueError("sentiment: dev_fraction + test_fraction must be below 1")
        for name in self.finetune.models:
            if name != "random" and name not in self.objectives:
                raise ValueError(f"finetune.models: {name!r} is neither 'random' nor an objective name")
        return self

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
