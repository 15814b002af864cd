"""The MDE planner: which design (pretraining seeds x fine-tuning seeds x test examples) reaches a
target minimum detectable effect, and what it costs.

From a study's variance components (``variance.json``, written by the report stage:
:func:`tasks.report.findings.variance_components`), the MDE of a paired comparison of two procedures
with ``S`` pretraining seeds, ``F`` fine-tuning seeds and ``N`` test examples is
:meth:`tasks.report.variance.Decomposition.planned_mde`: the variance ``2 (σ²_p / S + (σ²_f +
σ²_r N₀/N) / (S F))`` (pretraining seed, fine-tuning seed, each run's own example noise measured on
``N₀`` examples; the examples' difficulty cancels in the pairing), with the noncentral-t MDE of its
``S − 1`` degrees of freedom. ``N`` can grow only up to the task's full test split. The cost of a
comparison: ``2 S`` pretrainings and ``2 S F`` fine-tunings (per task), at the study's measured
minutes on its machine; the GPU figure converts the pretraining FLOPs at the FLOPs rate measured for
bert-base on the GPU that ``benchmarks/results/gpu_check.json`` names, a lower bound, since a small
model does not keep a GPU that busy.

Usage::

    python -m tasks.report.planner reports/study --target 1.0   # writes reports/study/plan.{md,json}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from tasks.core.io import atomic_outputs, read_json, write_json
from tasks.core.errors import PipelineError
from tasks.core.metrics.downstream import DownstreamMetrics, FinetuneMetrics
from tasks.core.metrics.pretraining import PretrainMetrics
from tasks.report.common import json_number, load_metrics, table
from tasks.report.statistics import MIN_REPLICATES
from tasks.report.variance import Decomposition

GPU_CHECK = Path("benchmarks/results/gpu_check.json")
SEEDS, FINETUNE_SEEDS = range(MIN_REPLICATES, 51), range(1, 11)  # under 3 seeds no MDE (compare)


def costs(study: Path) -> dict:
    """Measured cost of the study's runs: mean minutes of a pretraining, of a fine-tuning run per task
    (one fine-tuning seed), model FLOPs of a pretraining, and the full test size per task."""
    metrics = study / "metrics"
    pretrain = [load_metrics(p, PretrainMetrics) for p in sorted((metrics / "pretrain").glob("*.json"))]
    if not pretrain:
        raise PipelineError(f"{metrics / 'pretrain'} holds no pretraining metrics: is {study} a study folder?")
    finetune: dict[str, list[float]] = {}
    for path in sorted((metrics / "finetune").glob("*.json")):
        run = load_metrics(path, FinetuneMetrics)
        if "@" not in run.model:  # snapshots aside
            # one fine-tuning seed as the study ran it (its learning-rate search included)
            finetune.setdefault(run.task, []).append(run.wall_sec / len(run.seeds))
    tests = {p.stem: load_metrics(p, DownstreamMetrics).rows["test"]
             for p in sorted((metrics / "downstream").glob("*.json"))}
    return {"pretrain_min": float(np.mean([r.wall_sec for r in pretrain])) / 60,
            # a pretraining's model FLOPs: the mean of those that recorded them (older metrics did not), None if none did
            "pretrain_flops": float(np.mean(flops)) if (flops := [r.flops for r in pretrain if r.flops]) else None,
            "finetune_min": {t: float(np.mean(v)) / 60 for t, v in finetune.items()}, "test_examples": tests}


def gpu_flops_per_sec(path: Path = GPU_CHECK) -> tuple[str | None, float | None]:
    """The measured GPU's name and the model FLOPs per second the pipeline's loop reached on it
    (bert-base); ``(None, None)`` without a measurement."""
    if not path.is_file():
        return None, None
    result = read_json(path)
    rates = [f["pipeline"]["tokens_per_sec"] * f["flops_per_token"] for name, f in result["figures"].items()
             if "pipeline data" in name]
    return (result["machine"].get("gpu"), max(rates)) if rates else (None, None)


def plan(components: dict, cost: dict, target: float, gpu_rate: float | None) -> list[dict]:
    """Per task, the cheapest design (pretraining seeds, fine-tuning seeds, test examples up to the
    full split) whose planned MDE is at most ``target`` points, with its cost; ``None`` fields when
    no design within ``SEEDS`` x ``FINETUNE_SEEDS`` reaches it (then the best MDE those reach), and
    when the study had one pretraining seed (then ``unplanned`` says so: no variance to plan seeds from)."""
    rows = []
    for task, c in components.items():
        full = cost["test_examples"].get(task, c["examples"])
        row = {"task": task, "procedure": c["procedure"], "study_design": [c["seeds"], c["finetune_seeds"], c["examples"]],
               "test_examples": full, "target": target, "seeds": None, "finetune_seeds": None, "minutes": None,
               "gpu_hours": None}
        if c["pretraining_seed"] is None:
            rows.append({**row, "mde_study_design_full_test": None, "best_reachable": None,
                         "unplanned": "one pretraining seed: its variance is not estimated"})
            continue
        d = Decomposition(*(c[k] if c[k] is not None else float("nan") for k in
                            ("pretraining_seed", "finetuning_seed", "test_sample", "run_noise")), c["examples"])
        mde = lambda s, f: d.planned_mde(s, f, full, estimated_df=c["seeds"] - 1)  # noqa: E731  (the components' df)
        ft_min = cost["finetune_min"].get(task, 0.0)
        best = None
        for s in SEEDS:
            for f in FINETUNE_SEEDS:
                minutes = 2 * s * cost["pretrain_min"] + 2 * s * f * ft_min
                if mde(s, f) <= target and (best is None or minutes < best["minutes"]):
                    best = {"seeds": s, "finetune_seeds": f, "minutes": minutes}
        row["mde_study_design_full_test"] = json_number(mde(c["seeds"], c["finetune_seeds"]))
        if best is None:
            row["best_reachable"] = mde(SEEDS[-1], FINETUNE_SEEDS[-1])
        else:
            gpu = 2 * best["seeds"] * cost["pretrain_flops"] / gpu_rate / 3600 if gpu_rate and cost["pretrain_flops"] \
                else None
            row.update(**best, mde=mde(best["seeds"], best["finetune_seeds"]), gpu_hours=gpu)
        rows.append(row)
    return rows


def markdown(rows: list[dict], gpu: str | None = None) -> str:
    def cell(v, digits=2):
        return "-" if v is None else f"{v:.{digits}f}" if isinstance(v, float) else str(v)
    return table(["task", "study design S x F x N", "MDE at it (full test)", "target", "design for the target S x F x N",
                  "its MDE", "CPU hours (this machine)", f"GPU hours ({gpu or 'no GPU measured'}, lower bound)"],
                 [[r["task"], " x ".join(map(str, r["study_design"])), cell(r["mde_study_design_full_test"]),
                   cell(r["target"]),
                   f"{r['seeds']} x {r['finetune_seeds']} x {r['test_examples']}" if r["seeds"] else
                   r.get("unplanned") or f"none within 50 x 10 (best {cell(r['best_reachable'])})", cell(r.get("mde")),
                   cell(r["minutes"] / 60 if r["minutes"] else None, 1),
                   # a small model's GPU time is seconds: two significant digits, not 0.000
                   "-" if r["gpu_hours"] is None else f"{r['gpu_hours']:.2g}"] for r in rows])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tasks.report.planner", description=__doc__.split("\n\n")[0])
    parser.add_argument("study", type=Path, help="a study folder (reports/study): variance.json and metrics/")
    parser.add_argument("--target", type=float, default=1.0, help="the MDE to reach, in points (default 1)")
    args = parser.parse_args(argv)
    variance = args.study / "variance.json"
    if not variance.is_file():
        print(f"planner: {variance} is missing: run `make study` (its report stage writes it)", file=sys.stderr)
        return 2
    gpu, rate = gpu_flops_per_sec()
    rows = plan(read_json(variance), costs(args.study), args.target, rate)
    text = markdown(rows, gpu)
    with atomic_outputs(args.study / "plan.json", args.study / "plan.md") as (as_json, as_md):
        write_json(as_json, rows)
        as_md.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
