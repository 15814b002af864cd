"""Where ``make bench`` keeps its figures: ``benchmarks/results/<name>.json``, committed with
the change they measure, with the commit and the machine they were taken on (timings compare only
on the same machine)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import torch

from tasks.core.io import write_json_atomic

RESULTS = Path(__file__).parent / "results"
# the vector extensions CPU timings hang on: one CPU name ("AMD EPYC") covers machines 3x apart in
# fp32 matmul and far more in bf16
ISA = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def commit() -> str | None:
    """The commit the figures were taken at (``-dirty``: with uncommitted changes to tracked files);
    None outside a git checkout (e.g. the GPU machine's copy of the tree)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).parent).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("-dirty" if dirty else "")


def machine() -> dict:
    """The facts a timing depends on: CPU and its vector extensions, cores, Python, torch threads and
    version, accelerator."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    return {"cpu": cpu, "isa": [f for f in ISA if f in flags], "cores": os.cpu_count(),
            "python": platform.python_version(), "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def write_results(name: str, settings: dict, figures: dict) -> Path:
    """Write ``figures`` (rates per second, MiB, peer ratios) of benchmark ``name`` run with
    ``settings`` to ``benchmarks/results/<name>.json`` (atomically); returns the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    write_json_atomic(path, {"benchmark": name, "commit": commit(), "machine": machine(), "settings": settings,
                             "figures": figures})
    print(f"figures written to {path}")
    return path
