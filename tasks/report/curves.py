"""Report section "Score for compute": each objective's held-out MLM loss (stage ``curves``) and,
where snapshots were fine-tuned, its fine-tuned score, against pretraining tokens, seconds and
model FLOPs, with 95% bands over pretraining seeds (after MosaicBERT's score-for-time curves and
PERT's "performance at different training steps"); and how well the cheap measure ranks the
fine-tuned scores (Spearman's ρ)."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.core.metrics.pretraining import CurvesMetrics, PretrainMetrics
from tasks.core.paths import seeded
from tasks.downstream.families import FAMILIES
from tasks.pretraining.objectives import MEASURES
from tasks.report.common import fmt, load_metrics, save_figure, table
from tasks.report.templating import render_blocks

AXES = (("tokens", "pretraining tokens"), ("seconds", "pretraining seconds"), ("flops", "pretraining model FLOPs"))
CORRUPTED = {"mac": "Mac", "sound": "sound-alike"}  # held-out measures under an objective's own corruption
LOSSES = {m.loss_field: m.label for m in MEASURES}  # each held-out measure's loss field and its label


def _points(metrics: Path, objective: str, seed: int) -> list[dict] | None:
    """The curve of one model: per fraction, held-out loss and accuracy with its tokens, seconds
    and FLOPs (the snapshots', then the end's); None when either stage has not run."""
    name = seeded(objective, seed)
    curve = load_metrics(metrics / "curves" / f"{name}.json", CurvesMetrics)
    run = load_metrics(metrics / "pretrain" / f"{name}.json", PretrainMetrics)
    if curve is None or run is None:
        return None
    at = {s.fraction: {"tokens": s.tokens, "seconds": s.seconds, "flops": s.flops} for s in run.snapshots or []}
    at[1.0] = {"tokens": run.tokens, "seconds": run.wall_sec, "flops": run.flops}
    return [{"fraction": p.fraction, "accuracy": p.accuracy, **{key: getattr(p, key) for key in LOSSES},
             "measure": curve.measure, **at[p.fraction]} for p in curve.points if p.fraction in at]


def _band(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds (axis 0) and its 95% t band (none with one seed)."""
    mean = values.mean(0)
    if len(values) < 2:
        return mean, mean, mean
    half = stats.t.ppf(0.975, len(values) - 1) * values.std(0, ddof=1) / np.sqrt(len(values))
    return mean, mean - half, mean + half


def _plot(curves: dict[str, list[list[dict]]], key: str, ylabel: str, path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4), dpi=110)
    for ax, (x, xlabel) in zip(axes, AXES):
        for objective, seeds in curves.items():
            if any(p[key] is None or p[x] is None for s in seeds for p in s):
                continue
            xs = np.array([[p[x] for p in s] for s in seeds], dtype=float).mean(0)
            mean, low, high = _band(np.array([[p[key] for p in s] for s in seeds], dtype=float))
            ax.plot(xs, mean, marker="o", label=objective)
            ax.fill_between(xs, low, high, alpha=0.2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def _finetuned(metrics: Path, name: str, fraction: float, task: str) -> float | None:
    """Test mean of the headline metric of ``name`` (at ``fraction`` of its budget) fine-tuned on ``task``."""
    model = name if fraction == 1.0 else f"{name}@{fraction:g}"
    m = load_metrics(metrics / "finetune" / f"{model}-{task}.json", FinetuneMetrics)
    return None if m is None else m.test[m.headline].mean * FAMILIES[m.family].percent


def _rank(task: str, over: str, pairs: list[tuple[float, float]]) -> list[list[str]]:
    """A row of Spearman's ρ between minus the held-out loss and the fine-tuned score (none under 3 points;
    ``n/a`` when either side is constant: a rank correlation has no value without an order)."""
    if len(pairs) < 3:
        return []
    losses, scores = [-a for a, _ in pairs], [b for _, b in pairs]
    if len(set(losses)) == 1 or len(set(scores)) == 1:
        return [[task, over, str(len(pairs)), "n/a (constant " + ("scores" if len(set(scores)) == 1 else "losses")
                 + ")", "-"]]
    rho, p = stats.spearmanr(losses, scores)
    return [[task, over, str(len(pairs)), f"{rho:+.2f}", f"{p:.3f}"]]


def curves_section(params, metrics: Path, figures: Path) -> str:
    """The section's Markdown (empty before any curve ran); writes ``curves_heldout.png`` and, with
    fine-tuned snapshots, ``curves_finetuned_<task>.png``."""
    curves = {}
    for objective in params.compare:
        seeds = [_points(metrics, objective, s) for s in params.pretrain.seeds]
        if all(seeds) and len({len(s) for s in seeds}) == 1:
            curves[objective] = seeds
    if not curves:
        return ""
    # the [MASK] measure only: a loss under an objective's own corruption (Mac's similar words, sound-alikes)
    # is another task's
    measured = {o: s for o, s in curves.items() if s[0][-1]["loss"] is not None and s[0][-1]["measure"] == "mlm"}
    if measured:
        _plot(measured, "loss", "held-out MLM loss (nats)", figures / "curves_heldout.png")
    rows = []
    for objective, seeds in curves.items():
        for i, point in enumerate(seeds[0]):
            cells = []
            for key in LOSSES:
                values = [s[i][key] for s in seeds if s[i][key] is not None]
                cells.append(fmt(float(np.mean(values)), 3) if values else "-")
            if point["measure"] in CORRUPTED and cells[0] != "-":
                cells[0] += f" (*{CORRUPTED[point['measure']]}*)"
            rows.append([objective, f"{point['fraction']:g}", fmt(float(np.mean([s[i]["tokens"] for s in seeds])), 0),
                         fmt(float(np.mean([s[i]["seconds"] for s in seeds])), 0),
                         fmt(float(np.mean([s[i]["flops"] or np.nan for s in seeds])) / 1e12, 2), *cells])
    finetuned, ranks = [], []
    for task in params.curves.tasks:
        per = {o: [[{**p, "score": _finetuned(metrics, seeded(o, seed), p["fraction"], task)} for p in s]
                   for seed, s in zip(params.pretrain.seeds, seeds)] for o, seeds in curves.items()}
        per = {o: s for o, s in per.items() if all(p["score"] is not None for run in s for p in run)}
        if per:
            _plot(per, "score", f"{task} test (points)", figures / f"curves_finetuned_{task}.png")
            finetuned.append(task)
            for key, what in LOSSES.items():
                pairs = [(p[key], p["score"]) for s in per.values() for run in s for p in run
                         if p[key] is not None and p["measure"] not in CORRUPTED]
                ranks += _rank(task, f"every model and snapshot ({what} loss)", pairs)
    for task in params.finetune.tasks:  # the end of the budget: does the held-out loss rank the fine-tuned models?
        pairs = [(s[-1]["loss"], _finetuned(metrics, seeded(o, seed), 1.0, task))
                 for o, seeds in measured.items() for seed, s in zip(params.pretrain.seeds, seeds)]
        ranks += _rank(task, "the final models (MLM loss)", [(a, b) for a, b in pairs if b is not None])
    return render_blocks("curves.md.j2", table=table(["objective", "fraction", "tokens", "seconds", "TFLOPs",
                                                      *(f"held-out {what} loss" for what in LOSSES.values())], rows),
                         finetuned=finetuned, heldout_task=params.curves.heldout_task, mlm_plot=bool(measured),
                         ranks=table(["task", "over", "points", "Spearman ρ (−loss, score)", "p"], ranks) if ranks
                         else None, seeds=len(params.pretrain.seeds))
