"""Jobs on forked worker processes that die with their stage, and a stage that dies with a worker.

The one process pool of the pipeline (the shards of ``segment``, ``tokenize`` and
``pretraining_data``'s masking; the seeds of ``finetune``, ``distill`` and ``prune``).
``multiprocessing.Pool`` replaces a worker killed mid-job (the out-of-memory killer, a
``kill -9``) and waits forever for the lost job; ``concurrent.futures.ProcessPoolExecutor`` fails
every pending job with ``BrokenProcessPool`` instead, so :func:`map_forked` builds on it and turns
that into one line naming the job the dead worker ran and the signal that killed it (e.g.
``segment: the worker of shard 17 was killed by SIGKILL (out of memory?)``). Every way out of
:func:`map_forked` but success (a job's error, a dead worker, Ctrl-C, Prefect's SIGTERM) kills the
remaining workers at once rather than waiting for their jobs; and a worker dies with the stage,
whatever kills the stage (:func:`tasks.core.lifetime.die_with_parent`).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

from tasks.core.errors import PipelineError
from tasks.core.lifetime import die_with_parent

# What the forked workers inherit (set before they are forked, so nothing of it is pickled): the
# function, the jobs, and per job the pid of the worker running it (0: not started or done; shared).
_FN: Callable[[Any], Any] | None = None
_JOBS: list = []
_RUNNING: Any = None


def _start(parent: int, initializer: Callable[[], None] | None) -> None:
    # Forked workers inherit the stage's SIGTERM handler (Prefect's raises an exception, which a
    # worker would report and survive): restore the default. Ctrl-C is the stage's to handle (it
    # kills the workers on its way out), and a stage killed outright takes its workers with it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL, parent)
    if initializer is not None:
        initializer()


def _run(index: int) -> Any:
    _RUNNING[index] = os.getpid()
    try:
        return _FN(_JOBS[index])
    finally:
        _RUNNING[index] = 0


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return f"exited with status {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    return f"was killed by {name}" + (" (out of memory?)" if -exitcode == signal.SIGKILL else "")


def map_forked(fn: Callable[[Any], Any], jobs: list, workers: int, name: str, describe: Callable[[int], str],
               initializer: Callable[[], None] | None = None) -> list:
    """``[fn(job) for job in jobs]`` on ``workers`` forked processes, results in job order.

    Args:
        fn: any callable, and ``jobs`` any objects: forked workers inherit both (closures over the
            stage's data are fine; nothing is pickled but the results, which must pickle).
        name: the stage, first word of the error line.
        describe: job index -> what it is, for the error line (``"shard 17"``, ``"seed 2"``).
        initializer: run in each worker after it is made to die with the stage.
    Raises:
        PipelineError: a worker died while running a job (one line: the stage, the job, the signal).
        whatever ``fn`` raises for a failing job (the first in job order among those failed when the
            first failed); the other workers are killed.
    """
    global _FN, _JOBS, _RUNNING
    context = multiprocessing.get_context("fork")
    _FN, _JOBS, _RUNNING = fn, jobs, context.Array("q", len(jobs), lock=False)
    executor = ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context, initializer=_start,
                                   initargs=(os.getpid(), initializer))
    processes: dict = {}
    try:
        futures = [executor.submit(_run, i) for i in range(len(jobs))]
        processes = executor._processes or {}  # pid -> Process; kept: shutdown drops the executor's reference
        wait(futures, return_when=FIRST_EXCEPTION)  # the first error ends the call, not the last job
        failed = next((f for f in futures if f.done() and f.exception() is not None), None)
        return [f.result() for f in ([failed] if failed else futures)]
    except BrokenProcessPool:
        executor.shutdown(wait=True)  # the broken pool's manager joins the workers: their exit codes are known
        dead = [p for p in list(processes.values()) if p.exitcode not in (None, 0, -signal.SIGTERM)] or \
            [p for p in list(processes.values()) if p.exitcode not in (None, 0)]
        running = {pid: i for i, pid in enumerate(_RUNNING) if pid}
        what = [f"the worker of {describe(running[p.pid])}" if p.pid in running else f"worker {p.pid}"
                for p in dead] or ["a worker"]
        raise PipelineError(f"{name}: {', '.join(what)} {_signal_name(dead[0].exitcode if dead else None)}; "
                            "rerun the stage to finish what it left") from None
    finally:
        for process in list(processes.values()):  # on any way out but success, nothing may outlive the call
            if process.is_alive():
                process.kill()
        executor.shutdown(wait=True, cancel_futures=True)
        _FN, _JOBS, _RUNNING = None, [], None
