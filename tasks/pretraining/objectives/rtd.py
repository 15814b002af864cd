"""ELECTRA's replaced-token detection (Clark et al. 2020, ICLR; reference ``google-research/electra``), the
kind: a small MLM generator fills the masked positions with its samples and the discriminator tells every
token original or replaced (a model of its own: :mod:`tasks.pretraining.objectives.electra`, its torch half);
the loss parts it logs; its held-out measure (:class:`RtdMeasure`: the discriminator's loss and ROC AUC on
held-out text) with its gates (:func:`rtd_gates`) and its sweep score (the AUC). Saved with ``heldout: rtd``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tasks.core.params import Objective
from tasks.pretraining.gates import Z, Gate, difference_gate
from tasks.pretraining.objectives.base import Kind, Logged, Measure

RTD_LOSS_MARGIN = 0.1  # share of the base rate's binary entropy the discriminator must remove
AUC_FLOOR = 0.7  # a constant discriminator has ROC AUC 0.5


def binary_entropy(p: float) -> float:
    """Nats of a Bernoulli(``p``): the cross-entropy of the constant that knows only the base rate."""
    p = min(max(p, 1e-12), 1 - 1e-12)
    return float(-(p * np.log(p) + (1 - p) * np.log(1 - p)))


def roc_auc(scores: np.ndarray, targets: np.ndarray) -> tuple[float, float]:
    """ROC AUC of ``scores`` for the boolean ``targets`` (Mann-Whitney, ties counted half) and its
    standard error (Hanley and McNeil 1982, eq. 2); NaN without both classes."""
    positives, negatives = int(targets.sum()), int((~targets).sum())
    if not positives or not negatives:
        return float("nan"), float("nan")
    from scipy import stats

    ranks = stats.rankdata(scores)
    auc = float((ranks[targets].sum() - positives * (positives + 1) / 2) / (positives * negatives))
    q1, q2 = auc / (2 - auc), 2 * auc ** 2 / (1 + auc)
    var = (auc * (1 - auc) + (positives - 1) * (q1 - auc ** 2) + (negatives - 1) * (q2 - auc ** 2)) / (
        positives * negatives)
    return auc, float(np.sqrt(max(var, 0.0)))


def rtd_gates(losses: np.ndarray, scores: np.ndarray, targets: np.ndarray, rows: np.ndarray,
              sample_match: float) -> tuple[list[Gate], dict]:
    """ELECTRA's gates, from every held-out token, with the reference's ``metric_fn`` measures
    (google-research/electra, ``run_pretraining.py``): binary cross-entropy at most ``1 - RTD_LOSS_MARGIN``
    of the base rate's binary entropy (the loss of a constant that knows only the replaced share; the
    interval of its per-token difference, clustered by sequence: :func:`tasks.pretraining.gates.difference_gate`)
    and ROC AUC above :data:`AUC_FLOOR` (Hanley and McNeil's standard error).

    Args:
        losses: ``[T]`` binary cross-entropy per token (nats); scores: ``[T]`` discriminator logits;
        targets: ``bool [T]`` replaced; rows: ``int [T]`` the sequence of each token.
        sample_match: share of the generator's samples equal to the original token (those count
            as original).
    Returns:
        ``(gates, measures)``: measures holds ``replaced_share``, ``base_rate_loss``,
        ``sample_match``, ``auc``, ``precision``, ``recall``.
    """
    share = float(targets.mean())
    base = binary_entropy(share)
    # the base-rate constant's per-token loss: the difference's interval leaves out its own noise
    constant = np.where(targets, -np.log(max(share, 1e-12)), -np.log(max(1 - share, 1e-12)))
    auc, auc_se = roc_auc(scores, targets)
    predicted = scores > 0
    measures = {"replaced_share": share, "base_rate_loss": base, "sample_match": sample_match, "auc": auc,
                "precision": float((predicted & targets).sum() / max(predicted.sum(), 1)),
                "recall": float((predicted & targets).sum() / max(targets.sum(), 1))}
    gates = [
        difference_gate(f"loss {100 * RTD_LOSS_MARGIN:g}% below the base rate's entropy", losses - constant, rows,
                        float(losses.mean()), base, (1 - RTD_LOSS_MARGIN) * base, above=False),
        Gate("ROC AUC", auc, auc - Z * auc_se, auc + Z * auc_se, AUC_FLOOR, above=True),
    ]
    return gates, measures


class RtdMeasure(Measure):
    """ELECTRA's held-out measure (:func:`tasks.pretraining.objectives.electra.evaluate_rtd`, :func:`rtd_gates`);
    a sweep keeps the highest AUC: its loss depends on how hard the generator makes the task, which the recipe changes too."""

    name, label, loss_field = "rtd", "RTD", "rtd_loss"
    fields = ("rtd_loss", "auc")
    columns = (("auc", "dev RTD AUC", False),)

    def load(self, folder: Path) -> dict:
        from transformers import ElectraForMaskedLM, ElectraForPreTraining

        from tasks.pretraining.objectives.electra import GENERATOR_DIR

        return {"": ElectraForPreTraining.from_pretrained(folder),
                GENERATOR_DIR: ElectraForMaskedLM.from_pretrained(folder / GENERATOR_DIR)}

    def evaluate(self, models: dict, ids: np.ndarray, offsets: np.ndarray, masks: dict,
                 unigram: np.ndarray) -> tuple[dict, list[Gate]]:
        from tasks.pretraining.objectives.electra import GENERATOR_DIR, evaluate_rtd

        scores = evaluate_rtd(models[""], models[GENERATOR_DIR], ids, offsets, **masks)
        at = scores["tokens_measured"]
        gates, measures = rtd_gates(at["losses"], at["scores"], at["targets"], at["rows"], scores["sample_match"])
        return {"rtd_loss": scores["rtd_loss"], "rtd_accuracy": scores["rtd_accuracy"],
                "predictions": scores["tokens"], **measures}, gates

    def score(self, point: dict) -> float:
        return point["auc"]


class Rtd(Kind):
    name = "rtd"
    token_target = "replaced"
    measure = RtdMeasure()
    logged = (Logged("rtd_loss", "rtd_loss", "step", "RTD"), Logged("rtd_accuracy", "rtd_correct", "token", "RTD"))

    def applies(self, spec: Objective) -> bool:
        return spec.rtd is not None

    def describe(self, spec: Objective) -> list[str]:
        return [f"+ RTD (generator {spec.rtd.generator_size:g}, λ {spec.rtd.weight:g})"]

    def model(self, params, spec: Objective, tokenizer, seed: int):
        from tasks.pretraining.objectives.electra import new_electra

        return new_electra(params.model, spec.rtd, len(tokenizer), params.pretraining_data.max_seq_length,
                           tokenizer.pad_token_id, seed)
