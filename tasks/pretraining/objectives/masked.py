"""The base of every objective: a token selection (MLM single tokens, WWM whole words, N-gram spans of
whole words as MacBERT and PERT, SpanBERT's geometric spans: :mod:`tasks.pretraining.selection`) and
the replacement shares of the chosen units (BERT's [MASK] 80 / random 10 / keep 10, Devlin et al.
2019, §3.1: :mod:`tasks.pretraining.masking`), predicted over the vocabulary by the MLM head and
measured on held-out text with [MASK] (:class:`MlmMeasure`)."""

from __future__ import annotations

from pathlib import Path

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind, Measure

# The replacement a chosen token gets first, then the random noise, then keep (as params.yaml writes them).
SHARES = ("mask", "similar", "sound", "permute", "random", "keep")


class Masked(Kind):
    name = "masked"
    token_target = "token"

    def applies(self, spec: Objective) -> bool:
        return True

    def describe(self, spec: Objective) -> list[str]:
        shares = [(k, getattr(spec.replacement, k)) for k in SHARES]
        return [spec.masking, " / ".join(f"{k} {100 * v:g}" for k, v in shares if v)]


class MlmMeasure(Measure):
    """The MLM family's measure (:func:`tasks.pretraining.heldout.evaluate_mlm`,
    :func:`tasks.pretraining.gates.mlm_gates`) under [MASK] (``mlm``) or under its objective's corruption
    (``mac``: similar words; a substitution table's name, e.g. ``sound``), where copying the input is a
    trivial solution too; a sweep keeps the lowest loss."""

    label, loss_field = "MLM", "loss"
    fields = ("loss", "accuracy")
    columns = (("loss", "dev MLM loss", False), ("accuracy", "dev accuracy %", True))

    def __init__(self, name: str = "mlm"):
        self.name = name

    def load(self, folder: Path) -> dict:
        from transformers import BertForMaskedLM

        return {"": BertForMaskedLM.from_pretrained(folder)}

    def evaluate(self, models: dict, ids, offsets, masks: dict, unigram) -> tuple[dict, list]:
        from tasks.pretraining.gates import mlm_gates
        from tasks.pretraining.heldout import evaluate_mlm

        scores = evaluate_mlm(models[""], ids, offsets, positions=True, **masks)
        at = scores["positions"]
        gates, references = mlm_gates(at["losses"], at["correct"], at["labels"], at["rows"], unigram,
                                      inputs=at["inputs"] if self.name != "mlm" else None)
        return {"loss": scores["loss"], "accuracy": scores["accuracy"], "predictions": scores["predictions"],
                **references}, gates

    def score(self, point: dict) -> float:
        return -point["loss"]


def mlm_measure(masks: dict) -> MlmMeasure:
    """The MLM measure the held-out inputs ask for (``masks``: ``heldout_inputs`` of
    :class:`tasks.pretraining.objectives.PretrainingObjective`): ``mac`` with Mac's corruption, the
    substitution table's name with one, else ``mlm``."""
    if masks.get("mac") is not None:
        return MlmMeasure("mac")
    if masks.get("substitution") is not None:
        return MlmMeasure(masks["substitution"][0].name)
    return MlmMeasure()
