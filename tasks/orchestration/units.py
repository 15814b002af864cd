"""A study as units of work whose results live in git: what ``make study`` and ``make compare`` run.

A **unit** is a set of stages of ``dvc.yaml`` that one pretraining seed of one procedure needs and no
other unit shares (:func:`plan_units`): an objective's recipe (``recipe-<objective>``: its sweep and the
data it sweeps on), one pretraining seed of an objective (``<objective>-<seed>``: its data, pretraining,
held-out curves with the gates at each snapshot, its fine-tunings), random init under a seed
(``random-<seed>``) and a published baseline (``<model>``: its fine-tunings). What every unit reads
(corpus, tokenizer, task splits, the code fingerprints) is the *prefix*, rebuilt by DVC on each machine.

A finished unit leaves small files in the study's folder (``reports/<study>/``), to be committed:

- ``units/<unit>.yaml``: DVC's lock entry of each of its stages (the md5 of every dep, the params it
  read, its outs), the commit and machine it ran on and its wall time;
- its git-sized outputs at their pipeline paths: the stages' ``cache: false`` outs (``metrics/...``:
  pretraining log and gates, curves, fine-tuning scores) and the small cached outs of :data:`KEPT`
  (per-example test outcomes, the recipe a sweep chose); models stay out of git.

**Whether a unit is done is DVC's own decision**: in a workspace (a ``git worktree`` of HEAD under
``.dvc/tmp/study/``, params with the study's overrides) whose ``dvc.lock`` is the committed one with the
units' entries in place of their stages', DVC's test of ``dvc repro --allow-missing`` finds the stages
that would run (their code fingerprint, params or an upstream output changed; missing data alone does not
count). A unit is done when its file exists and none of its stages, nor any unit stage upstream of
them, would run. So on a fresh clone with no DVC cache or remote the committed units count as done,
an edit to a stage's code or params reruns exactly the units it touches, and units committed on other
machines add up (one file each: git merges them without conflict).

A unit runs in its workspace as DVC runs anything: ``dvc repro`` of its prefix (from DVC's run cache
when this machine built it before), then ``dvc repro --single-item`` of its stages in order. Several
workers (``workers``) are several workspaces sharing this checkout's DVC cache; recipe units run before
the seeds that train with their recipe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Iterator

import yaml

from tasks.core.errors import SourceError
from tasks.core.io import atomic_outputs
from tasks.core.lifetime import die_with_parent
from tasks.core.machine import cpu
from tasks.core.params import Params
from tasks.orchestration.code_deps import CODE_STAGE, write_fingerprints

WORKSPACES = Path(".dvc/tmp/study")
KEPT = ("data/recipes/", "metrics/outcomes/")
"""Cached outs small enough for git that the study reads (besides every ``cache: false`` out). They are
cached, not ``cache: false``: DVC keeps no run cache for a stage with an uncached out other than a metric
or plot (``dvc/stage/__init__.py``), and a fine-tuning restored from it is minutes saved per rerun."""


@dataclass(frozen=True)
class Unit:
    """A unit of a study: its name, kind (``recipe``, ``pretrained``, ``random``, ``baseline``) and its
    stages of ``dvc.yaml`` in dependency order."""

    name: str
    kind: str
    stages: tuple[str, ...]


def plan_units(params: Params) -> list[Unit]:
    """The units of the pipeline under ``params``, in the order they run: each compared objective's
    recipe, then seed by seed each objective and random init (so that a study stopped early holds whole
    seeds of every comparison), then the published baselines."""
    sweep_seed, tasks = params.sweep.seed, params.finetune.tasks
    units = [Unit(f"recipe-{p}", "recipe", (f"pretraining_data@{p}-{sweep_seed}", f"sweep@{p}"))
             for p in params.compare]
    for s in params.pretrain.seeds:
        for p in params.compare:
            units.append(Unit(f"{p}-{s}", "pretrained", (
                f"pretraining_data@{p}-{s}", f"pretrain@{p}-{s}", f"curves@{p}-{s}",
                *(f"finetune@{p}-{s}-{t}" for t in tasks),
                *(f"finetune_snapshot@{p}-{s}@{f}-{t}" for f in params.pretrain.snapshots for t in params.curves.tasks))))
        units.append(Unit(f"random-{s}", "random", (f"init_random@{s}", *(f"finetune_random@{s}-{t}" for t in tasks))))
    units += [Unit(b, "baseline", tuple(f"finetune_baseline@{b}-{t}" for t in params.finetune.baseline_tasks))
              for b in params.finetune.baselines]
    return units


def _git(*args: str, cwd: Path | str = ".") -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def read_unit(study: Path, unit: Unit) -> dict | None:
    """The committed record of ``unit`` (``units/<name>.yaml``), or None when it has none.

    Raises:
        SourceError: the file is not a unit record (cut, garbage, bad YAML, no ``stages`` of lock entries): names
            it and how to recover.
    """
    path = study / "units" / f"{unit.name}.yaml"
    if not path.is_file():
        return None
    try:
        record = yaml.safe_load(path.read_text(encoding="utf-8"))
        problem = _record_problem(record)
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        problem = str(exc).splitlines()[0]
    if problem:
        raise SourceError(f"{path}: not a unit record ({problem}): restore it (`git checkout -- {path}`) or "
                          "delete it to run the unit again")
    return record


def _record_problem(record) -> str:
    """What makes ``record`` no unit record ('' when it is one): each stage a DVC lock entry whose deps and outs
    all have a path and an md5 (a cut file ends inside one)."""
    if not isinstance(record, dict) or not isinstance(record.get("stages"), dict) or not record["stages"]:
        return "no `stages:` of DVC lock entries"
    for name, entry in record["stages"].items():
        files = [f for key in ("deps", "outs") for f in (entry.get(key) or [])] if isinstance(entry, dict) else None
        if files is None or "cmd" not in entry or "outs" not in entry or not all(
                isinstance(f, dict) and "path" in f and "md5" in f for f in files):
            return f"stage {name}: not a whole DVC lock entry (cmd, deps and outs with path and md5)"
    return ""


def _remove_worktree(path: Path, root: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=root, capture_output=True)
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], cwd=root, check=True)


@contextlib.contextmanager
def workspace(path: Path, study: Path, overrides: list[str], units: list[Unit]) -> Iterator[Path]:
    """A fresh workspace at ``path`` while the context lasts (removed after, even when stopped): a detached
    ``git worktree`` of HEAD that uses this checkout's DVC cache, ``params.yaml`` with the study's Hydra
    ``overrides`` (DVC's own parser), the study's committed files (``study/metrics``, ``study/data``) in
    place, and ``dvc.lock`` = the committed lock without any unit stage's entry, plus the entries of the
    committed units."""
    root = Path(_git("rev-parse", "--show-toplevel"))
    path = path.absolute()  # worker threads share one cwd: a relative path would mean another worker's workspace
    _remove_worktree(path, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        _fill(path, root, study, overrides, units)
        yield path
    finally:
        _remove_worktree(path, root)


def _fill(path: Path, root: Path, study: Path, overrides: list[str], units: list[Unit]) -> None:
    from dvc.utils.hydra import apply_overrides

    _git("worktree", "add", "--detach", str(path), "HEAD", cwd=root)
    (path / ".dvc" / "config.local").write_text(f"[cache]\n    dir = {root / '.dvc' / 'cache'}\n", encoding="utf-8")
    if overrides:
        apply_overrides(path / "params.yaml", overrides)
    for folder in ("metrics", "data"):
        if (study / folder).is_dir():
            shutil.copytree(study / folder, path / folder, dirs_exist_ok=True)
    lock = yaml.safe_load((path / "dvc.lock").read_text(encoding="utf-8"))
    ours = {s for u in units for s in u.stages}
    stages = {k: v for k, v in lock["stages"].items() if k not in ours}
    for unit in units:
        if record := read_unit(study, unit):
            stages.update(record["stages"])
    (path / "dvc.lock").write_text(yaml.safe_dump({**lock, "stages": stages}, sort_keys=False), encoding="utf-8")
    # the fingerprints of the workspace's own code: stage `code` writes them and git carries them, so a code edit
    # committed without them rewritten would leave every unit it touches "done" (:func:`done` skips `code`)
    if CODE_STAGE in yaml.safe_load((path / "dvc.yaml").read_text(encoding="utf-8"))["stages"]:
        write_fingerprints(path)


def done(workspace: Path, study: Path, units: list[Unit]) -> dict[str, bool]:
    """``unit name -> done``: its record exists and DVC would run none of its stages nor any unit stage
    upstream of them (what ``dvc repro --allow-missing`` over every unit's stages in ``workspace`` would run:
    DVC's test of each stage, in its order; the fingerprint stage ``code`` aside, whose outputs the workspace
    rewrote from its own code).

    Raises:
        PipelineError: a unit names a stage ``dvc.yaml`` does not have under the study's params.
    """
    import networkx as nx
    from dvc.repo import Repo

    from tasks.core.errors import PipelineError

    dvc_log = logging.getLogger("dvc")
    level, dvc_log.level = dvc_log.level, logging.WARNING  # its walk logs a line a stage
    # DVC resolves repro's targets against the cwd: the main thread alone calls this, with no worker running
    with contextlib.chdir(workspace), Repo(".") as repo, contextlib.ExitStack() as restore:
        restore.callback(dvc_log.setLevel, level)
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        by_name = {s.addressing: s for s in graph.nodes}
        missing = [s for u in units for s in u.stages if s not in by_name]
        if missing:
            raise PipelineError(f"study: no stage {missing[0]} in dvc.yaml under the study's params")
        targets = [s for u in units for s in u.stages]
        # DVC's own walk and test (repro --allow-missing), without running or restoring anything
        changed = lambda stage, upstream=None, **_: stage if stage.changed(True, upstream) else None  # noqa: E731
        would_run = {s.addressing for s in repo.reproduce(targets, repro_fn=changed)} - {"code"}
        ours = set(targets)
        upstream = {u.name: {u_s for s in u.stages for u_s in (s, *(d.addressing for d in
                                                                   nx.descendants(graph, by_name[s])))} & ours
                    for u in units}
    return {u.name: read_unit(study, u) is not None and not (upstream[u.name] & would_run) for u in units}


def prefix(workspace: Path, units: list[Unit]) -> list[str]:
    """The stages upstream of ``units`` that belong to no unit (corpus, tokenizer, task splits, code), which
    every unit's workspace must hold before its own stages run."""
    import networkx as nx
    from dvc.repo import Repo

    ours = {s for u in units for s in u.stages}
    with Repo(str(workspace)) as repo:
        graph = repo.index.graph
        by_name = {s.name: s for s in graph.nodes}
        upstream = {d.name for s in ours for d in nx.descendants(graph, by_name[s]) if getattr(d, "cmd", None)}
    return sorted(upstream - ours)


class _Commands:
    """The commands the study's worker threads run now. A stop (Ctrl-C, SIGTERM) arrives in the main thread
    only: :meth:`stop` terminates every one of them, each with its process group (``dvc repro`` and the
    stage it runs: DVC leaves its child running when it is terminated), and no command starts after it."""

    def __init__(self):
        self.lock, self.live, self.stopped = threading.Lock(), set(), False

    def start(self, cmd: list[str], **kwargs) -> subprocess.Popen:
        with self.lock:
            if self.stopped:
                raise SystemExit(128 + signal.SIGTERM)
            proc = subprocess.Popen(cmd, start_new_session=True, **kwargs)
            self.live.add(proc)
            return proc

    def reset(self) -> None:
        """Let commands start again (a run after a stopped one, in the same process)."""
        with self.lock:
            self.stopped = False

    def done(self, proc: subprocess.Popen) -> None:
        with self.lock:
            self.live.discard(proc)

    def stop(self) -> None:
        with self.lock:
            self.stopped, live = True, list(self.live)
        for sig in (signal.SIGTERM, signal.SIGKILL):  # a stage gets 30 s to clean up
            for proc in live:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
            for proc in live:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(30)
            if all(proc.poll() is not None for proc in live):
                return


COMMANDS = _Commands()


def _run(cmd: list[str], log, env: dict | None = None, cwd: Path | None = None) -> str:
    """Run ``cmd`` (in ``cwd``, ``os.environ`` updated with ``env``), echoing its output to ``log`` as it comes;
    its output. The command dies with this process (a terminated ``make study`` left its stage running), and
    with its process group when the study stops (:class:`_Commands`).

    Raises:
        SystemExit: the command failed (its status), or the study is stopping.
    """
    proc = COMMANDS.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})},
                          preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
    lines = []
    try:
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
    except BaseException:  # stopped (Ctrl-C, SIGTERM) in the main thread: the commands go first, then the workspace
        COMMANDS.stop()
        raise
    finally:
        COMMANDS.done(proc)
    if proc.wait():
        raise SystemExit(proc.returncode)
    return "".join(lines)


