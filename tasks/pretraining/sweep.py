"""Each compared objective's recipe, chosen by a cheap declared sweep on held-out dev text.

A comparison of objectives is fair only when each trains at a recipe that suits it (the claim is
about the objective, not about a learning rate that happens to suit one of them): ELECTRA's
small-model recipe is not BERT's (Clark et al. 2020, appendix A), and a tiny encoder's largest
stable learning rate is found, not assumed (Izsak et al. 2021, §4: a hyperparameter search under the
budget). Stage ``sweep@<objective>`` trains the objective once per ``sweep.settings`` entry for
``sweep.fraction`` of its budget (first pretraining seed, same data, same schedule shape, the
budget shortened), measures each on the held-out task's *dev* text and keeps the best by its measure's score
(:meth:`tasks.pretraining.heldout.Measure.score`: the MLM family's lowest held-out loss, or a kind's own,
e.g. ELECTRA's highest RTD AUC). ``pretrain@<objective>-<seed>`` then trains with the
chosen setting (:func:`tasks.pretraining.recipe.recipe`). Test text never takes part.

Only a setting that learned is eligible: one that diverged (a non-finite loss, stopped at once) loses
and is marked so; one whose model fails its gates at the sweep's horizon (the objective's gates on the
same dev text, :mod:`tasks.pretraining.gates`, and the collapse gate) loses too: a short-horizon
sweep otherwise favours a learning rate whose full run collapses. When no setting passes, the sweep
fails with one line naming each setting's state instead of picking one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tasks.core.errors import DivergedError, PipelineError
from tasks.core.params import Pretrain
from tasks.pretraining.checkpoint import clear_checkpoint
from tasks.pretraining.heldout import measure_models
from tasks.pretraining.modeling import prepare_model
from tasks.pretraining.pretrain import train


def measure(objective, model, ids: np.ndarray, offsets: np.ndarray, masks: dict, unigram: np.ndarray) -> dict:
    """The held-out measure a setting is judged by (:func:`tasks.pretraining.heldout.measure_models`, as stage
    ``curves`` measures a saved model; the measure: ``objective.measure``): the measure's ``fields`` (the MLM
    family's ``loss``/``accuracy``, a kind's own, e.g. ELECTRA's ``rtd_loss``/``auc``); ``score``, the higher
    the better (:meth:`tasks.pretraining.heldout.Measure.score`); and ``gates`` (records): the measure's gates
    (``unigram``: the corpus's unigram log-probabilities, :func:`tasks.pretraining.heldout.corpus_unigram`)
    and the collapse gate on the encoder's token states. PerLM predicting positions only has no held-out
    measure: ``score`` is None, only the collapse gate."""
    heldout = objective.measure(model.heldout, masks)
    point = measure_models(heldout, model.saved() if heldout else {}, model.hf.base_model, ids, offsets, unigram,
                           masks)
    return {**{k: point[k] for k in (heldout.fields if heldout else ())},
            "score": heldout.score(point) if heldout else None, "gates": point["gates"]}


def run_setting(objective, make_model, data, cfg: Pretrain, fraction: float, *, seed: int, device: torch.device,
                checkpoint: Path, fingerprint: str, heldout: tuple[np.ndarray, np.ndarray], masks: dict,
                unigram: np.ndarray, log=print) -> dict:
    """Train ``make_model()`` (a model of ``objective``, a
    :class:`tasks.pretraining.objectives.PretrainingObjective`) on ``data`` with ``cfg`` for ``fraction``
    of its budget and measure it (:func:`measure`, plus the objective's gates read from the pretraining
    log: NSP/SOP, PerLM); resumable from ``checkpoint``
    like a pretraining run. Returns the measure with ``tokens``, ``steps``, ``wall_sec`` and ``gates``
    (records); a setting whose loss became non-finite returns ``diverged`` (the one-line reason), no
    score and no gates."""
    model = prepare_model(make_model(), cfg, device)
    short = cfg.model_copy(update={"token_budget": max(1, round(cfg.token_budget * fraction)), "snapshots": []})
    try:
        summary = train.fn(model, data, short, seed=seed, device=device, checkpoint=checkpoint,
                           fingerprint=fingerprint, log=log, equal_flops=objective.equal_flops,
                           logged=objective.logged)
    except DivergedError as diverged:
        clear_checkpoint(checkpoint)
        return {"score": None, "diverged": str(diverged), "tokens": 0, "steps": 0, "wall_sec": 0.0, "gates": []}
    clear_checkpoint(checkpoint)  # its lock too
    measured = measure(objective, model, *heldout, masks, unigram)
    gates = objective.gates(summary["rows"], data, short, model)
    return {**measured, "tokens": summary["tokens"], "steps": summary["steps"], "wall_sec": summary["wall_sec"],
            "gates": measured["gates"] + [g.record() for g in gates]}


def choose(objective: str, results: dict[str, dict], learned_only: bool = True) -> str:
    """The best setting of those that learned (no divergence, every gate passed; without ``learned_only``,
    of those that did not diverge): the highest score, the first on a tie, the first eligible one when none
    has a score (PerLM positions-only).

    Raises:
        PipelineError: no setting is eligible; the message names each setting's state."""
    eligible = [name for name, r in results.items() if not r.get("diverged")
                and (not learned_only or all(g["passed"] for g in r.get("gates", [])))]
    if not eligible:
        def state(r: dict) -> str:
            if r.get("diverged"):
                return "diverged"
            return "failed " + ", ".join(g["name"] for g in r["gates"] if not g["passed"])
        raise PipelineError(f"sweep {objective}: no setting learned at the sweep's horizon ("
                            + "; ".join(f"{n}: {state(r)}" for n, r in results.items())
                            + "); widen sweep.settings (lower learning rates) or raise sweep.fraction")
    scored = [(results[n]["score"], -i, n) for i, n in enumerate(eligible) if results[n]["score"] is not None]
    return max(scored)[2] if scored else eligible[0]
