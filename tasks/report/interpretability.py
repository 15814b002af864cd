"""Report section "Interpretability": attention-zone ablation (table in the shape of
Cui et al. 2022, heatmaps), probe curves, scalar-mix weights beside fine-tuning, and
Integrated Gradients attributions. Each part ends with a paragraph computed from the
numbers of this run, so the text never claims what the metrics do not show; the wording
is in ``templates/interpretability.md.j2``."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from tasks.core.metrics.downstream import FinetuneMetrics, FinetuneRun
from tasks.core.metrics.interpretability import AblationMetrics, AttributionsMetrics, ProbeMetrics, ScalarMixMetrics
from tasks.core.params import Params
from tasks.core.params.interpretability import ATTENTION_ZONES as ZONES
from tasks.report.attributions import attribution_html
from tasks.report.common import fmt, load_metrics, loaded, save_figure, table
from tasks.report.finetune import fraction
from tasks.report.templating import render_blocks

ZONE_LABELS = {"cls": "No [CLS]", "sep_mid": "No mid [SEP]", "sep_end": "No end [SEP]",
               "special": "No all special", "diagonal": "No diagonal", "q2q": "No Q²", "q2p": "No Q2P",
               "p2q": "No P2Q", "p2p": "No P²"}
NAMES = {z: ZONE_LABELS[z][3:] for z in ZONES}  # "No P2Q" -> "P2Q"


def _heatmaps(grids: dict[str, np.ndarray], rows: list[str], cols: list[str], title: str, path: Path) -> Path:
    """One ΔF1 heat map per model, one above the other (side by side, a page-wide figure of 2 layers was a
    strip too thin to read once scaled to the page), diverging around 0, values written in the cells."""
    width = max(4.0, 0.7 * len(cols) + 1.6)
    fig, axes = plt.subplots(len(grids), 1, figsize=(width + 1.2, 0.6 + (0.9 + 0.45 * len(rows)) * len(grids)),
                             dpi=110, squeeze=False, sharex=True, layout="constrained")
    limit = max(1e-9, max(float(np.nanmax(np.abs(g))) for g in grids.values()))
    for ax, (model, grid) in zip(axes[:, 0], grids.items()):
        image = ax.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, f"{v:+.1f}", ha="center", va="center", fontsize=8,
                    color="white" if abs(v) > 0.6 * limit else "black")  # readable on dark cells
        ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_title(model, fontsize=9)
    fig.colorbar(image, ax=axes[:, 0].tolist(), shrink=0.8, label="ΔF1 (points)")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def _finetuned_run(metrics: Path, model: str, task: str, seed: int) -> FinetuneRun | None:
    """The ``finetune`` stage's run of ``model`` on ``task`` with ``seed``, if it ran."""
    finetuned = load_metrics(metrics / "finetune" / f"{model}-{task}.json", FinetuneMetrics)
    return next((run for run in finetuned.runs if run.seed == seed), None) if finetuned else None


def _baseline_check(metrics: Path, runs: dict[str, AblationMetrics]) -> dict:
    """Which ablation baselines reproduce the fine-tuning stage's score for the same seed."""
    same, differ = [], []
    for model, r in runs.items():
        run = _finetuned_run(metrics, model, r.task, r.seed)
        if run is not None:
            (same if abs(run.scores(r.split).f1 - r.baseline.f1) < 1e-9 else differ).append(model)
    return {"same": same, "differ": differ, "seed": r.seed}