def _repro(workspace: Path, args: list[str], log, env: dict | None = None) -> None:
    """``dvc repro <args>`` in ``workspace``. Raises SystemExit (naming the workspace) on failure."""
    try:
        _run([sys.executable, "-m", "dvc", "repro", *args], log, env, workspace)
    except SystemExit:
        print(f"study: dvc repro {' '.join(args[:3])} ... failed in {workspace} (its output above)", file=log)
        raise


def keep(workspace: Path, study: Path, stages: list[str] | tuple[str, ...], under: tuple[str, ...] = ("",)) -> None:
    """Copy the outputs of ``stages`` that go to git (every ``cache: false`` out, and :data:`KEPT`) whose
    path starts with one of ``under`` from ``workspace`` to the same path under ``study`` (each atomically)."""
    from dvc.repo import Repo

    with Repo(str(workspace)) as repo:  # no chdir: it runs in a worker thread, and the cwd is the process's
        index = {s.name: s for s in repo.index.stages}
        paths = [o.def_path for name in stages for o in index[name].outs
                 if (not o.use_cache or o.def_path.startswith(KEPT)) and o.def_path.startswith(under)]
    for path in paths:
        target = study / path
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_outputs(target) as (tmp,):
            (shutil.copytree if (workspace / path).is_dir() else shutil.copyfile)(workspace / path, tmp)


