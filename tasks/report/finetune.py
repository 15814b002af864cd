"""Fine-tuning results on one scale, and report section "Fine-tuning": every run's dev score."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from tasks.core.metrics.downstream import FinetuneMetrics, Scores, SeedSummary
from tasks.downstream.families import FAMILIES
from tasks.report.common import load_metrics, save_bars
from tasks.report.templating import render_blocks


def fraction(family: str, score: float) -> float:
    """A score of a task of ``family`` as a fraction (accuracy in [0, 1]; Pearson's r in [-1, 1]), from the unit
    its runs store it in: the family's ``percent`` (percentage points per stored unit) is 1 for MRC (the
    official CMRC 2018 script's percentages) and 100 for classification (scikit-learn) and NER (seqeval),
    which store fractions already (divided by 1.0, unchanged)."""
    return score / (100 / FAMILIES[family].percent)


def as_fractions(result: FinetuneMetrics) -> FinetuneMetrics:
    """Fine-tuning metrics with every score in [0, 1] (:func:`fraction`); summaries' ``n``
    is a count and stays as is."""
    if FAMILIES[result.family].percent == 100:
        return result

    def summary(s: SeedSummary) -> SeedSummary:
        return s.model_copy(update={k: fraction(result.family, getattr(s, k)) for k in ("mean", "std", "max", "min")})

    def scores(s: Scores) -> Scores:
        return s.model_copy(update={m: fraction(result.family, v) for m, v in s.items()})

    return result.model_copy(update={
        "dev": {m: summary(s) for m, s in result.dev.items()}, "test": {m: summary(s) for m, s in result.test.items()},
        "runs": [run.model_copy(update={"dev": scores(run.dev), "test": scores(run.test)}) for run in result.runs]})


def finetune_results(metrics: Path, models: list[str], tasks: list[str]) -> dict[tuple[str, str], FinetuneMetrics]:
    """``(model, task) -> metrics`` (scores as fractions) of every fine-tuning run found."""
    found = {}
    for m in models:
        for t in tasks:
            r = load_metrics(metrics / "finetune" / f"{m}-{t}.json", FinetuneMetrics)
            if r:
                found[m, t] = as_fractions(r)
    return found


def plot_grouped(values: dict[str, dict[str, list[float]]], models: list[str], ylabel: str, path: Path) -> Path:
    """Per task, one bar per model (mean over seeds) with the per-seed points."""
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    tasks = list(values)
    width = 0.8 / max(1, len(models))
    for j, m in enumerate(models):
        xs = [i + (j - (len(models) - 1) / 2) * width for i in range(len(tasks))]
        means = [np.mean(values[t][m]) if m in values[t] else np.nan for t in tasks]
        ax.bar(xs, means, width * 0.9, label=m)
        for x, t in zip(xs, tasks):
            if m in values[t]:
                ax.scatter([x] * len(values[t][m]), values[t][m], color="black", s=8, zorder=3)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylim(0, 1)
    return save_bars(fig, ax, ylabel, path)


def finetune_section(results: dict, models: list[str], tasks: list[str], figures: Path) -> str:
    """The section's Markdown (empty without results); writes ``finetune_dev.png`` into ``figures``
    (what pretraining buys over random init, with its interval, is in the Findings)."""
    if not results:
        return ""
    values = {}
    for (m, t), r in results.items():
        values.setdefault(t, {})[m] = [run.dev[r.headline] for run in r.runs]
    plot_grouped(values, models, "dev headline metric", figures / "finetune_dev.png")
    return render_blocks("finetune.md.j2")
