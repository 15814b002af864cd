"""Pretraining objectives: each kind one module, each objective of ``params.yaml`` built once from its
validated params (:func:`build`).

An objective (``objectives.<name>``, :class:`tasks.core.params.Objective`, where its params are
validated) is a token selection with a replacement distribution, plus what its kinds add. A *kind*
(:class:`Kind`, one module of this package each, listed in :data:`KINDS`) says from the params
whether an objective has it, and supplies its part of the run: the data's corruption (a
substitution table), the model's heads (or a model of its own), the loss parts it logs, its held-out
measure with its gates and sweep score, the gates read from the training log, the token target and
the words that describe it in the report:

======================  ========================================================================
``masked``              MLM, WWM, N-gram and span selection with BERT's [MASK]/random/keep: the base
``mac``                 MacBERT's similar-word replacement (MLM as correction)
``sound_alike``         sound-alike characters (same pinyin) as the replacement
``perlm``               PERT's permuted LM and its ablations (granularity, space, targets)
``sbo``                 SpanBERT's span boundary objective
``pinyin``              PLOME's pinyin prediction at the chosen tokens (a head of its own)
``sentence``            NSP / SOP on [CLS]
``rtd``                 ELECTRA's replaced-token detection (a model of its own)
======================  ========================================================================

:class:`PretrainingObjective` is what the stages use (``pretraining_data``, ``sweep``, ``pretrain``,
``curves``): the masking of the data, the batch-time masker, the model, the held-out inputs and
measure, the gates and the facts the metrics record. Adding a kind: docs/objectives.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tasks.core.params import Objective, PretrainingData
from tasks.pretraining.masking import MaskingConfig, masking_config
from tasks.pretraining.objectives.base import Kind, Logged, Measure
from tasks.pretraining.objectives.mac import Mac
from tasks.pretraining.objectives.masked import Masked, MlmMeasure, mlm_measure
from tasks.pretraining.objectives.perlm import PerLM
from tasks.pretraining.objectives.pinyin import Pinyin
from tasks.pretraining.objectives.rtd import Rtd
from tasks.pretraining.objectives.sbo import Sbo
from tasks.pretraining.objectives.sentence import SentenceTask
from tasks.pretraining.objectives.sound_alike import SoundAlike

KINDS: tuple[Kind, ...] = (Masked(), Mac(), SoundAlike(), PerLM(), Sbo(), Pinyin(), Rtd(), SentenceTask())
"""Every kind, in the order their parts are described and their gates listed."""
MEASURES: tuple[Measure, ...] = (MlmMeasure(), *(kind.measure for kind in KINDS if kind.measure))
"""Every held-out measure (the MLM family's, then the kinds' own), as the report lists them."""
LOGGED: tuple[Logged, ...] = tuple(part for kind in KINDS for part in kind.logged)
"""Every loss part a kind's head logs, as the report lists them."""


def kinds_of(spec: Objective) -> tuple[Kind, ...]:
    """The kinds an objective's params make up."""
    return tuple(kind for kind in KINDS if kind.applies(spec))


def describe(spec: Objective) -> str:
    """``wwm; mask 80 / random 10 / keep 10; + SOP; dynamic``: an objective's params in words (the
    report's "definition" column): each kind's part, then static or dynamic and the budget."""
    parts = [part for kind in kinds_of(spec) for part in kind.describe(spec)]
    parts.append("dynamic" if spec.dynamic else "static")
    if spec.budget == "mlm_flops":
        parts.append("MLM's FLOPs")
    return "; ".join(parts)


