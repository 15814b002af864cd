"""A stage's fixed cost: what each stage of ``dvc repro`` spends besides its own work (starting Python
and importing its flow module, Prefect's flow run, DVC's update of ``dvc.lock``), each against its
peer, and what it adds up to over the stages of the committed run.

* start-up: ``python -m timeit -n1 -r1 "import flows.<module>"`` run as a stage runs it under
  ``make repro``, through the fork server's shim (:mod:`tasks.orchestration.forkserver`: a child of
  an interpreter that has torch, transformers and Prefect imported), for each flow module the stages
  of ``dvc.lock`` run; against the same command in a fresh interpreter (the peer, and every stage's
  cost before the fork server). The fresh import is shared out by top-level package by one
  ``-X importtime`` run (torch, transformers, prefect, scipy, ...), which says how much of it is the
  project's (transformers' lazy ``AutoModel``-style names resolve inside the module that imports
  them, and count as its own).
* flow: the first call, in a forked process, of a flow running one task (``stage_task``, as every
  stage's) against a local Prefect server, against calling the task's function plainly (the peer).
* lock: DVC's update of ``dvc.lock`` after each stage (``dvc.utils.serialize.modify_yaml``: a
  round-trip parse that keeps its comments, then a dump) on a copy of the project's lock, against
  DVC's plain parse of the same file (what it reads when it collects the stages); then on the lock
  with its stages repeated 2 and 4 times, as a study's longer DAG makes it. The update grows with
  the lock, so a run's total grows with the square of its stages (treeverse/dvc#10629).

The fixed cost of the run is the sum over the stages of ``dvc.lock`` of start-up + flow + lock update;
a stage's, their median over the stages. Writes ``benchmarks/results/stage_overhead.json``::

    python benchmarks/stage_overhead.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from copy import deepcopy
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # run as a script, or as -m benchmarks.stage_overhead
from tasks.orchestration import forkserver as fs  # noqa: E402  (after the path)
from tasks.orchestration.code_deps import FLOW_CMD  # noqa: E402
from tasks.orchestration.prefect_server import prefect_server  # noqa: E402

from results import write_results  # noqa: E402  (benchmarks/results.py)

CHILD_FLOW = "--flow-child"


def _wall(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Seconds ``cmd`` ran (from the repository root, in ``env``) and its finished process.

    Raises:
        RuntimeError: the command failed (its stderr's tail).
    """
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return time.perf_counter() - t0, proc


def stage_modules(lock: Path) -> Counter:
    """``{flow module: how many stages of lock run it}`` (stage ``code``, which runs no flow, left out)."""
    stages = yaml.safe_load(lock.read_text(encoding="utf-8"))["stages"]
    return Counter(m.group(1) for stage in stages.values() if (m := FLOW_CMD.search(stage["cmd"])))


def package_shares(importtime: str) -> dict[str, float]:
    """Self import time by top-level package, as shares of the whole (``-X importtime``'s stderr)."""
    by_package: Counter = Counter()
    for line in importtime.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            _, self_us, _, name = (part.strip() for part in line.replace("import time:", "|").split("|"))
            by_package[name.split(".")[0]] += int(self_us)
    total = sum(by_package.values())
    return {name: us / total for name, us in by_package.most_common()}


