"""``make repro``: ``dvc repro`` that says where it is.

Before it starts it prints the stages DVC will look at again (those whose deps changed, and every
stage downstream of them: an upper bound, since DVC skips a downstream stage whose inputs came out
the same) and, as DVC starts each, ``[k/n] <stage>`` with the minutes since the start; the training
stages print their own step and time left. DVC's output passes through unchanged, and every stage
is still a Prefect flow run in the UI.

Ctrl-C or SIGTERM stops the whole run in seconds, with one line: ``dvc repro`` runs in a process group of
its own, which gets SIGINT (as a terminal's Ctrl-C would give it: DVC and the stage stop cleanly), then
SIGTERM and SIGKILL if it is still there after :data:`GRACE` seconds; a killed ``progress`` takes
``dvc repro`` with it (:func:`tasks.core.lifetime.die_with_parent`). A stopped training stage resumes
from its checkpoint at the next run.

Usage::

    python -m tasks.orchestration.progress [dvc repro args...]
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

from tasks.core.lifetime import die_with_parent
from tasks.core.shards import remove_left_work
from tasks.orchestration.repro import stage_order

RUNNING = re.compile(r"^Running stage '([^']+)'", re.M)
GRACE = (10.0, 5.0)  # seconds dvc repro has after SIGINT, then after SIGTERM, before the next signal


class Stopped(Exception):
    """This process got SIGINT or SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum: int, frame) -> None:
    raise Stopped(signum)


def stop(proc: subprocess.Popen, grace: tuple[float, float] = GRACE) -> None:
    """End ``proc`` and its process group: SIGINT, then SIGTERM, then SIGKILL, each after its grace."""
    for sig, wait in zip((signal.SIGINT, signal.SIGTERM, signal.SIGKILL), (*grace, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def ran_stages(output: str) -> set[str]:
    """The stages a ``dvc repro`` (or ``dvc exp run``) output says it ran."""
    return set(RUNNING.findall(output))


def planned(repo_root: str = ".", order: list[str] | None = None) -> list[str]:
    """The stages a ``dvc repro`` of the whole DAG may run, in ``order`` (default :func:`stage_order`):
    those DVC's status calls changed and their descendants."""
    import networkx as nx
    from dvc.repo import Repo

    with contextlib.chdir(repo_root):  # stage names as in the repository, not the cwd
        with Repo(".") as repo:
            changed = set(repo.status())
            graph = repo.index.graph  # edges point from a stage to the stages it depends on
            by_name = {s.addressing: s for s in graph.nodes if getattr(s, "cmd", None)}
            reach = set(changed)
            for name in changed & set(by_name):
                reach |= {s.addressing for s in nx.ancestors(graph, by_name[name])}
        return [name for name in order or stage_order() if name in reach]


def lock_holder(repo_root: str = ".") -> str:
    """The one line for a checkout whose DVC lock another process holds (``.dvc/tmp/lock``: zc.lockfile writes
    the holder's PID in it)."""
    lock = Path(repo_root) / ".dvc" / "tmp" / "lock"
    try:
        pid = lock.read_text().split()[0]
    except (OSError, IndexError):
        pid = "unknown"
    return (f"another run (PID {pid}) holds this checkout ({lock}, DVC's lock): wait for it to end, or stop it "
            "(Ctrl-C in its terminal, or kill PID); one run per checkout (a second one: `git worktree add`)")


def clock(seconds: float) -> str:
    minutes, sec = divmod(round(seconds), 60)
    return f"{minutes}:{sec:02d}"


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    order = stage_order()
    from dvc.lock import LockError

    try:
        todo = planned(order=order)
    except LockError:
        print(f"make repro: {lock_holder()}", file=sys.stderr)
        return 1
    print(f"dvc repro: {len(todo)} of {len(order)} stages to look at again"
          + (f": {', '.join(todo)}" if 0 < len(todo) <= 12 else ""), flush=True)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _raise)
    proc = subprocess.Popen(["dvc", "repro", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1, process_group=0,
                            preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
    assert proc.stdout is not None
    ran = 0
    try:
        for line in proc.stdout:
            match = RUNNING.match(line)
            if match:
                ran += 1
                print(f"[{ran}/{max(len(todo), ran)}] {match.group(1)}, {clock(time.perf_counter() - t0)} into the "
                      "run", flush=True)
            sys.stdout.write(line)
            sys.stdout.flush()
        status = proc.wait()
    except Stopped as got:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C, or the wrapper's SIGTERM, waits too
            signal.signal(signum, signal.SIG_IGN)
        stop(proc)
        print(f"\ndvc repro: stopped by {got} after {clock(time.perf_counter() - t0)}, {ran} stage(s) started; "
              "`make repro` resumes (a training stage from its checkpoint)", file=sys.stderr, flush=True)
        return 128 + got.signum
    if status == 0 and not argv:  # the whole DAG is up to date: no shard work folder can be resumed any more
        for folder in remove_left_work():
            print(f"removed {folder}, a killed run's work the run cache made useless", flush=True)
    print(f"dvc repro: {ran} stages ran in {clock(time.perf_counter() - t0)}" + ("" if status == 0 else
                                                                                 f", exit status {status}"))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
