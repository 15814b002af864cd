"""Jobs on worker processes that die with their stage, and a stage that dies with a worker.

The one process pool of the pipeline (the shards of ``segment``, ``tokenize`` and
``pretraining_data``'s masking; the seeds of ``finetune``, ``distill`` and ``prune``).

* **Spawned, not forked.** A stage process runs Prefect's and torch's threads; a ``fork()`` while
  another thread holds a lock (the logging module's, the allocator's) leaves the child deadlocked on
  it. Each worker is a fresh interpreter (``multiprocessing``'s ``spawn``); the function and the jobs
  reach it with ``cloudpickle``, so a closure over the stage's data works as it did under fork
  (the data is pickled once per worker, the jobs one by one).
* **A dead worker fails the call at once**, with one line naming the job it ran and the signal
  that killed it (e.g. ``segment: the worker of shard 17 was killed by SIGKILL (out of memory?)``):
  the call owns its processes and watches their ``sentinel``, so it knows which one died and which
  job it held, and names that one alone. (``multiprocessing.Pool`` waits forever for a lost job;
  ``ProcessPoolExecutor`` fails every pending job and hides which worker ran which.)
* **Log lines arrive as they are written**: a job that calls :func:`relay` in a worker has its line
  handed to the call's ``on_log`` at once (a fine-tuning seed's epochs show in Prefect while it trains,
  not when it ends).
* Every way out but success (a job's error, a dead worker, Ctrl-C, Prefect's SIGTERM) kills the
  remaining workers at once; a worker dies with the stage, whatever kills the stage
  (:func:`tasks.core.lifetime.die_with_parent`). The call keeps no state outside itself, so it can
  be nested or run from two threads.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from multiprocessing.connection import Connection, wait
from typing import Any, Callable

import cloudpickle

from tasks.core.errors import PipelineError
from tasks.core.lifetime import die_with_parent


_relay: Callable[[str], None] | None = None  # in a worker: sends a line of the job it runs to the stage


def relay(line: str) -> None:
    """In a worker of :func:`map_processes`: send ``line`` to the stage now (its ``on_log``); elsewhere print it."""
    (_relay or print)(line)


def _worker(conn: Connection, payload: bytes, parent: int) -> None:
    """A worker's life: ``(fn, initializer)`` from ``payload``, then ``(index, job)`` messages until an
    empty one, each answered with ``(index, ok, result or exception)``; before that answer, ``(index, None,
    line)`` for each line the job relays (:func:`relay`)."""
    global _relay
    # Ctrl-C is the stage's to handle (it kills the workers on its way out); a stage killed outright
    # takes its workers with it.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGKILL, parent)
    fn, initializer = cloudpickle.loads(payload)
    if initializer is not None:
        initializer()
    while message := conn.recv_bytes():
        index, job = cloudpickle.loads(message)
        _relay = lambda line, index=index: conn.send_bytes(cloudpickle.dumps((index, None, line)))  # noqa: E731
        try:
            answer = (index, True, fn(job))
        except BaseException as exc:  # the stage re-raises it
            answer = (index, False, exc)
        try:
            conn.send_bytes(cloudpickle.dumps(answer))
        except Exception as exc:  # an unpicklable result or exception: say what it was
            conn.send_bytes(cloudpickle.dumps((index, False, RuntimeError(f"{type(exc).__name__}: {exc}"))))


def _signal_name(exitcode: int | None) -> str:
    if exitcode is None or exitcode >= 0:
        return f"exited with status {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    return f"was killed by {name}" + (" (out of memory?)" if -exitcode == signal.SIGKILL else "")


def map_processes(fn: Callable[[Any], Any], jobs: list, workers: int, name: str, describe: Callable[[int], str],
                  initializer: Callable[[], None] | None = None,
                  on_log: Callable[[int, str], None] | None = None) -> list:
    """``[fn(job) for job in jobs]`` on ``workers`` spawned processes, results in job order.

    Args:
        fn: any callable, and ``jobs`` any objects that ``cloudpickle`` pickles (closures over the
            stage's data are fine); the results must pickle too.
        name: the stage, first word of the error line.
        describe: job index -> what it is, for the error line (``"shard 17"``, ``"seed 2"``).
        initializer: run in each worker before its first job (e.g. setting torch's threads).
        on_log: ``on_log(job index, line)`` for each line a job relays (:func:`relay`), as it comes.
    Raises:
        PipelineError: a worker died while running a job (one line: the stage, the job, the signal).
        whatever ``fn`` raises for a failing job (the first to fail); the other workers are killed.
    """
    context = multiprocessing.get_context("spawn")
    payload = cloudpickle.dumps((fn, initializer))
    processes, pipes = [], []
    results: list = [None] * len(jobs)
    queue = iter(range(len(jobs)))
    running: dict[int, int] = {}  # worker -> the job it holds
    try:
        for _ in range(min(workers, len(jobs))):
            ours, theirs = context.Pipe()
            process = context.Process(target=_worker, args=(theirs, payload, os.getpid()))
            process.start()
            theirs.close()
            processes.append(process)
            pipes.append(ours)

        def hand_out(worker: int) -> None:
            index = next(queue, None)
            if index is None:
                pipes[worker].send_bytes(b"")  # no more: the worker ends
                running.pop(worker, None)
            else:
                pipes[worker].send_bytes(cloudpickle.dumps((index, jobs[index])))
                running[worker] = index

        for worker in range(len(processes)):
            hand_out(worker)
        while running:
            watched = {pipes[w]: w for w in running} | {processes[w].sentinel: w for w in running}
            ready = wait(list(watched))
            dead = {watched[r] for r in ready if not isinstance(r, Connection)}
            for conn in (r for r in ready if isinstance(r, Connection)):  # answers first: one sent before dying counts
                try:
                    index, ok, value = cloudpickle.loads(conn.recv_bytes())
                except EOFError:  # the worker is gone (its pipe closed with it)
                    dead.add(watched[conn])
                    continue
                if ok is None:  # a log line; the job goes on
                    if on_log is not None:
                        on_log(index, value)
                    continue
                if not ok:
                    raise value
                results[index] = value
                hand_out(watched[conn])
            for worker in sorted(w for w in dead if w in running):  # it died holding a job
                processes[worker].join()
                raise PipelineError(f"{name}: the worker of {describe(running[worker])} "
                                    f"{_signal_name(processes[worker].exitcode)}; rerun the stage to finish what it "
                                    "left")
        return results
    finally:
        for process in processes:  # on any way out but success, nothing may outlive the call
            if process.is_alive() and running:
                process.kill()
            process.join()
        for conn in pipes:
            conn.close()