def run_unit(workspace: Path, study: Path, unit: Unit, prefix_stages: list[str], log, env: dict | None = None) -> dict:
    """Run ``unit`` in ``workspace`` (its prefix, then its stages) and record it in ``study``: the prefix's
    metrics and the unit's kept outputs copied to their paths under ``study``, then ``units/<name>.yaml``
    (written last, atomically: a unit stopped halfway has no record and runs again). Returns the record."""
    t0 = time.perf_counter()
    _repro(workspace, prefix_stages, log, env)
    keep(workspace, study, prefix_stages, ("metrics/",))  # the corpus and task splits the report describes
    t1 = time.perf_counter()
    _repro(workspace, ["--single-item", *unit.stages], log, env)
    wall = time.perf_counter() - t1
    lock = yaml.safe_load((workspace / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    keep(workspace, study, unit.stages)
    record = {"unit": unit.name, "kind": unit.kind, "commit": _git("rev-parse", "--short=12", "HEAD", cwd=workspace),
              "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wall_sec": round(wall, 1),
              "prefix_sec": round(t1 - t0, 1), "machine": cpu(),
              "stages": {s: lock[s] for s in unit.stages}}
    with atomic_outputs(study / "units" / f"{unit.name}.yaml") as (tmp,):
        tmp.write_text(yaml.safe_dump(record, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return record


def run_units(study: Path, todo: list[Unit], units: list[Unit], overrides: list[str], workers: int, log=sys.stdout,
              name: str = "study") -> list[dict]:
    """Run the units ``todo`` (of the study's ``units``), ``workers`` at once, each worker in its own workspace
    (``.dvc/tmp/study/<name>-<k>``); recipe units first, then the others in workspaces filled anew, since the
    seeds train with the recipes whichever worker chose them. Prints ``N of M units done`` after each. Returns the records of the units run.

    Raises:
        SystemExit: a unit's stage failed (after the others ran, except the seeds of a failed recipe; every unit
            that finished is recorded).
    """
    total, finished, records, failed = len(units), len(units) - len(todo), [], []
    COMMANDS.reset()
    # side by side, each worker's stages get their share of the cores for what does not pin its own threads
    # (torch reads OMP_NUM_THREADS at start; pretraining pins pretrain.threads, which its result depends on)
    env = {"OMP_NUM_THREADS": str(max(1, len(os.sched_getaffinity(0)) // workers))} if workers > 1 else None
    stages = []  # the prefix: the same in every workspace

    def run(group: list[Unit]) -> None:
        """Run ``group`` in workspaces filled now: a seed's holds every recipe recorded before it (a workspace
        made before the recipes ran held only the one it ran itself)."""
        if not group:
            return
        with contextlib.ExitStack() as stack:
            free = [stack.enter_context(workspace(WORKSPACES / f"{name}-{k}", study, overrides, units))
                    for k in range(min(workers, len(group)))]
            if not stages:
                stages.extend(prefix(free[0], units))

            def one(unit: Unit) -> dict | None:
                nonlocal finished
                if f"recipe-{unit.name.rsplit('-', 1)[0]}" in failed:
                    return None  # the seeds of a failed recipe wait for it
                space = free.pop()
                try:
                    print(f"{name}: unit {unit.name} ({len(unit.stages)} stages) in {space}", file=log, flush=True)
                    record = run_unit(space, study, unit, stages, log, env)
                except SystemExit:  # the others go on (a long study loses no more than the failing unit)
                    failed.append(unit.name)
                    return None
                finally:
                    free.append(space)
                finished += 1
                print(f"{name}: unit {unit.name} done in {record['wall_sec'] / 60:.1f} min; {finished} of {total} "
                      "units done", file=log, flush=True)
                return record

            pool = ThreadPoolExecutor(len(free))
            try:
                records.extend(r for r in pool.map(one, group) if r)
            except BaseException:  # stopped (Ctrl-C, SIGTERM): no unit starts, the running ones' commands go
                pool.shutdown(wait=False, cancel_futures=True)
                COMMANDS.stop()
                pool.shutdown()
                raise
            pool.shutdown()

    recipes, seeds = [u for u in todo if u.kind == "recipe"], [u for u in todo if u.kind != "recipe"]
    run(recipes)
    if recipes and seeds:  # a recipe run again that chose as before leaves its seeds' committed units done
        with workspace(WORKSPACES / f"{name}-check", study, overrides, units) as check:
            state = done(check, study, units)
        if still := [u.name for u in seeds if state[u.name]]:
            finished += len(still)
            print(f"{name}: the recipes chose as before: {', '.join(still)} still done; {finished} of {total} "
                  "units done", file=log, flush=True)
        seeds = [u for u in seeds if not state[u.name]]
    run(seeds)
    if failed:
        print(f"{name}: unit(s) {', '.join(failed)} failed (their output above); {finished} of {total} units done. "
              "Fix, commit, and run the study again: it runs only what is not done", file=log, flush=True)
        raise SystemExit(1)
    return records


def estimate_minutes(unit: Unit, study: Path, units: list[Unit], params: Params, metrics: Path = Path("metrics")) -> float:
    """What ``unit`` will take on this machine: the mean wall time of the study's finished units of its kind and
    procedure (``mac-43`` from ``mac-42``: objectives differ in cost, one with a model of its own about 2x), else of
    its kind, else the committed default run's measured stages (``metrics``: a pretraining; a fine-tuning of MLM or
    random init, times the learning rates searched; a recipe's sweep settings at their fraction of the
    budget; a published model about 6x a tiny one; pretrainings scaled to ``pretrain.token_budget``), plus a few
    seconds a stage."""
    from tasks.core.io import read_json

    procedure = lambda name: name.rsplit("-", 1)[0]  # noqa: E731  (a seed's unit: its objective)
    finished = {u.name: r["wall_sec"] for u in units if u.kind == unit.kind and (r := read_unit(study, u))}
    for same in ([w for n, w in finished.items() if procedure(n) == procedure(unit.name)], list(finished.values())):
        if same:
            return sum(same) / len(same) / 60
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    pretrain = params.pretrain.token_budget * mean(  # seconds per token of the default run's pretrainings
        [(m := read_json(p))["wall_sec"] / m["tokens"] for p in sorted((metrics / "pretrain").glob("*.json"))])
    finetune = len(params.finetune.learning_rate_scales) * mean(
        [read_json(p)["wall_sec"] for p in sorted((metrics / "finetune").glob("*.json"))
         if p.stem.startswith(("mlm-", "random-")) and "@" not in p.stem])
    runs = sum(s.startswith("finetune") for s in unit.stages)
    seconds = {"recipe": len(params.sweep.settings) * params.sweep.fraction * pretrain,
               "pretrained": pretrain + finetune * runs, "random": finetune * runs,
               "baseline": 6 * finetune * runs}[unit.kind]
    return (seconds + 6 * len(unit.stages)) / 60
