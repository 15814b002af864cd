"""The protocol of a kind of pretraining objective (:mod:`tasks.pretraining.objectives`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tasks.core.params import Objective


@dataclass(frozen=True)
class Logged:
    """A loss part a kind's head adds to the pretraining log (``metrics/pretrain/<name>.csv``): column
    ``column`` is the window's sum of the model's part ``part`` over ``per``: ``step`` (a mean loss, each
    micro-batch's weighted by its share of the step), ``sequence``, ``token`` or ``prediction`` (a count of
    right answers: an accuracy, also kept as ``final_<column>`` in the metrics). ``label`` names the head in
    the report."""

    column: str
    part: str
    per: Literal["step", "sequence", "token", "prediction"]
    label: str


class Measure:
    """A held-out measure of a pretrained model: how its saved models load, how they are measured with their
    gates, the fields a sweep records, how a sweep scores it and how the report shows it. The MLM family's is
    :class:`tasks.pretraining.objectives.masked.MlmMeasure`; a kind with a head of its own brings its own
    (:attr:`Kind.measure`).

    Attributes:
        name: the metrics' ``measure`` (``curves/<name>.json``).
        label: the report's word for it (``MLM``); loss_field: the :class:`tasks.core.metrics.pretraining.CurvePoint`
            field of its held-out loss (the report's curves and rank correlations).
        fields: what a sweep setting records of it (:class:`tasks.core.metrics.pretraining.SweepSetting`).
        columns: the sweep table's ``(field, header, percent)`` columns.
    """

    name: str
    label: str
    loss_field: str
    fields: tuple[str, ...]
    columns: tuple[tuple[str, str, bool], ...]

    def load(self, folder: Path) -> dict:
        """The models it measures, loaded from the model folder ``folder``, by sub-folder as the
        pretraining model saved them (``saved()``: ``""`` the folder itself)."""
        raise NotImplementedError

    def evaluate(self, models: dict, ids, offsets, masks: dict, unigram) -> tuple[dict, list]:
        """``(point, gates)``: its fields of a :class:`tasks.core.metrics.pretraining.CurvePoint` with
        ``predictions`` (the positions measured), and its gates (:mod:`tasks.pretraining.gates`).

        Args:
            models: as :meth:`load` returns them (or a model in memory's ``saved()``).
            ids, offsets: the held-out sequences in flat layout;
            masks: :func:`tasks.pretraining.heldout.evaluate_mlm`'s keyword arguments (``heldout_inputs`` of
                :class:`tasks.pretraining.objectives.PretrainingObjective`);
            unigram: :func:`tasks.pretraining.heldout.corpus_unigram`.
        """
        raise NotImplementedError

    def score(self, point: dict) -> float:
        """What a sweep maximises (:mod:`tasks.pretraining.sweep`)."""
        raise NotImplementedError


class Kind:
    """One kind of objective: :meth:`applies` says from an objective's params whether it has this kind;
    the other members supply its part of the run, and by default supply nothing. Each is called with
    the objective's validated params (``spec``: :class:`tasks.core.params.Objective`)."""

    name: str = ""
    needs_lexicon: bool = False
    """The data carries jieba words and the similar-word lexicon of each token's word."""
    token_target: str | None = None
    """What the encoder predicts at the chosen tokens (``token``, ``position``, ``replaced``), if this
    kind decides it (the metrics' ``token_target``)."""
    logged: tuple[Logged, ...] = ()
    """The loss parts of its heads in the training log."""
    reserve: int = 0
    """Tokens of each packed row it keeps free for :meth:`rows` (NSP/SOP: the [SEP] between the segments)."""
    measure = None
    """Its own held-out measure (a :class:`tasks.pretraining.heldout.Measure`) in place of the MLM family's;
    None: the model's MLM head is measured (or nothing, when it has none)."""

    def applies(self, spec: Objective) -> bool:
        raise NotImplementedError

    def describe(self, spec: Objective) -> list[str]:
        """Its words in the objective's description (the report)."""
        return []

    def substitution(self, tokenizer):
        """The :class:`tasks.pretraining.masking.Substitution` table its replacement share draws from,
        built from the vocabulary of ``tokenizer``; None: it substitutes nothing."""
        return None

    def rows(self, packed, spec: Objective, *, seed: int, name: str, tokenizer, scratch: Path) -> tuple:
        """The packed rows of its data (:class:`tasks.pretraining.packing.PackedRows`) made over, and what the
        metrics record of it (:class:`tasks.core.metrics.pretraining.PretrainingDataMetrics` fields): NSP/SOP
        pairs segments. ``seed``, ``name``: the pretraining seed and the objective's name (its draws are
        named after them); ``scratch``: a folder for what spills to disk. Default: unchanged, nothing."""
        return packed, {}

    def model_options(self, spec: Objective) -> dict:
        """Keyword arguments of :class:`tasks.pretraining.modeling.PretrainingModel`: the heads it adds."""
        return {}

    def heads(self, spec: Objective, config, tokenizer) -> dict:
        """Heads of its own (:class:`tasks.pretraining.modeling.TokenHead` modules, by name) that the encoder's
        pretraining model runs at the chosen positions, for an encoder of ``config`` (a ``BertConfig``) and
        the vocabulary of ``tokenizer``: PLOME's pinyin head."""
        return {}

    def model(self, params, spec: Objective, tokenizer, seed: int):
        """A pretraining model of its own (ELECTRA's generator and discriminator); None: the encoder with
        the kinds' heads."""
        return None

    def heldout(self, params, spec: Objective, tokenizer, split: str | None):
        """Its held-out corruption: ``(ids, offsets, kwargs)`` (the held-out sequences, flat layout, and
        the keyword arguments of :func:`tasks.pretraining.heldout.evaluate_mlm` that corrupt them as its
        training does); None: [MASK], the MLM measure."""
        return None

    def log_gates(self, rows: list[dict], data, cfg, model, spec: Objective) -> list:
        """Gates read from the training log (:mod:`tasks.pretraining.gates`), for heads without a
        held-out measure."""
        return []
