"""User-facing errors.

A :class:`PipelineError` means bad input or bad parameters, not a bug: stages
report it as one line (``error: <message>``) and exit non-zero, without a
traceback. Its message names the file, line, record or parameter at fault. A full
disk (:func:`disk_full`) and memory run out (:func:`out_of_memory`) are ones too, wherever
they happen (:func:`user_error`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path


class PipelineError(Exception):
    """Bad input data or parameters; the message says which and what is wrong."""


class SourceError(PipelineError):
    """A corpus or dataset source is missing, corrupt or unreadable."""


class ParamsError(PipelineError):
    """``params.yaml`` holds a value the pipeline cannot run with."""


class MetricsError(PipelineError):
    """A metrics file (``metrics/``) does not match its model in :mod:`tasks.core.metrics`."""


class DivergedError(PipelineError):
    """A training run's loss became non-finite (NaN or infinite): the run stops at the log row that
    shows it, naming the step, the loss and the recipe (:func:`tasks.training.loop.check_finite`)."""


class DiskFullError(PipelineError):
    """A write found no space left on its file system."""


def _free_mib(path: Path) -> float:
    """MiB free on the file system holding ``path`` (its nearest existing ancestor)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free / 2**20


def disk_full(exc: BaseException, path: str | Path | None = None, needed: int | None = None) -> DiskFullError | None:
    """The one-line error for ``exc`` if it is a write that found its disk full (errno ENOSPC, or a
    library's message saying so), else None: the file (``path``, else the one the error names), the
    MiB free on its file system and, when known, the MiB the write ``needed`` (bytes)."""
    text = f"{exc} {exc.__cause__ or ''}"
    if not ((isinstance(exc, OSError) and exc.errno == errno.ENOSPC) or "No space left on device" in text):
        return None
    path = path or getattr(exc, "filename", None) or next(iter(re.findall(r"'(/[^']+|[\w.-]+/[^']+)'", text)), None)
    where = Path(path) if path else Path.cwd()
    need = f", and the write needed {needed / 2**20:,.1f} MiB" if needed else ""
    return DiskFullError(f"no space left on the device of {path or 'the working directory'}: "
                         f"{_free_mib(where):,.1f} MiB free{need}; free some space and rerun (nothing "
                         "half-written was kept: outputs are written to temporaries and renamed whole)")


class OutOfMemoryError(PipelineError):
    """An allocation found no memory left (host RAM, an address-space limit, or an accelerator's)."""


_ASKED = (  # how each allocator names the size it asked for
    (re.compile(r"tried to allocate (\d+) bytes"), {None: 1}),  # torch CPU (DefaultCPUAllocator)
    (re.compile(r"[Tt]ried to allocate ([\d.]+) ([KMG]iB)"), {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}),  # CUDA
    (re.compile(r"Unable to allocate ([\d.]+) ([KMG]iB)"), {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}),  # NumPy
)


def _available_mib() -> str:
    """``MemAvailable of MemTotal`` from ``/proc/meminfo`` in MiB (elsewhere empty)."""
    info = Path("/proc/meminfo")
    if not info.exists():
        return ""
    kib = {line.split(":")[0]: int(line.split()[1]) for line in info.read_text().splitlines() if line.count(":") == 1}
    return f"; {kib.get('MemAvailable', 0) / 1024:,.0f} of {kib.get('MemTotal', 0) / 1024:,.0f} MiB available now"


def out_of_memory(exc: BaseException, knobs: str | None = None, stage: str | None = None) -> OutOfMemoryError | None:
    """The one-line error for ``exc`` if it is an allocation that found no memory (``MemoryError``, torch's
    ``OutOfMemoryError``, or torch's CPU allocator's ``RuntimeError``), else None: the stage (``stage``, else
    DVC's ``DVC_STAGE``), the size asked for when the allocator says it, the memory available now, and the
    params to lower (``knobs``)."""
    text = f"{exc} {exc.__cause__ or ''}"
    oom = isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or (
        isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text))
    if not oom:
        return None
    asked = ""
    for pattern, units in _ASKED:
        if m := pattern.search(text):
            size = float(m.group(1)) * units[m.group(2) if m.lastindex == 2 else None]
            asked = f": an allocation of {size / 2**20:,.1f} MiB failed"
            break
    stage = stage or os.environ.get("DVC_STAGE")
    where = f" in stage {stage}" if stage else ""
    lower = f"; lower {knobs}" if knobs else "; give it more memory or a smaller input"
    return OutOfMemoryError(f"out of memory{where}{asked}{_available_mib()}{lower} (nothing half-written was "
                            "kept; a pretraining resumes from its last checkpoint)")


def user_error(exc: BaseException, knobs: str | None = None) -> PipelineError | None:
    """``exc`` as the one-line error a user can act on: itself if a :class:`PipelineError`, a full disk
    (:func:`disk_full`) or no memory left (:func:`out_of_memory`); else None (a bug: its traceback stays)."""
    if isinstance(exc, PipelineError):
        return exc
    return disk_full(exc) or out_of_memory(exc, knobs)
