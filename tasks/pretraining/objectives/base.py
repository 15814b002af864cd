"""The protocol of a kind of pretraining objective (:mod:`tasks.pretraining.objectives`)."""

from __future__ import annotations

from tasks.core.params import Objective


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

    def applies(self, spec: Objective) -> bool:
        raise NotImplementedError

    def describe(self, spec: Objective) -> list[str]:
        """Its words in the objective's description (the report)."""
        return []

    def substitution(self, tokenizer):
        """The :class:`tasks.pretraining.masking.Substitution` table its replacement share draws from,
        built from the vocabulary of ``tokenizer``; None: it substitutes nothing."""
        return None

    def model_options(self, spec: Objective) -> dict:
        """Keyword arguments of :class:`tasks.pretraining.modeling.PretrainingModel`: the heads it adds."""
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
