"""``make repro``: ``dvc repro`` that says where it is.

Before it starts it prints the stages DVC will look at again (those whose deps changed, and every
stage downstream of them: an upper bound, since DVC skips a downstream stage whose inputs came out
the same) and, as DVC starts each, ``[k/n] <stage>`` with the minutes since the start; the training
stages print their own step and time left. DVC's output passes through unchanged, and every stage
is still a Prefect flow run in the UI.

Usage::

    python -m tasks.orchestration.progress [dvc repro args...]
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time

from tasks.core.shards import remove_left_work
from tasks.orchestration.repro import stage_order

RUNNING = re.compile(r"^Running stage '([^']+)'", re.M)


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


def clock(seconds: float) -> str:
    minutes, sec = divmod(round(seconds), 60)
    return f"{minutes}:{sec:02d}"


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    order = stage_order()
    todo = planned(order=order)
    print(f"dvc repro: {len(todo)} of {len(order)} stages to look at again"
          + (f": {', '.join(todo)}" if 0 < len(todo) <= 12 else ""), flush=True)
    proc = subprocess.Popen(["dvc", "repro", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            bufsize=1)
    assert proc.stdout is not None
    ran = 0
    for line in proc.stdout:
        match = RUNNING.match(line)
        if match:
            ran += 1
            print(f"[{ran}/{max(len(todo), ran)}] {match.group(1)}, {clock(time.perf_counter() - t0)} into the run",
                  flush=True)
        sys.stdout.write(line)
        sys.stdout.flush()
    status = proc.wait()
    if status == 0 and not argv:  # the whole DAG is up to date: no shard work folder can be resumed any more
        for folder in remove_left_work():
            print(f"removed {folder}, a killed run's work the run cache made useless", flush=True)
    print(f"dvc repro: {ran} stages ran in {clock(time.perf_counter() - t0)}" + ("" if status == 0 else
                                                                                 f", exit status {status}"))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