def ablation(metrics: Path, models: list[str], figures: Path) -> dict | None:
    """The ablation table, per-zone means and per-model extremes; writes the heat maps."""
    runs = loaded(metrics, AblationMetrics, models)
    if not runs:
        return None
    first = next(iter(runs.values()))
    delta = {z: {m: r.all_layers[z].f1 - r.baseline.f1 for m, r in runs.items()} for z in ZONES}
    rows = [["Baseline"] + [f"{fmt(r.baseline.em, 1)} / {fmt(r.baseline.f1, 1)}" for r in runs.values()]]
    rows += [[ZONE_LABELS[z]] + [f"{fmt(r.all_layers[z].em, 1)} / {fmt(r.all_layers[z].f1, 1)} "
                                 f"({delta[z][m]:+.1f})" for m, r in runs.items()] for z in ZONES]
    mean = {z: float(np.mean(list(d.values()))) for z, d in delta.items()}
    costliest = {m: min(ZONES, key=lambda z: delta[z][m]) for m in runs}

    grids = {m: np.array([[r.per_layer[z][f"layer_{k}"].f1 - r.baseline.f1 for z in ZONES]
                          for k in range(r.layers)]) for m, r in runs.items()}
    layers = [f"layer {k}" for k in range(first.layers)]
    _heatmaps(grids, layers, [NAMES[z] for z in ZONES], "ΔF1 with a zone blocked in one layer",
              figures / "ablation_layers.png")
    worst = {m: np.unravel_index(np.argmin(g), g.shape) for m, g in grids.items()}

    heads = []
    for zone in [z for z in ("p2q", "p2p") if all(z in r.per_head for r in runs.values())]:
        grid = {m: np.array([[r.per_head[zone][f"layer_{k}"][f"head_{h}"].f1 - r.baseline.f1
                              for h in range(r.heads)] for k in range(r.layers)]) for m, r in runs.items()}
        _heatmaps(grid, layers, [f"head {h}" for h in range(first.heads)],
                  f"ΔF1 with {NAMES[zone]} blocked in one head", figures / f"ablation_heads_{zone}.png")
        heads.append({"zone": zone, "spread": {m: float(h.max() - h.min()) for m, h in grid.items()}})

    return {"first": first, "table": table(["zone (all layers)", *runs], rows), "mean": mean,
            "ranked": sorted(ZONES, key=lambda z: mean[z]),
            "special": max(abs(mean[z]) for z in ("cls", "sep_mid", "sep_end")),
            "costliest": [{"model": m, "zone": z, "delta": delta[z][m],
                           "within": max(abs(delta[x][m]) for x in ZONES)} for m, z in costliest.items()],
            "check": _baseline_check(metrics, runs),
            "per_layer": [{"model": m, "zone": ZONES[j], "layer": int(i), "delta": float(grids[m][i, j])}
                          for m, (i, j) in worst.items()],
            "heads": heads}


def _plot_probes(runs: dict[str, ProbeMetrics], path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), dpi=110)
    for model, r in runs.items():
        for ax, (probe, key) in zip(axes, ((r.pos, "accuracy"), (r.ner, "accuracy"), (r.ner, "entity_f1"))):
            ax.plot([x.layer for x in probe.layers], [getattr(x, key) for x in probe.layers], marker="o",
                    label=model)
    first = next(iter(runs.values()))
    for ax, title, base in zip(axes, ("POS accuracy", "NER tag accuracy", "NER entity F1"),
                               (first.pos.majority_baseline, first.ner.majority_baseline, None)):
        if base is not None:
            ax.axhline(base, color="grey", linestyle=":", label="majority tag")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def probes(metrics: Path, models: list[str], figures: Path) -> dict | None:
    """Probe accuracy per layer as a table and each model's peak layers; writes ``probes.png``."""
    runs = loaded(metrics, ProbeMetrics, models)
    if not runs:
        return None
    _plot_probes(runs, figures / "probes.png")
    first = next(iter(runs.values()))
    rows, peaks = [], []
    for model, r in runs.items():
        pos = [x.accuracy for x in r.pos.layers]
        ner = [x.entity_f1 for x in r.ner.layers]
        rows.append([model] + [f"{fmt(a, 1, True)} / {fmt(f, 1, True)}" for a, f in zip(pos, ner)])
        peaks.append({"model": model, "pos_layer": int(np.argmax(pos)), "pos": max(pos), "embeddings": pos[0],
                      "ner_layer": int(np.argmax(ner)), "ner": max(ner)})
    header = ["model", *[f"layer {k}: POS acc / NER F1 %" for k in range(len(first.pos.layers))]]
    return {"first": first, "table": table(header, rows), "peaks": peaks}