def _forked(shim: list[str], args: list[str], env: dict) -> tuple[float, str]:
    """Seconds ``python ARGS`` ran through the fork server's shim, and its output after the pid it prints first.

    Raises:
        RuntimeError: the command failed, or ran in a fresh interpreter (the server declined it).
    """
    t0 = time.perf_counter()
    proc = subprocess.Popen([*shim, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} failed:\n{err[-2000:]}")
    pid, _, rest = out.partition("\n")
    if int(pid) == proc.pid:
        raise RuntimeError(f"{' '.join(args)} ran in a fresh interpreter: the fork server declined it")
    return seconds, rest


def flow_child() -> None:
    """In a forked process (``PREFECT_API_URL`` set): print the seconds of a one-task flow's first call
    and of the same task's function called plainly, as JSON."""
    print(os.getpid(), flush=True)  # first: proof it was forked (_forked)
    from prefect import flow

    from tasks.core.stage import no_heartbeats, stage_task

    @stage_task
    def work() -> int:
        return sum(range(1000))

    @flow(name="stage_overhead")
    def one_task() -> int:
        return work()

    t0 = time.perf_counter()
    with no_heartbeats():  # as run_stage calls a stage's flow
        one_task()
    t1 = time.perf_counter()
    work.fn()
    print(json.dumps({"flow_sec": t1 - t0, "plain_sec": time.perf_counter() - t1}))


def lock_update(lock: Path, repeats: int, copies: int = 1) -> dict:
    """DVC's update of ``lock`` with its stages ``copies`` times over (a longer DAG's lock; median
    seconds), against DVC's plain parse of the same file."""
    from dvc.utils.serialize import load_yaml, modify_yaml

    data = yaml.safe_load(lock.read_text(encoding="utf-8"))
    data["stages"] = {f"{name}{f'~{k}' if k else ''}": deepcopy(stage) for k in range(copies)  # no YAML aliases
                      for name, stage in data["stages"].items()}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "dvc.lock"
        if copies == 1:
            shutil.copy(lock, copy)
        else:
            copy.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
        updates, reads = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            with modify_yaml(str(copy)) as doc:
                doc["stages"] = doc.get("stages", {})
            t1 = time.perf_counter()
            load_yaml(str(copy))
            updates.append(t1 - t0)
            reads.append(time.perf_counter() - t1)
        size = copy.stat().st_size
    update, read = statistics.median(updates), statistics.median(reads)
    return {"bytes": size, "stages": len(data["stages"]),
            "entries": sum(len(s.get("deps", [])) + len(s.get("outs", [])) for s in data["stages"].values()),
            "update_sec": round(update, 3), "plain_parse_sec": round(read, 3), "update_vs_parse": round(update / read, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each measure (the median is kept)")
    parser.add_argument(CHILD_FLOW, action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.flow_child:
        flow_child()
        return 0
    lock = ROOT / "dvc.lock"
    python = [sys.executable]
    interpreter = statistics.median(_wall([*python, "-c", "pass"])[0] for _ in range(max(3, args.repeats)))
    modules, imports, shares = stage_modules(lock), {}, Counter()
    with prefect_server() as api, fs.forkserver({**os.environ, "PREFECT_API_URL": api}) as env:
        shim = [sys.executable, "-S", fs.__file__, "client"]  # what `python` on the stages' PATH runs
        timeit = ["-m", "timeit", "-n1", "-r1", "-s", "import os; print(os.getpid())"]
        _forked(shim, [*timeit, "pass"], env)  # the server is up (its imports done) before anything is timed
        for module, stages in sorted(modules.items()):
            startup = [*timeit, f"import {module}"]
            fresh = statistics.median(_wall([*python, *startup], env)[0] for _ in range(args.repeats))
            forked = statistics.median(_forked(shim, startup, env)[0] for _ in range(args.repeats))
            imports[module.removeprefix("flows.")] = {"stages": stages, "fresh_sec": round(fresh, 2),
                                                     "forked_sec": round(forked, 2)}
            # timed plainly (-X importtime's own bookkeeping doubles an import's time), shared out by one traced run
            traced = _wall([*python, "-X", "importtime", "-c", f"import {module}"])[1]
            for package, share in package_shares(traced.stderr).items():  # weighted by the stages that pay it
                shares[package] += share * (fresh - interpreter) * stages
        flows = [json.loads(_forked(shim, ["-m", "benchmarks.stage_overhead", CHILD_FLOW], env)[1].splitlines()[-1])
                 for _ in range(args.repeats)]
    flow_sec = statistics.median(f["flow_sec"] for f in flows)
    plain_sec = statistics.median(f["plain_sec"] for f in flows)
    dvc = lock_update(lock, args.repeats)
    growth = [lock_update(lock, args.repeats, k) for k in (2, 4)]  # a study's lock: more seeds, more stages

    n = sum(modules.values())
    fresh_total = sum(m["fresh_sec"] * m["stages"] for m in imports.values())
    parts = {"start-up": sum(m["forked_sec"] * m["stages"] for m in imports.values()),
             "prefect flow": flow_sec * n, "dvc.lock update": dvc["update_sec"] * n}
    fixed = sum(parts.values())
    median = statistics.median(imports[m.removeprefix("flows.")]["forked_sec"] + flow_sec + dvc["update_sec"]
                               for m, k in modules.items() for _ in range(k))
    print(f"{n} stages: fixed cost {fixed / 60:.1f} min, {fixed / n:.1f} s a stage (median {median:.1f} s): "
          + ", ".join(f"{k} {sec / n:.2f} s" for k, sec in parts.items()))
    print(f"start-up from the fork server {parts['start-up'] / n:.2f} s a stage against a fresh interpreter's "
          f"{fresh_total / n:.2f} s; a one-task flow {flow_sec:.2f} s against the plain call's "
          f"{plain_sec * 1e6:.0f} us; DVC's update of dvc.lock ({dvc['bytes']:,} bytes) {dvc['update_sec']} s, "
          f"x{dvc['update_vs_parse']} its plain parse; "
          + ", ".join(f"{g['stages']} stages {g['update_sec']} s" for g in growth))
    write_results("stage_overhead", {"repeats": args.repeats}, {
        "stages": n, "fixed_run_min": round(fixed / 60, 1), "fixed_per_stage_sec": round(fixed / n, 2),
        "fixed_per_stage_median_sec": round(median, 2),
        "parts": {name: {"per_stage_sec": round(sec / n, 2), "run_min": round(sec / 60, 1),
                         "share": round(sec / fixed, 3)} for name, sec in parts.items()},
        "against the peer": {
            "start-up from the fork server vs a fresh interpreter": {
                "sec": round(parts["start-up"] / n, 2), "peer_sec": round(fresh_total / n, 2),
                "ratio": round(fresh_total / parts["start-up"], 2)},
            "prefect flow vs plain call": {"sec": round(flow_sec, 3), "peer_sec": round(plain_sec, 6),
                                           "ratio": round(flow_sec / plain_sec)},
            "dvc.lock update vs plain parse": {"sec": dvc["update_sec"], "peer_sec": dvc["plain_parse_sec"],
                                               "ratio": dvc["update_vs_parse"]}},
        "dvc.lock update by its size (the stages repeated)": {
            f"x{g['stages'] // dvc['stages']}": {k: g[k] for k in ("stages", "bytes", "entries", "update_sec")}
            for g in (dvc, *growth)},
        "fresh import time by package (the 8 largest)": {p: {"share": round(sec / sum(shares.values()), 3)}
                                                         for p, sec in shares.most_common(8)},
        "start-up by flow module": imports})
    return 0


if __name__ == "__main__":
    sys.exit(main())
