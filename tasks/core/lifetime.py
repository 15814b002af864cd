"""No process of the pipeline outlives the one that started it.

Each process of a run asks Linux for a signal when its parent dies (``PR_SET_PDEATHSIG``), so a
whole chain goes down from whichever link is killed, ``kill -9`` included: the ``make repro``
wrapper, ``dvc repro``, the stage, its worker processes, and the ``torchrun`` agent's ranks (which
``torchrun`` puts in sessions of their own, out of reach of a signal to the process group). The
signal survives ``exec``, so a stage that re-executes itself under ``torchrun`` keeps it.
"""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Have this process receive ``sig`` when its parent dies (SIGTERM lets a stage clean up;
    workers take SIGKILL). ``parent``: the pid the caller knows its parent by, to catch a parent
    that died before this call (without it, only reparenting to init is caught). A no-op off Linux.
    """
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig))
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() == 1 or (parent is not None and os.getppid() != parent):  # the parent is already gone
        os._exit(128 + int(sig))