def _plot_weights(runs: dict[str, dict[str, ScalarMixMetrics]], tasks: list[str], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.2), dpi=110, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        width = 0.8 / len(runs)
        for j, (model, r) in enumerate(runs.items()):
            w = r[task].layer_weights
            ax.bar(np.arange(len(w)) + (j - (len(runs) - 1) / 2) * width, w, width * 0.9, label=model)
        ax.set_title(task, fontsize=9)
        ax.set_xticks(range(len(w)))
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel("weight s_j")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def scalar_mix(metrics: Path, models: list[str], tasks: list[str], figures: Path) -> dict | None:
    """Feature-based vs fine-tuned scores, the learnt layer weights (plotted into
    ``scalar_mix.png``) and the fine-tuning gap, for the models that ran on every task."""
    found = loaded(metrics, ScalarMixMetrics, [f"{m}-{t}" for m in models for t in tasks])
    runs = {m: {t: found[f"{m}-{t}"] for t in tasks} for m in models if all(f"{m}-{t}" in found for t in tasks)}
    if not runs:
        return None
    rows, gaps = [], []
    for model, r in runs.items():
        for task in tasks:
            t = r[task]
            seed = _finetuned_run(metrics, model, task, t.seed)
            head = t.headline
            feat = fraction(t.family, t.dev[head])
            full = fraction(t.family, seed.dev[head]) if seed else None
            if full is not None:
                gaps.append(full - feat)
            rows.append([model, task, head, fmt(feat, 1, True), fmt(full, 1, True) if full is not None else "n/a",
                         " / ".join(f"{w:.2f}" for w in t.layer_weights), f"{t.gamma:.2f}"])
    _plot_weights(runs, tasks, figures / "scalar_mix.png")
    top = [{"task": task, "layers": [(m, int(np.argmax(r[task].layer_weights))) for m, r in runs.items()]}
           for task in tasks]
    return {"table": table(["model", "task", "metric", "feature-based", "fine-tuned", "weights s_j", "γ"], rows),
            "top": top, "gaps": [float(g) for g in gaps], "mean_gap": float(np.mean(gaps)) if gaps else None}


def attributions(metrics: Path, models: list[str], results: Path, report_dir: Path) -> list[dict] | None:
    """Per model, its examples as a table with inline attribution spans, completeness and
    the top tokens of the confident errors."""
    runs = loaded(metrics, AttributionsMetrics, models)
    if not runs:
        return None
    found = []
    for model, r in runs.items():
        rows, wrong = [], []
        for e in r.examples:
            scores = np.array(e.attributions)
            top = " ".join(e.tokens[i] for i in np.argsort(-scores)[:3])
            correct = e.label == e.prediction
            rows.append([e.id, "correct" if correct else "**wrong**",
                         f"{e.label} → {e.prediction} ({e.probability:.2f})", top, attribution_html(e.tokens, scores)])
            if not correct:
                wrong.append({"id": e.id, "top": top})
        found.append({"model": model, "run": r, "wrong": wrong,
                      "page": os.path.relpath(results / model / "attributions.html", report_dir),
                      "mapped": r.examples[r.attention_maps_of].id if r.examples else "-",
                      "table": table(["example", "verdict", "gold → predicted (p)", "top tokens", "attributions"],
                                     rows),
                      "delta": max((abs(e.convergence_delta) for e in r.examples), default=0)})
    return found


def interpretability_section(params: Params, metrics: Path, results: Path, figures: Path, report_dir: Path) -> str:
    """The whole section's Markdown, subsection by subsection; figures go into ``figures``.
    ``results``: the attributions stage's pages, linked relative to ``report_dir``."""
    return render_blocks("interpretability.md.j2", names=NAMES,
                         ablation=ablation(metrics, params.ablation.models, figures),
                         probes=probes(metrics, params.probe.models, figures),
                         scalar_mix=scalar_mix(metrics, params.scalar_mix.models, params.scalar_mix.tasks, figures),
                         attributions=attributions(metrics, params.attributions.models, results, report_dir))