@dataclass(frozen=True)
class PretrainingObjective:
    """Objective ``name`` of the params, built (:func:`build`): its params ``spec``, the data params
    its masking reads, and its kinds."""

    name: str
    spec: Objective
    data: PretrainingData
    kinds: tuple[Kind, ...]

    @property
    def reserve(self) -> int:
        """Tokens of each packed row its kinds keep free (:meth:`rows`)."""
        return sum(kind.reserve for kind in self.kinds)

    def rows(self, packed, seed: int, tokenizer, scratch: Path) -> tuple:
        """Its data's packed rows as its kinds make them over (NSP/SOP: segment pairs), and what the metrics
        record of it: :meth:`tasks.pretraining.objectives.base.Kind.rows`, kind after kind."""
        stats = {}
        for kind in self.kinds:
            packed, more = kind.rows(packed, self.spec, seed=seed, name=self.name, tokenizer=tokenizer,
                                     scratch=scratch)
            stats.update(more)
        return packed, stats

    @property
    def needs_lexicon(self) -> bool:
        """The data carries jieba words and the similar-word lexicon (stage ``similar_words``)."""
        return any(kind.needs_lexicon for kind in self.kinds)

    @property
    def equal_flops(self) -> bool:
        """Trained for the model FLOPs an MLM spends on the token budget (``budget: mlm_flops``)."""
        return self.spec.budget == "mlm_flops"

    @property
    def logged(self) -> tuple[Logged, ...]:
        """The loss parts its heads add to the training log (:func:`tasks.pretraining.pretrain.train`)."""
        return tuple(part for kind in self.kinds for part in kind.logged)

    def measure(self, heads: str | None, masks: dict) -> Measure | None:
        """The held-out measure of its models: a kind's own, else the MLM family's under the corruption
        of ``masks`` (:meth:`heldout_inputs`: [MASK], Mac's or a substitution table's) when the model has
        an MLM head (``heads``: the model's ``heldout``, as ``pretraining.json`` saves it; None: PerLM
        predicting positions only, nothing to measure)."""
        for kind in self.kinds:
            if kind.measure is not None:
                return kind.measure
        return None if heads is None else mlm_measure(masks)

    def masking(self, tokenizer=None) -> MaskingConfig:
        """The corruption of the data, with the substitution table a kind builds from ``tokenizer`` (the
        run's vocabulary; required when a kind substitutes tokens)."""
        tables = [t for kind in self.kinds if (t := kind.substitution(tokenizer)) is not None] if tokenizer else []
        return masking_config(self.spec, self.data, tables[0] if tables else None)

    def masker(self, seed: int, tokenizer, lexicon: Path):
        """The batch-time masker of a dynamic objective (:class:`tasks.pretraining.examples.DynamicMasker`,
        with the similar words of ``lexicon`` when a kind needs them); None under static masking."""
        if not self.spec.dynamic:
            return None
        import pyarrow.parquet as pq

        from tasks.corpus.similar_words import similar_words_from_table
        from tasks.corpus.tokenize import random_token_ids
        from tasks.pretraining.examples import DynamicMasker

        similar = similar_words_from_table(pq.read_table(lexicon)) if self.needs_lexicon else None
        return DynamicMasker(self.masking(tokenizer), seed, self.name, tokenizer.mask_token_id,
                             random_token_ids(tokenizer), similar)

    def model(self, params, tokenizer, seed: int, init_folder: Path | None = None):
        """The model to pretrain for ``tokenizer``: a kind's own (ELECTRA), else an encoder with the
        heads of the kinds (:class:`tasks.pretraining.modeling.PretrainingModel`). ``seed`` draws the new
        weights; ``init_folder``: the checkpoint to start from (:func:`tasks.pretraining.init_from.resolve_init_from`),
        None: a new encoder of ``params.model``'s size.

        Raises:
            SourceError, ParamsError: as :func:`tasks.pretraining.init_from.init_masked_lm`."""
        for kind in self.kinds:
            if (own := kind.model(params, self.spec, tokenizer, seed)) is not None:
                return own
        from tasks.pretraining.modeling import pretraining_model

        options = {k: v for kind in self.kinds for k, v in kind.model_options(self.spec).items()}
        model = pretraining_model(params, tokenizer, seed, init_folder, **options)
        for kind in self.kinds:
            for name, head in kind.heads(self.spec, model.hf.config, tokenizer).items():
                model.add_head(name, head)
        return model

    def heldout_inputs(self, params, tokenizer, device, split: str | None = None) -> tuple:
        """What the held-out measure of this objective's models needs but the model: the held-out
        sequences (ids, offsets: flat layout) of ``curves.heldout_task`` and the keyword arguments of
        :func:`tasks.pretraining.heldout.evaluate_mlm` (seed, mask id, rates, device; a kind's corruption:
        ``mac``, ``substitution``). Params read: ``seed``, ``curves.heldout_task``,
        ``curves.heldout_sequences``, ``pretraining_data``'s ``max_seq_length``, ``masked_lm_prob``,
        ``max_predictions_per_seq``, and what a kind's corruption reads (Mac: its ``masking``,
        ``pretraining_data.ngram_probabilities`` and ``segment``).

        Raises:
            SourceError: the task's data, or (Mac) the lexicon, is missing."""
        from tasks.pretraining.heldout import heldout_text

        cfg, data = params.curves, params.pretraining_data
        masks = dict(lang=cfg.heldout_task, seed=params.seed, mask_token_id=tokenizer.mask_token_id,
                     masked_lm_prob=data.masked_lm_prob, max_predictions=data.max_predictions_per_seq, device=device)
        for kind in self.kinds:
            if (own := kind.heldout(params, self.spec, tokenizer, split)) is not None:
                ids, offsets, corruption = own
                return ids, offsets, {**masks, **corruption}
        return (*heldout_text(cfg.heldout_task, tokenizer, data.max_seq_length, cfg.heldout_sequences, split),
                masks)

    def gates(self, rows: list[dict], data, cfg, model) -> list:
        """The gates read from a pretraining log (``rows``; ``data``: its
        :class:`tasks.pretraining.examples.PretrainingExamples`, ``cfg`` its recipe, ``model`` the
        pretraining model): each kind's (NSP/SOP above chance, PerLM above its trivial rate)."""
        return [gate for kind in self.kinds for gate in kind.log_gates(rows, data, cfg, model, self.spec)]

    def facts(self, model, cfg, device) -> dict:
        """What a pretraining run is, for its log and its metrics
        (:class:`tasks.core.metrics.pretraining.PretrainMetrics`): the recipe's learning rate and batch,
        the model's parameters, the device, the masking, sentence task, budget and token target."""
        targets = [kind.token_target for kind in self.kinds if kind.token_target]
        return dict(learning_rate=cfg.learning_rate, batch_size=cfg.batch_size,
                    parameters=sum(p.numel() for p in model.hf.parameters()), device=str(device),
                    dynamic=self.spec.dynamic, sentence_task=self.spec.sentence_task, budget=self.spec.budget,
                    token_target=targets[-1] if targets else "token")


def build(params, name: str) -> PretrainingObjective:
    """Objective ``name`` of ``params`` (validated when the params were loaded).

    Raises:
        ParamsError: no objective has that name."""
    spec = params.objective(name)
    return PretrainingObjective(name, spec, params.pretraining_data, kinds_of(spec))
