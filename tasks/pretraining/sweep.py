"""Each compared objective's recipe, chosen by a cheap declared sweep on held-out dev text.

A comparison of objectives is fair only when each trains at a recipe that suits it (the claim is
about the objective, not about a learning rate that happens to suit one of them): ELECTRA's
small-model recipe is not BERT's (Clark et al. 2020, appendix A), and a tiny encoder's largest
stable learning rate is found, not assumed (Izsak et al. 2021, §4: a hyperparameter search under the
budget). Stage ``sweep@<objective>`` trains the objective once per ``sweep.settings`` entry for
``sweep.fraction`` of its budget (first pretraining seed, same data, same schedule shape, the
budget shortened), measures each on the held-out task's *dev* text and keeps the best: the lowest
held-out MLM loss, or for ELECTRA the highest RTD AUC (its loss depends on how hard the generator
makes the task, which the recipe changes too). ``pretrain@<objective>-<seed>`` then trains with the
chosen setting (:func:`tasks.pretraining.recipe.recipe`). Test text never takes part.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tasks.core.params import Pretrain
from tasks.pretraining.gates import rtd_gates
from tasks.pretraining.heldout import evaluate_mlm, evaluate_rtd
from tasks.pretraining.modeling import prepare_model
from tasks.pretraining.pretrain import train


def measure(model, ids: np.ndarray, offsets: np.ndarray, masks: dict) -> dict:
    """The held-out measure a setting is judged by: ``loss``/``accuracy`` (MLM family, PerLM with a
    token head) or ``rtd_loss``/``auc`` (ELECTRA); and ``score``, the higher the better (−loss, AUC).
    PerLM predicting positions only has no held-out measure: ``score`` is None."""
    if model.heldout == "rtd":
        scores = evaluate_rtd(model.discriminator, model.generator, ids, offsets, **masks)
        at = scores["tokens_measured"]
        auc = rtd_gates(at["losses"], at["scores"], at["targets"], at["rows"], scores["sample_match"])[1]["auc"]
        return {"rtd_loss": scores["rtd_loss"], "auc": auc, "score": auc}
    if model.heldout == "mlm":
        scores = evaluate_mlm(model.hf, ids, offsets, **masks)
        return {"loss": scores["loss"], "accuracy": scores["accuracy"], "score": -scores["loss"]}
    return {"score": None}


def run_setting(make_model, data, cfg: Pretrain, fraction: float, *, seed: int, device: torch.device, checkpoint: Path,
                fingerprint: str, equal_flops: bool, heldout: tuple[np.ndarray, np.ndarray], masks: dict,
                log=print) -> dict:
    """Train ``make_model()`` on ``data`` with ``cfg`` for ``fraction`` of its budget and measure it
    (:func:`measure`); resumable from ``checkpoint`` like a pretraining run. Returns the measure
    with ``tokens``, ``steps`` and ``wall_sec``."""
    model = prepare_model(make_model(), cfg, device)
    short = cfg.model_copy(update={"token_budget": max(1, round(cfg.token_budget * fraction)), "snapshots": []})
    summary = train.fn(model, data, short, seed=seed, device=device, checkpoint=checkpoint, fingerprint=fingerprint,
                       log=log, equal_flops=equal_flops)
    checkpoint.unlink(missing_ok=True)
    return {**measure(model, *heldout, masks), "tokens": summary["tokens"], "steps": summary["steps"],
            "wall_sec": summary["wall_sec"]}


def choose(results: dict[str, dict]) -> str:
    """The setting with the best score (the first on a tie; the first if none has a score)."""
    scored = [(r["score"], -i, name) for i, (name, r) in enumerate(results.items()) if r["score"] is not None]
    return max(scored)[2] if scored else next(iter(results))
