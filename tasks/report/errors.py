"""Report section "Wrong predictions": a few wrong test predictions per task, from the
first pipeline model's first seed."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from tasks.core.paths import procedure_of
from tasks.downstream.families import FAMILIES
from tasks.downstream.finetuned import read_predictions
from tasks.report.common import table
from tasks.report.templating import render_blocks


def errors_section(results: dict, models: list[str], tasks: list[str], predictions: Path, data: Path,
                   per_task: int = 3) -> str:
    """The section's Markdown: for each task, the first ``per_task`` wrong predictions."""
    found = []
    for t in tasks:
        model = next((m for m in models if procedure_of(m)[0] != "random" and (m, t) in results), None)
        if model is None:
            continue
        r = results[model, t]
        seed = r.runs[0].seed
        test = {row["id"]: row for row in pq.read_table(data / t / "test.parquet").to_pylist()}
        found_predictions = read_predictions(predictions / f"{model}-{t}", "test", seed)
        header, rows = FAMILIES[r.family].wrong_predictions(found_predictions, test)
        cells = [[c.replace("|", "\\|").replace("\n", " ") for c in row] for row in rows[:per_task]]
        found.append({"task": t, "model": model, "seed": seed, "wrong": len(rows), "total": len(test),
                      "examples": table(header, cells)})
    return render_blocks("errors.md.j2", tasks=found)
