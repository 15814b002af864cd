"""Report section "Pretraining": per objective, its definition, data, final loss and
accuracy, cost; and the loss curves under the shared token budget."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from tasks.core.metrics.pretraining import PretrainingDataMetrics, PretrainMetrics
from tasks.core.params import Objective
from tasks.report.common import fmt, load_metrics, read_csv, save_figure, table
from tasks.report.templating import render_blocks

# The replacement a chosen token gets first, then the random noise, then keep (as params.yaml writes them).
SHARES = ("mask", "similar", "permute", "random", "keep")


def describe_objective(spec: Objective) -> str:
    """``wwm; mask 80 / random 10 / keep 10; + SOP; dynamic`` for an objective's params."""
    shares = [(k, getattr(spec.replacement, k)) for k in SHARES]
    parts = [spec.masking, " / ".join(f"{k} {100 * v:g}" for k, v in shares if v)]
    if spec.sentence_task:
        parts.append(f"+ {spec.sentence_task.upper()}")
    parts.append("dynamic" if spec.dynamic else "static")
    return "; ".join(parts)


def plot_curves(curves: dict[str, list[dict]], y: str, ylabel: str, path: Path) -> Path:
    """One line per run (e.g. objective) of column ``y`` against tokens seen."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for name, rows in sorted(curves.items()):
        ax.plot([r["tokens"] / 1e6 for r in rows], [r[y] for r in rows], label=name, linewidth=1.4)
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)


def pretraining_section(metrics: Path, objectives: list[str], specs: dict[str, Objective], figures: Path) -> str:
    """The section's Markdown; writes ``pretrain_loss.png`` into ``figures`` when any loss log exists."""
    rows, curves = [], {}
    for name in objectives:
        data = load_metrics(metrics / "pretraining_data" / f"{name}.json", PretrainingDataMetrics)
        run = load_metrics(metrics / "pretrain" / f"{name}.json", PretrainMetrics)
        log = metrics / "pretrain" / f"{name}.csv"
        if log.is_file():
            curves[name] = read_csv(log)
        if data and run:
            chosen = "-" if data.dynamic else fmt(data.chosen_rate, 2, True)
            rows.append([name, describe_objective(specs[name]), fmt(data.sequences), fmt(data.fill_rate, 1, True), chosen,
                         fmt(data.similar_fallback_rate, 1, True), fmt(run.tokens), fmt(run.final_loss, 3),
                         fmt(run.final_token_accuracy, 1, True), fmt(run.final_sentence_accuracy, 1, True),
                         fmt(run.wall_sec / 60, 1), fmt(run.tokens_per_sec, 0), fmt(run.peak_memory_mb, 0)])
    runs = table(["objective", "definition", "sequences", "fill %", "chosen %", "Mac fallback %", "tokens", "final loss",
                  "token acc %", "sentence acc %", "minutes", "tokens/s", "peak MiB"], rows) if rows else None
    if curves:
        plot_curves(curves, "loss", "training loss", figures / "pretrain_loss.png")
    return render_blocks("pretraining.md.j2", runs=runs, curves=bool(curves))
