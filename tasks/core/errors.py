"""User-facing errors.

A :class:`PipelineError` means bad input or bad parameters, not a bug: stages
report it as one line (``error: <message>``) and exit non-zero, without a
traceback. Its message names the file, line, record or parameter at fault. A full
disk is one too (:func:`disk_full`), wherever the pipeline writes.
"""

from __future__ import annotations

import errno
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
