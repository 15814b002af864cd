"""Two workers against one on a reduced study: does ``make study WORKERS=2`` end sooner on this
machine, and does it give the same study?

The study of ``make study`` (:data:`tasks.orchestration.study.STUDIES`), reduced to two procedures and
two pretraining seeds (units: each objective's recipe, then per seed each objective and random init),
run twice from scratch, each time in its own ``git clone`` of HEAD with its own, empty DVC cache (a
shared one would serve the second run from its run cache): once with ``--workers 1`` (the peer), once
with ``--workers 2``. Both pin pretraining to one thread (``pretrain.threads=1``, what two workers on
two cores need), so both build the same models; fine-tuning seeds run one thread each in either.
Both start every stage in a fresh interpreter (``ZHPLM_FORKSERVER=off``): two workers' stages, with
an ``OMP_NUM_THREADS`` of their own, would not be forked from the fork server anyway, and the
comparison is of the workers alone.

Prints each run's wall time (its prefix, every unit and the report) and their ratio, and checks that
the two are the same study: every unit's DVC outputs (models, data, fine-tuned weights, per-example
outcomes; not the metrics files, which hold timings) with the same md5, and the same report Findings,
interval for interval. Writes ``benchmarks/results/study_workers.json``::

    python benchmarks/study_workers.py [--compare mlm,wwm] [--seeds 42,43] [-S key=value ...]

The default reduction (also pretraining at a quarter of the study's budget, two tasks, no published
baseline, recipes chosen whether or not a setting passed its gates) keeps it near an hour here;
``-S`` adds to or replaces it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

import tasks.orchestration.prefect_server as prefect_server
import tasks.orchestration.study as study

sys.path.insert(0, str(Path(__file__).parent))
from results import ROOT, write_results  # noqa: E402  (benchmarks/results.py)

REDUCED = {"pretrain.token_budget": "1187500", "finetune.tasks": "[sentiment,msra_mrc]", "finetune.baselines": "[]",
           "sweep.learned_only": "false", "pretrain.threads": "1"}
OUT = "reports/study_workers"


def run(workers: int, overrides: dict[str, str], scratch: Path, log) -> tuple[Path, float]:
    """Clone HEAD into ``scratch`` and run the reduced study there with ``workers``; ``(its study folder,
    wall seconds)``. Raises ``SystemExit`` naming the log when the study fails."""
    clone = scratch / f"workers-{workers}"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    cmd = [sys.executable, "-m", prefect_server.__name__, sys.executable, "-m", study.__name__, "study",
           "--workers", str(workers), "--out", OUT, *study._flags(overrides)]
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": str(clone), "ZHPLM_FORKSERVER": "off",  # the clone's code, this venv's dvc
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    proc = subprocess.run(cmd, cwd=clone, stdout=log, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"study_workers: the study with {workers} worker(s) failed (exit {proc.returncode}); "
                         f"its output is in {log.name}")
    return clone / OUT, wall


def outputs(folder: Path) -> dict[str, str]:
    """``{stage/out path: md5}`` of every unit's outputs but its metrics files (they hold timings)."""
    found = {}
    for record in sorted((folder / "units").glob("*.yaml")):
        for name, stage in yaml.safe_load(record.read_text(encoding="utf-8"))["stages"].items():
            for out in stage.get("outs", []):
                if not out["path"].startswith("metrics/") or out["path"].startswith("metrics/outcomes/"):
                    found[f"{name}: {out['path']}"] = out["md5"]
    return found


def findings(folder: Path) -> str:
    """The report's Findings section: each claim's Δ, interval, p-value, MDE and verdict."""
    return (folder / "report.md").read_text(encoding="utf-8").split("## Findings", 1)[1].split("\n## ", 1)[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compare", default="mlm,wwm", help="the procedures (objectives) of the reduced study")
    parser.add_argument("--seeds", default="42,43", help="its pretraining seeds")
    parser.add_argument("-S", dest="overrides", action="append", default=[], help="key=value, as make study's -S")
    args = parser.parse_args(argv)
    overrides = {**REDUCED, "compare": f"[{args.compare}]", "pretrain.seeds": f"[{args.seeds}]",
                 **dict(o.split("=", 1) for o in args.overrides)}
    with tempfile.TemporaryDirectory(prefix="study_workers-") as tmp:
        scratch = Path(tmp)
        runs = {}
        for workers in (1, 2):
            with open(Path(tempfile.gettempdir()) / f"study_workers-{workers}.log", "w", encoding="utf-8") as log:
                runs[workers] = run(workers, overrides, scratch, log)
            print(f"{workers} worker(s): {runs[workers][1] / 60:.1f} min", flush=True)
        (one, one_wall), (two, two_wall) = runs[1], runs[2]
        a, b = outputs(one), outputs(two)
        differing = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        same_findings = findings(one) == findings(two)
        units = len(list((one / "units").glob("*.yaml")))
    print(f"{units} units: 1 worker {one_wall / 60:.1f} min, 2 workers {two_wall / 60:.1f} min: "
          f"x{one_wall / two_wall:.2f}; outputs identical: {len(a) - len(differing)} of {len(a)}; "
          f"Findings identical: {same_findings}")
    for key in differing[:10]:
        print(f"  differs: {key}")
    write_results("study_workers", {"overrides": overrides},
                  {"units": units, "one_worker_wall_sec": round(one_wall, 1), "two_workers_wall_sec": round(two_wall, 1),
                   "speedup": round(one_wall / two_wall, 3), "outputs_compared": len(a),
                   "outputs_differing": differing, "findings_identical": same_findings})
    return 0 if same_findings and not differing else 1


if __name__ == "__main__":
    sys.exit(main())
