"""Report section "Objective comparison": objectives (then baselines) by task in HFL-style
cells, and which of the gaps between objectives are within seed noise."""

from __future__ import annotations

from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.report.common import max_avg, table
from tasks.report.templating import render_blocks


def _noise(results: dict[tuple[str, str], FinetuneMetrics], objectives: list[str], task: str) -> dict:
    """The best objective on ``task`` (dev mean of the headline metric) and how far each
    other one is behind it, against the larger seed spread (max - min) of the two."""
    ranked = sorted((m for m in objectives if (m, task) in results),
                    key=lambda m: -results[m, task].dev[results[m, task].headline].mean)
    best = ranked[0]
    h = results[best, task].headline
    b = results[best, task].dev[h]
    tied, beyond = [], []
    for m in ranked[1:]:
        o = results[m, task].dev[h]
        gap, spread = b.mean - o.mean, max(b.max - b.min, o.max - o.min)
        (tied if gap <= spread else beyond).append({"model": m, "gap": gap, "spread": spread})
    return {"task": task, "headline": h, "best": best, "mean": b.mean, "alone": len(ranked) == 1,
            "tied": tied, "beyond": beyond}


def comparison_section(results: dict[tuple[str, str], FinetuneMetrics], objectives: list[str], baselines: list[str],
                       tasks: list[str]) -> str:
    """The section's Markdown; empty when no compared objective was fine-tuned."""
    tasks = [t for t in tasks if any((m, t) in results for m in objectives)]
    if not tasks:
        return ""
    tables = {}
    for split in ("dev", "test"):
        header = ["objective"] + [f"{t} ({results[next(m for m in objectives if (m, t) in results), t].headline})"
                                  for t in tasks]
        rows = [[m] + [max_avg(results[m, t].summary(split)[results[m, t].headline]) if (m, t) in results else "-"
                       for t in tasks] for m in [*objectives, *baselines]]
        tables[split] = table(header, rows)
    seeds = "/".join(map(str, sorted({len(r.runs) for r in results.values()})))
    return render_blocks("comparison.md.j2", tables=tables, seeds=seeds,
                         noise=[_noise(results, objectives, t) for t in tasks])
