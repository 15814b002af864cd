"""Running ``dvc.yaml``'s stages from Prefect (for :mod:`flows.pipeline`).

The DAG is declared once, in ``dvc.yaml``; :func:`stage_order` reads it through DVC's API, and
:func:`repro_stage` runs one stage as a Prefect task (``dvc repro --single-item <stage>``), so the
Prefect UI shows every stage with its state, duration and logs. A stage that failed on bad input
or params (it printed ``error: ...``) fails at once with that line as its message; any other
failure (killed, out of memory, crash) is retried once. DVC decides whether a stage's
dependencies changed; Prefect caching is off, so Prefect never skips a stage DVC wants to rerun.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections import deque
from functools import partial

import networkx as nx
from prefect import get_run_logger

from tasks.core.errors import PipelineError
from tasks.core.lifetime import die_with_parent
from tasks.core.stage import stage_task


def stage_order(repo_root: str = ".") -> list[str]:
    """Stage names (``name`` or ``name@item``) of ``dvc.yaml`` in a deterministic dependency order."""
    from dvc.repo import Repo

    with Repo(repo_root) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        runnable = {s for s in graph.nodes if getattr(s, "cmd", None)}
        order = nx.lexicographical_topological_sort(graph.reverse(), key=lambda s: s.addressing)
        return [s.addressing for s in order if s in runnable]


class StageFailed(PipelineError):
    """A stage failed; ``user_error`` when it reported bad input or params (``error: ...``),
    which a rerun would only repeat."""

    def __init__(self, message: str, user_error: bool):
        super().__init__(message)
        self.user_error = user_error


def repro_command(stage: str, force: bool = False) -> list[str]:
    return ["dvc", "repro", "--single-item", stage] + (["--force"] if force else [])


def run_logged(cmd: list[str], stage: str) -> None:
    """Run ``cmd``, streaming its output into the task log.

    Raises:
        StageFailed: it exited non-zero; the message holds the stage's ``error:``
            lines (see :func:`tasks.core.stage.run_stage`), else its last lines of output.
    """
    logger = get_run_logger()
    errors: list[str] = []
    tail: deque[str] = deque(maxlen=5)
    # dvc repro (and so its stage) dies with this flow run's process: a served run ended with its server
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        logger.info(line)
        if line.startswith("error: "):
            errors.append(line)
        elif line.strip():
            tail.append(line)
    if proc.wait() != 0:
        cause = " | ".join(errors or tail) or "no output"
        raise StageFailed(f"stage {stage} failed (exit status {proc.returncode}): {cause}", user_error=bool(errors))


def _transient(task, task_run, state) -> bool:
    """Retry condition: anything but a reported user error may pass on a second try."""
    return not (isinstance(state.data, StageFailed) and state.data.user_error)


@stage_task(retries=1, retry_delay_seconds=10, retry_condition_fn=_transient, task_run_name="{stage}")
def repro_stage(stage: str, force: bool = False) -> None:
    """``dvc repro --single-item <stage>``; DVC skips it when nothing it depends on changed.
    The stage's output is streamed into this task's log."""
    run_logged(repro_command(stage, force), stage)
