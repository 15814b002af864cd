"""Report section "Wrong predictions": a few wrong test predictions per task, from the
first pipeline model's first seed."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from tasks.core.io import read_json, read_jsonl
from tasks.core.paths import procedure_of
from tasks.report.common import table
from tasks.report.templating import render_blocks


def _spans(tokens: list[str], tags: list[str]) -> str:
    from tasks.downstream.ner_mrc import bio_spans

    return "; ".join(f"{''.join(tokens[a:b])}/{kind}" for kind, a, b in bio_spans(tags)) or "(none)"


def wrong_predictions(family: str, folder: Path, seed: int, test: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """The table header and one row per wrong test prediction of a run of ``family``."""
    rows = []
    if family == "mrc":
        for qid, pred in read_json(folder / f"test-seed{seed}.json").items():
            gold = [a["text"] for a in test[qid]["answers"]]
            if pred not in gold:
                rows.append([test[qid]["question"][:16] + "…", test[qid]["context"][:60], " / ".join(gold),
                             pred or "(empty)"])
        return ["question", "context", "gold", "predicted"], rows
    for row in read_jsonl(folder / f"test-seed{seed}.jsonl"):
        if family == "ner" and row["gold"] != row["prediction"]:
            rows.append(["".join(row["tokens"])[:60], _spans(row["tokens"], row["gold"]),
                         _spans(row["tokens"], row["prediction"])])
        elif family == "classification" and row["label"] != row["prediction"]:
            ex = test[row["id"]]
            text = ex["text_a"] + (f" ‖ {ex['text_b']}" if ex["text_b"] else "")
            rows.append([text[:80], str(row["label"]), str(row["prediction"])])
    return (["sentence", "gold entities", "predicted"] if family == "ner" else ["text", "gold", "predicted"]), rows


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
        header, rows = wrong_predictions(r.family, predictions / f"{model}-{t}", seed, test)
        cells = [[c.replace("|", "\\|").replace("\n", " ") for c in row] for row in rows[:per_task]]
        found.append({"task": t, "model": model, "seed": seed, "wrong": len(rows), "total": len(test),
                      "examples": table(header, cells)})
    return render_blocks("errors.md.j2", tasks=found)
