"""Where ``make bench`` keeps its figures: ``benchmarks/results/<name>.json``, committed with
the change they measure, with the machine they were taken on (timings compare only there)."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

from tasks.core.io import write_json_atomic

RESULTS = Path(__file__).parent / "results"


def machine() -> dict:
    """The facts a timing depends on: CPU, cores, torch threads and version, accelerator."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def write_results(name: str, settings: dict, figures: dict) -> Path:
    """Write ``figures`` (rates per second, MiB, peer ratios) of benchmark ``name`` run with
    ``settings`` to ``benchmarks/results/<name>.json`` (atomically); returns the path."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    write_json_atomic(path, {"benchmark": name, "machine": machine(), "settings": settings, "figures": figures})
    print(f"figures written to {path}")
    return path
