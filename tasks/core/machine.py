"""The CPU a timing hangs on, recorded beside every benchmark result and study unit: its name, the
vector extensions that set its matmul rate (one name, "AMD EPYC", covers machines 3x apart in fp32
and far more in bf16) and the cores this process may use."""

from __future__ import annotations

import os
import platform
from pathlib import Path

ISA = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu() -> dict:
    """``{"cpu": model name, "isa": [the extensions of ISA it has], "cores": cores this process may use}``,
    from ``/proc/cpuinfo`` (elsewhere the platform's processor name and no extensions)."""
    info = Path("/proc/cpuinfo")
    lines = info.read_text().splitlines() if info.exists() else []
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor() or "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": name, "isa": [f for f in ISA if f in flags], "cores": cores}


def describe(machine: dict) -> str:
    """A record's CPU in one line: ``AMD EPYC (avx2, avx512f), 2 cores`` (records older than the ISA field:
    the name and cores alone)."""
    isa = f" ({', '.join(machine['isa'])})" if machine.get("isa") else ""
    return f"{machine.get('cpu')}{isa}, {machine.get('cores')} cores"
