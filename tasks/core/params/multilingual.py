"""The ``multilingual`` section of ``params.yaml`` (CINO-style continued pretraining).

Its language inputs, the held-out split, the vocabulary extension, the language
mixtures the corpus is resampled with, the continued pretraining and the vocabulary
pruning (stages ``multilingual`` … ``prune_vocab``). The values live in ``params.yaml``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tasks.core.errors import ParamsError
from tasks.core.params.base import _Strict

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

    alpha: float = Field(ge=0, le=1, description="α: 1 keeps the languages' shares, 0 samples them uniformly "
                                                 "(CINO, XLM-R's exponent)")
    beta: float = Field(ge=0, le=1, description="β: divides by each language's mean document length to the β "
                                                "(0: none)")


class VocabExtension(_Strict):
    """CINO's vocabulary extension (stage ``vocab_extension``): a WordPiece vocabulary trained on the
    languages the base vocabulary covers badly, merged into it."""

    coverage_vocab: str = Field(description="a source holding vocab.txt whose coverage is measured (Chinese BERT)")
    unk_rate_threshold: float = Field(ge=0, lt=1, description="extend for languages above this [UNK] rate")
    new_vocab_size: int = Field(ge=10, description="WordPiece vocabulary trained on those languages")
    min_frequency: int = Field(ge=1, description="a pair merges only if seen at least this often")


class ContinuedPretraining(_Strict):
    """The base model's MLM pretraining continued on each resampled corpus (stage ``continue_pretrain@<mixture>``);
    the other knobs are pretrain's."""

    token_budget: int = Field(ge=1, description="non-padding tokens to train on")
    learning_rate: float = Field(gt=0, description="peak learning rate")
    fast_mlm: bool = Field(False, description="CINO's fast MLM: the softmax over each language's vocabulary only")


class VocabPruning(_Strict):
    """TextPruner's vocabulary pruning of a continued model (stage ``prune_vocab``)."""

    mixture: str = Field(description="the continued-pretraining mixture whose model is pruned")
    languages: list[str] = Field(min_length=1, description="keep the tokens these languages' text uses")


class Multilingual(_Strict):
    """CINO-style multilingual continued pretraining (stages ``multilingual``, ``vocab_extension``,
    ``resample@<mixture>``, ``continue_pretrain@<mixture>``, ``prune_vocab``)."""

    inputs: list[MultilingualInput] = Field(min_length=1, description="the languages' texts")
    min_document_chars: int = Field(ge=1, description="shorter documents are dropped")
    heldout_fraction: float = Field(gt=0, lt=1, description="documents per language held out for evaluation")
    heldout_max_documents: int = Field(ge=1, description="at most this many held-out documents per language")
    base_model: str = Field(description="the pretrained model to continue (<objective>-<seed> of this run)")
    vocab: VocabExtension
    total_tokens: int = Field(ge=1, description="size of each resampled corpus, in tokens")
    mixtures: dict[str, Mixture] = Field(min_length=1, description="name -> a resampled corpus and its continued model")
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
