"""Report section "Compression": per task, the teacher, the distilled students and the pruned
models side by side (score, size, CPU speed), a score-against-size plot with its Pareto
front, and each finding with its 95% interval over the fine-tuning seeds."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt

from tasks.core.metrics.compression import DistillMetrics, PruneMetrics, Variant
from tasks.core.metrics.downstream import SeedSummary
from tasks.report.common import fmt, load_metrics, save_figure, table
from tasks.report.finetune import fraction
from tasks.report.statistics import from_runs
from tasks.report.templating import render_blocks

RETAINED = 0.9  # the pruning target to reproduce: half the heads and FFN keep >= 90% of the score


def _summary(family: str, s: SeedSummary) -> SeedSummary:
    return s.model_copy(update={k: fraction(family, getattr(s, k)) for k in ("mean", "std", "max", "min")})


def _cell(s: SeedSummary) -> str:
    return f"{fmt(s.max, 1, True)} ({fmt(s.mean, 1, True)} ± {fmt(s.std, 1, True)})"


def _label(m: DistillMetrics | PruneMetrics, v: Variant) -> str:
    if v.name in ("teacher", "unpruned"):
        return f"teacher ({m.teacher if isinstance(m, DistillMetrics) else m.model})"
    if v.name == "teacher_ensemble":
        return "teachers' ensemble"
    return f"{m.student}: {v.name}" if isinstance(m, DistillMetrics) else f"pruned: {v.name}"


def _rows(task_metrics: list[DistillMetrics | PruneMetrics]) -> list[dict]:
    """Every variant of a task's compression files as ``{label, variant, score}`` (score as a
    fraction), each label once (the teacher appears in every file)."""
    rows, seen = [], set()
    for m in task_metrics:
        for v in m.variants:
            label = _label(m, v)
            if label not in seen:
                seen.add(label)
                rows.append({"label": label, "variant": v, "score": _summary(m.family, v.test[m.headline])})
    return rows


def _size_cells(v: Variant, reference: Variant) -> list[str]:
    s, r = v.size, reference.size
    cells = [fmt(s.parameters), fmt(s.disk_bytes / 1e6, 2), f"{fmt(s.latency_ms, 2)} (×{r.latency_ms / s.latency_ms:.2f})",
             f"{fmt(s.throughput, 0)} (×{s.throughput / r.throughput:.2f})"]
    small = v.vocabulary_pruned
    cells.append(f"{fmt(small.parameters)} / {fmt(small.disk_bytes / 1e6, 2)}" if small else "-")
    return cells


def _pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of points no other point beats on both size (smaller) and score (larger)."""
    return [i for i, (x, y) in enumerate(points)
            if not any((x2 <= x and y2 >= y) and (x2 < x or y2 > y) for x2, y2 in points)]


def _plot(per_task: dict[str, list[dict]], path: Path) -> Path:
    fig, axes = plt.subplots(1, len(per_task), figsize=(5 * len(per_task), 4), dpi=110, squeeze=False)
    for ax, (task, rows) in zip(axes[0], per_task.items()):
        points = [(r["variant"].size.parameters, r["score"].mean) for r in rows]
        front = set(_pareto(points))
        for i, (r, (x, y)) in enumerate(zip(rows, points)):
            ax.scatter([x], [y], color="C3" if i in front else "C0", s=18, zorder=3)
            ax.annotate(r["label"].split(": ")[-1], (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        xs, ys = zip(*sorted(points[i] for i in front))
        ax.plot(xs, ys, color="C3", alpha=0.5, label="Pareto front")
        ax.set_xscale("log")
        ax.set_title(task)
        ax.set_xlabel("parameters (log scale)")
        ax.set_ylabel("test score (mean over seeds)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return save_figure(fig, path)


def _findings(task: str, distilled: list[DistillMetrics], pruned: list[PruneMetrics]) -> list[str]:
    """Sentences comparing the variants' test scores: the students' over their fine-tuning seeds,
    paired with the labels-only student of the same seed (:func:`tasks.report.statistics.from_runs`)."""
    lines = []
    for m in distilled:
        v = {x.name: x for x in m.variants}
        h, f = m.headline, m.family
        base = [100 * fraction(f, r.test[h]) for r in v["labels"].runs]
        for name in ("kd", "kd_intermediate", "multi_teacher"):
            if name in v and len(base) > 1:
                c = from_runs([100 * fraction(f, r.test[h]) for r in v[name].runs], base, paired=True)
                over = f"over {len(base)} fine-tuning seeds"
                lines.append(f"{task}, student {m.student}: {name} vs labels only {c.difference:+.2f} points "
                             + (f"({over})" if c.withheld else
                                f"[95% CI {c.low:+.2f}, {c.high:+.2f}, {over}; MDE {c.mde:.2f}]")
                             + f": {c.verdict}.")
        if "multi_teacher" in v:
            s, e = _summary(f, v["multi_teacher"].test[h]), _summary(f, v["teacher_ensemble"].test[h])
            lines.append(f"{task}, student {m.student}: multi-teacher student {fmt(s.mean, 1, True)} vs the "
                         f"teachers' ensemble {fmt(e.mean, 1, True)}.")
    for m in pruned:
        reference = _summary(m.family, m.variants[0].test[m.headline]).mean
        head = f"{task}, {m.model} pruned to heads = {m.settings['heads']} and FFN = {m.settings['ffn']} per layer"
        if reference <= 0:  # an untrained-looking model: retention is undefined, say so rather than divide by 0
            lines.append(f"{head}: the unpruned model scores 0 on test, so no retention can be stated.")
            continue
        kept = [(v.name, _summary(m.family, v.test[m.headline]).mean / reference) for v in m.variants[1:]]
        ok = [name for name, r in kept if r >= RETAINED]
        best = max(kept, key=lambda x: x[1])
        lines.append(f"{head}: {len(ok)} of {len(kept)} variants keep ≥ {RETAINED:.0%} of the unpruned test score "
                     f"(best {best[0]}: {best[1]:.0%}).")
    return lines


def compression_section(metrics: Path, tasks: list[str], students: list[str], pruned_models: list[str],
                        figures: Path) -> str:
    """The section's Markdown (a note when no compression stage ran); writes
    ``compression_pareto.png`` into ``figures``."""
    per_task, tables, findings = {}, [], []
    for task in tasks:
        distilled = [m for s in students if (m := load_metrics(metrics / "distill" / f"{s}-{task}.json", DistillMetrics))]
        pruned = [m for p in pruned_models if (m := load_metrics(metrics / "prune" / f"{p}-{task}.json", PruneMetrics))]
        rows = _rows([*distilled, *pruned])
        if not rows:
            continue
        reference = rows[0]["variant"]
        per_task[task] = rows
        header = ["model", "test score: max (mean ± std) %", "parameters", "MB", "latency ms, batch 1 (speed-up)",
                  "examples/s, batch 32 (speed-up)", "after vocabulary pruning: parameters / MB"]
        tables.append({"task": task, "metric": (distilled or pruned)[0].headline,
                       "table": table(header, [[r["label"], _cell(r["score"]), *_size_cells(r["variant"], reference)]
                                               for r in rows])})
        findings += _findings(task, distilled, pruned)
    if not per_task:
        return render_blocks("compression.md.j2", tables=None)
    _plot(per_task, figures / "compression_pareto.png")
    return render_blocks("compression.md.j2", tables=tables, findings=findings)
