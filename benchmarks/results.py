"""Where ``make bench`` keeps its figures: ``benchmarks/results/<name>.json``, committed with
the change they measure, with the commit and the machine they were taken on (timings compare only
on the same machine). A result is written only from a checkout whose files the benchmark runs are
committed (its commit then names exactly the code measured); with uncommitted changes to them the
figures are printed, not written."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import torch

from tasks.core.io import write_json_atomic
from tasks.core.machine import cpu

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).parent.parent


def commit(files: list[str] = ()) -> tuple[str | None, list[str]]:
    """The commit the figures are taken at and which of ``files`` (paths from the repository root: the
    code a benchmark runs) differ from it (uncommitted changes, untracked files). Outside a git checkout
    (the GPU machine's copy of the tree) the commit is ``$BENCH_COMMIT``, which the sender sets (else None)."""
    def git(*args: str) -> str:  # not strip(): a porcelain line starts with a space (" M path")
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=ROOT).stdout.rstrip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--", *files).splitlines() if files else []
    except (OSError, subprocess.CalledProcessError):  # the sender names it: BENCH_COMMIT=$(git rev-parse ...)
        return os.environ.get("BENCH_COMMIT"), []
    return head, [line[3:] for line in dirty]


def machine() -> dict:
    """The facts a timing depends on: the CPU (:func:`tasks.core.machine.cpu`), Python, torch threads and
    version, accelerator."""
    return {**cpu(), "python": platform.python_version(), "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def write_results(name: str, settings: dict, figures: dict) -> Path | None:
    """Write ``figures`` (rates per second, MiB, peer ratios) of benchmark ``name`` run with
    ``settings`` to ``benchmarks/results/<name>.json`` (atomically) with the commit they were taken at;
    returns the path. When files the benchmark runs (:func:`summary.measured_code`) have uncommitted
    changes, prints the figures instead and returns None: a result names the code it measured."""
    from summary import measured_code  # benchmarks/summary.py

    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    head, dirty = commit(measured_code(name))
    record = {"benchmark": name, "commit": head, "machine": machine(), "settings": settings, "figures": figures}
    if dirty:
        print(json.dumps(record, indent=1, default=str))
        print(f"figures NOT written to {path}: {len(dirty)} file(s) it runs differ from commit {head} "
              f"({', '.join(dirty[:4])}{', ...' if len(dirty) > 4 else ''}); commit them, then rerun", file=sys.stderr)
        return None
    write_json_atomic(path, record)
    print(f"figures written to {path}")
    return path
