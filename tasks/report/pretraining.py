"""Report section "Pretraining": per objective, its definition, data, final loss and
accuracy, cost; and the loss curves under the shared token budget."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from tasks.core.metrics.pretraining import PretrainingDataMetrics, PretrainMetrics, SweepMetrics
from tasks.core.params import Objective
from tasks.core.params.pretraining import RECIPE_KNOBS
from tasks.core.paths import seeded
from tasks.pretraining.objectives import LOGGED, MEASURES, describe
from tasks.report.common import fmt, load_metrics, read_csv, save_figure, table
from tasks.report.gates import gates_table
from tasks.report.templating import render_blocks

HEADS = list(dict.fromkeys(part.label for part in LOGGED if part.per != "step"))  # the kinds' heads with an accuracy
COLUMNS = list({field: (field, header, percent) for m in MEASURES for field, header, percent in m.columns}.values())
"""The sweep table's columns: every held-out measure's (:attr:`tasks.pretraining.heldout.Measure.columns`)."""

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


def pretraining_section(metrics: Path, objectives: list[str], seeds: list[int], specs: dict[str, Objective],
                        pretrain, figures: Path) -> str:
    """The section's Markdown, a row per pretrained model (objective x pretraining seed); writes
    ``pretrain_loss.png`` into ``figures`` when any loss log exists (the first seed's)."""
    rows, curves = [], {}
    for objective in objectives:
        for seed in seeds:
            name = seeded(objective, seed)
            data = load_metrics(metrics / "pretraining_data" / f"{name}.json", PretrainingDataMetrics)
            run = load_metrics(metrics / "pretrain" / f"{name}.json", PretrainMetrics)
            log = metrics / "pretrain" / f"{name}.csv"
            if log.is_file() and seed == seeds[0]:
                curves[objective] = read_csv(log)
            if data and run:
                chosen = "-" if data.dynamic else fmt(data.chosen_rate, 2, True)
                rows.append([name, describe(specs[objective]), fmt(data.sequences),
                             fmt(data.fill_rate, 1, True), chosen, fmt(data.similar_fallback_rate, 1, True),
                             fmt(run.tokens), fmt(run.flops / 1e12 if run.flops else None, 1), fmt(run.final_loss, 3),
                             fmt(run.final_token_accuracy, 1, True), fmt(_head_accuracy(run), 1, True),
                             fmt(run.wall_sec / 60, 1), fmt(run.tokens_per_sec, 0), fmt(run.peak_memory_mb, 0)])
    runs = table(["model", "definition", "sequences", "fill %", "chosen %", "Mac fallback %", "tokens", "TFLOPs",
                  "final loss", "token acc %", f"{' / '.join(HEADS)} acc %", "minutes", "tokens/s", "peak MiB"],
                 rows) if rows else None
    if curves:
        plot_curves(curves, "loss", "training loss", figures / "pretrain_loss.png")
    sweeps = {o: load_metrics(metrics / "sweep" / f"{o}.json", SweepMetrics) for o in objectives}
    return render_blocks("pretraining.md.j2", runs=runs, curves=bool(curves),
                         recipes=recipes_table(sweeps, specs, pretrain), sweeps=sweeps_table(sweeps),
                         gates=gates_table(metrics, objectives, seeds))


def _head_accuracy(run: PretrainMetrics) -> float | None:
    """The run's logged accuracy of its objective's other head (a kind's: NSP/SOP, RTD), if any."""
    return next((v for part in LOGGED if part.per != "step"
                 and (v := getattr(run, f"final_{part.column}", None)) is not None), None)


def recipes_table(sweeps: dict[str, SweepMetrics | None], specs: dict[str, Objective], pretrain) -> str:
    """What each objective of ``sweeps`` (its sweep's metrics, ``metrics/sweep/<objective>.json``, or None
    where it was not swept) trained with: ``pretrain``'s knobs, its own recipe over them
    (``objectives.<name>.pretrain``, marked *own*) and its sweep's chosen setting over those (marked
    *swept*: the choice ``pretrain`` read from ``data/recipes/``)."""
    rows = []
    for objective, sweep in sweeps.items():
        swept = next((s.overrides for s in sweep.settings if s.name == sweep.chosen), {}) if sweep else {}
        cfg, own = pretrain.for_objective(specs[objective], swept), specs[objective].pretrain
        rows.append([objective, *(f"{getattr(cfg, k):g}{' (swept)' if k in swept else ' (own)' if k in own else ''}"
                                  for k in RECIPE_KNOBS)])
    return table(["objective", *RECIPE_KNOBS], rows)


def sweeps_table(sweeps: dict[str, SweepMetrics | None]) -> str | None:
    """Every setting of every objective's sweep (as :func:`recipes_table` takes them), measured on held-out
    dev text, whether it learned (no divergence, its gates passed: only those can be chosen), the chosen one in
    bold; None when no objective was swept."""
    rows = []
    for objective, sweep in sweeps.items():
        for s in sweep.settings if sweep else []:
            mark = (lambda x: f"**{x}**") if s.name == sweep.chosen else str
            failed = [g.name for g in s.gates or [] if not g.passed]
            learned = "diverged" if s.diverged else "failed " + "; ".join(failed) if failed else "yes"
            measured = [fmt(getattr(s, field), 1, True) if percent else fmt(getattr(s, field), 3)
                        for field, _, percent in COLUMNS]
            rows.append([mark(objective), mark(s.name), ", ".join(f"{k} {v:g}" for k, v in s.overrides.items()),
                         *measured, learned, fmt(s.wall_sec / 60, 1)])
    return table(["objective", "setting", "overrides", *(header for _, header, _ in COLUMNS), "learned", "minutes"],
                 rows) if rows else None
