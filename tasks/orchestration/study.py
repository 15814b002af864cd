"""``make study``: the pipeline with several pretraining seeds, as one DVC experiment, and its report
and metrics kept in ``reports/study/`` (committed), so that its findings are about procedures.

The experiment is the default run with :data:`STUDY`'s params (more pretraining seeds, ELECTRA at
MLM's compute, the snapshots fine-tuned); DVC reruns only what they change and takes the rest
from its cache (the first seed's models are the default run's). Afterwards the workspace is put
back to the committed params and outputs (``git checkout`` + ``dvc checkout``), and
``reports/study/`` holds the experiment's ``report.md``, ``report.html``, ``figures/`` and
``metrics/``, with ``study.json`` (params, wall time, the stages that ran).

Usage::

    python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study   # make study
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

from tasks.core import paths
from tasks.core.io import to_json

STUDY = {
    "compare": "[mlm,wwm,electra]",  # electra: at MLM's model FLOPs (its budget: mlm_flops)
    "pretrain.seeds": "[42,43,44,45,46]",
    "curves.tasks": "[msra_ner]",
}
OUT = paths.REPORTS / "study"


def _run(cmd: list[str], log) -> str:
    """Run ``cmd``, echoing its output to ``log`` as it comes; its output.

    Raises:
        SystemExit: the command failed (its status).
    """
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        log.write(line)
        lines.append(line)
    if proc.wait():
        raise SystemExit(proc.returncode)
    return "".join(lines)


def main(argv: list[str]) -> int:
    overrides = [a for k, v in STUDY.items() for a in ("-S", f"{k}={v}")]
    t0 = time.time()
    out = _run(["dvc", "exp", "run", *overrides, *argv], sys.stdout)
    wall = time.time() - t0
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    for name in ("report.md", "report.html", "figures"):
        source = paths.REPORTS / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, OUT / name)
    shutil.copytree(paths.METRICS, OUT / "metrics")
    (OUT / "study.json").write_text(to_json({
        "params": STUDY, "wall_sec": round(wall, 1),
        "stages_run": sorted(set(re.findall(r"Running stage '([^']+)'", out)))}), encoding="utf-8")
    # back to the committed params and outputs (the experiment stays in DVC's experiments and cache)
    _run(["git", "checkout", "--", "params.yaml", "dvc.lock", str(paths.METRICS)], sys.stdout)
    _run(["dvc", "checkout", "--force"], sys.stdout)
    print(f"study: {wall / 3600:.2f} h; report and metrics in {OUT}/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
