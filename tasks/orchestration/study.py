"""``make study``, ``make compare`` and ``make full``: the pipeline under other params as one DVC
experiment, kept as an experiment (shareable with ``dvc exp push``), and its report copied into
``reports/<which>/`` (committed).

The experiment is the default run with the params of :data:`STUDIES` (``study``: more pretraining
seeds, MacBERT's Mac and ELECTRA at MLM's compute, the snapshots fine-tuned, each objective's
learning rate swept; ``compare``: every objective of ``params.yaml``, one pretraining seed;
``full``: the default run at its earlier, larger scale); DVC reruns only what they change and takes the
rest from its cache. It runs in a temporary workspace (``dvc exp run --temp``), so the user's
workspace, committed or not, is never touched; it refuses to start when tracked files have
uncommitted changes (the experiment would silently include them). Afterwards ``reports/<which>/``
holds the experiment's ``report.md``, ``report.html``, ``figures/``, ``variance.json`` and
``metrics/``, read from the experiment through DVC's own file system, ``study.json`` (experiment
name, params, wall time, the stages that ran) and the MDE planner's ``plan.md`` for a 1-point MDE
(:mod:`tasks.report.planner`). If the experiment fails, ``reports/<which>/`` is left as it was.

**Several workers** (``--workers N``, ``make study WORKERS=N``): the study is cut into units of
independent work, one per pretraining seed (every compared objective's data, pretraining, curves and
fine-tunings for that seed), each a DVC experiment of its own run by DVC's experiment queue (``dvc
exp run --queue``, ``dvc queue start --jobs N``: each in a temporary workspace, all sharing the
cache). A pretraining pins its intra-op threads (``pretrain.threads``), so no result depends on
``N``; ``N`` x ``pretrain.threads`` over the cores thrashes, which the study says before it starts.
The unit of ``sweep.seed`` runs first, alone, since every unit's sweeps train on its data; the
others then run ``N`` at once. Each stage a unit ran is in DVC's run cache, so the final experiment
with every seed (the one the report comes from) finds every stage done and runs only the report. A
unit killed mid-stage leaves nothing behind (DVC removes its temporary workspace); rerunning the
study queues it again and it takes what it finished from the run cache. On several machines the run
cache travels through the DVC remote (``dvc push --run-cache`` / ``dvc pull --run-cache``):
docs/running.md.

Usage::

    python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study study [--workers N] \
        [-S key=value ...] [--out DIR]
    python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study compare
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from tasks.core import paths
from tasks.core.io import atomic_outputs, to_json
from tasks.core.lifetime import die_with_parent
from tasks.core.params import PARAMS_FILE, Params, ParamsError, load_params
from tasks.orchestration.progress import ran_stages
from tasks.report.planner import main as plan

# each objective's learning rate chosen on held-out dev text (stage sweep@<objective>); the default run has none
SWEEP = {"++sweep.settings": "{lr5e-4:{learning_rate:0.0005},lr1e-3:{learning_rate:0.001},lr2e-3:{learning_rate:0.002}}"}
STUDIES = {
    "study": {
        "compare": "[mlm,wwm,mac,electra]",  # electra: at MLM's model FLOPs (its budget: mlm_flops)
        "pretrain.seeds": "[42,43,44,45,46]",
        "curves.tasks": "[msra_ner]",
        **SWEEP,
    },
    "compare": {"compare": lambda: f"[{','.join(load_params().objectives)}]"},  # one seed: about those checkpoints
    # The default run at the scale it had before it was fitted to a 2-core CPU (docs/running.md#the-default-run-and-
    # what-runs-at-full-scale); its last run is commit ae6f459's dvc.lock and metrics.
    "full": {
        **SWEEP,
        "pretrain.token_budget": "9500000",
        "finetune.seeds": "[1,2,3]",
        "finetune.seed_workers": "3",
        "tasks.lcqmc.data.limit": "{train:2000,dev:1000}",
        "tasks.msra_ner.data.limit": "{train:1500,dev:500}",
        "tasks.msra_ner.training.epochs": "8",
        "finetune.baseline_tasks": "[sentiment,lcqmc,msra_mrc,msra_ner]",
        "multilingual.total_tokens": "1500000",
        "multilingual.pretrain.token_budget": "1000000",
        "probe.sentences": "{train:1000,test:300}",
        "scalar_mix.tasks": "[sentiment,msra_ner]",
        "compression.tasks": "[sentiment,msra_ner,msra_mrc]",
        "compression.prune.importance_examples": "1024",
        "compression.prune.n_iters": "4",
        "compression.latency_repeats": "50",
    },
}
COPIED = ("reports/report.md", "reports/report.html", "reports/figures", "reports/variance.json", "metrics")


def uncommitted() -> list[str]:
    """Tracked files with changes git has not committed (what ``dvc exp run`` would include)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                         check=True).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def _run(cmd: list[str], log, env: dict | None = None) -> str:
    """Run ``cmd`` (in ``os.environ`` updated with ``env``), echoing its output to ``log`` as it comes; its output.

    Raises:
        SystemExit: the command failed (its status).
    """
    # the command dies with the study (a terminated `make study` left `dvc exp run` and its stage running)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})},
                            preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
    lines = []
    try:
        for line in proc.stdout:
            log.write(line)
            lines.append(line)
    except BaseException:  # stopped (Ctrl-C, SIGTERM): the command goes first, then its workspace (left_behind)
        proc.terminate()
        proc.wait()
        raise
    if proc.wait():
        raise SystemExit(proc.returncode)
    return "".join(lines)


EXP_TEMPS = Path(".dvc/tmp/exps/standalone")  # where `dvc exp run --temp` makes its workspace


def _stop(signum, frame):
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C, so that left_behind cleans up


@contextmanager
def left_behind_removed():
    """While the study runs, SIGTERM stops it as Ctrl-C does; either way the temporary workspaces its
    ``dvc exp run --temp`` commands made (``.dvc/tmp/exps/standalone/tmp*``, a copy of the repository
    each, which DVC leaves when its command is killed) are removed once the commands have exited."""
    before = set(EXP_TEMPS.glob("tmp*"))
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        for folder in set(EXP_TEMPS.glob("tmp*")) - before:
            shutil.rmtree(folder, ignore_errors=True)


def copy_experiment(name: str, out: Path) -> None:
    """The experiment's user-facing outputs (:data:`COPIED`) into the new folder ``out``, through
    DVC's file system at the experiment's commit (git-tracked files and DVC outputs alike)."""
    from dvc.api import DVCFileSystem

    fs = DVCFileSystem(".", rev=name)
    out.mkdir(parents=True)
    for path in COPIED:
        fs.get(path, str(out / Path(path).name), recursive=fs.isdir(path))


def units(params: dict, sweep_seed: int) -> list[dict]:
    """The study's params cut into one set per pretraining seed (``sweep.seed``'s first, since the others'
    sweeps train on its data; each other unit keeps it among its seeds, which the run cache then serves)."""
    seeds = [int(x) for x in params["pretrain.seeds"].strip("[]").split(",")]
    ordered = [sweep_seed] + [s for s in seeds if s != sweep_seed]
    return [{**params, "pretrain.seeds": f"[{sweep_seed}]" if s == sweep_seed else f"[{sweep_seed},{s}]"}
            for s in ordered]


def _flags(params: dict) -> list[str]:
    return [a for k, v in params.items() for a in ("-S", k if v is None else f"{k}={v}")]


def check_params(params: dict) -> Params:
    """Validate ``params.yaml`` with the study's overrides applied (by DVC's own Hydra parser, on a copy), so
    that bad params are refused before any experiment starts, not by the first stage that reads them; the
    validated params.

    Raises:
        ParamsError: an override names no key of ``params.yaml`` or is not Hydra's syntax (the override and
            Hydra's reason named), or the overridden params are invalid (every offending key named).
    """
    from dvc.exceptions import InvalidArgumentError
    from dvc.utils.hydra import apply_overrides

    overrides = _flags(params)[1::2]
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "params.yaml"
        shutil.copyfile(PARAMS_FILE, copy)
        for override in overrides:  # one at a time, so that the error names its override
            try:
                apply_overrides(copy, [override])
            except InvalidArgumentError as exc:  # DVC's message names neither the key nor the reason
                reason = str(exc.__cause__ or exc).splitlines()[0]
                raise ParamsError(f"-S {override}: {reason} (Hydra's override syntax: a key of {PARAMS_FILE}, "
                                  "++key=value to add one)") from None
        try:
            return load_params(copy)
        except ParamsError as exc:
            raise ParamsError(f"{str(exc).replace(str(copy), PARAMS_FILE)} (with the study's -S "
                              f"{' -S '.join(overrides)})") from None


def run_units(name: str, params: dict, workers: int, log) -> str:
    """Run :func:`units` through DVC's experiment queue, ``workers`` at once (the first alone); the
    output of the runs. Raises SystemExit when a unit failed (naming it and where its log is)."""
    first, *rest = units(params, load_params().sweep.seed)
    out = _run(["dvc", "exp", "run", "--temp", "--name", f"{name}-unit-1", *_flags(first)], log)
    for i, unit in enumerate(rest, start=2):
        _run(["dvc", "exp", "run", "--queue", "--name", f"{name}-unit-{i}", *_flags(unit)], log)
    # The units side by side share the cores: each gets its share of threads for what does not pin its own (torch
    # reads OMP_NUM_THREADS at start; pretraining pins pretrain.threads, which its result depends on).
    threads = max(1, len(os.sched_getaffinity(0)) // workers)
    _run(["dvc", "queue", "start", "--jobs", str(workers)], log, env={"OMP_NUM_THREADS": str(threads)})
    while True:
        status = subprocess.run(["dvc", "queue", "status"], capture_output=True, text=True).stdout
        if not re.search(r"\b(Queued|Running)\b", status):
            break
        time.sleep(10)
    failed = [line.split()[1] for line in status.splitlines() if " Failed" in line and f"{name}-unit-" in line]
    if failed:
        print(f"study: unit(s) {', '.join(failed)} failed: `dvc queue logs <name>` says why; rerun the study to "
              "finish them (what they finished is in the run cache)", file=sys.stderr)
        raise SystemExit(1)
    return out + "".join(subprocess.run(["dvc", "queue", "logs", f"{name}-unit-{i}"], capture_output=True,
                                        text=True).stdout for i in range(2, len(rest) + 2))


def _positive(text: str) -> int:
    """``--workers``: a whole number of at least 1 (0 ran as 1 worker)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (a whole number, at least 1)")
    return int(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="study", description="make study / compare / full (module docstring)")
    parser.add_argument("which", nargs="?", choices=list(STUDIES), default="study")
    parser.add_argument("--workers", type=_positive, default=1, help="units of work at once (DVC's experiment queue)")
    parser.add_argument("--out", type=Path, help="where the report goes (default: reports/<which>)")
    parser.add_argument("-S", dest="overrides", action="append", default=[],
                        help="key=value: the study's params changed (every unit gets it), e.g. a reduced study; "
                             "a bare ~key deletes (Hydra's syntax)")
    args, argv = parser.parse_known_args(argv)
    which, workers, out_dir = args.which, args.workers, args.out or paths.REPORTS / args.which
    overrides = {key: value if eq else None for key, eq, value in (o.partition("=") for o in args.overrides)}
    if any(a in ("--queue", "--temp", "-n", "--name") for a in argv):
        print("study: it names and runs its own experiment (--temp); run `dvc exp run --queue` yourself for other "
              "experiments", file=sys.stderr)
        return 2
    dirty = uncommitted()
    if dirty:
        print(f"study: {len(dirty)} tracked file(s) have uncommitted changes ({', '.join(dirty[:5])}); commit or "
              "stash them first: the study's experiment would include them", file=sys.stderr)
        return 2
    name = time.strftime(f"{which}-%Y%m%d-%H%M%S")
    params = {**{k: v() if callable(v) else v for k, v in STUDIES[which].items()}, **overrides}
    try:
        threads, cores = check_params(params).pretrain.threads, len(os.sched_getaffinity(0))
    except ParamsError as exc:
        print(f"study: {exc}", file=sys.stderr)
        return 2
    if workers > 1 and (threads or cores) * workers > cores:  # measured: 2 x 2 threads on 2 cores, 1.74x slower
        print(f"study: {workers} workers x pretrain.threads {threads or cores} > {cores} cores: the pretrainings "
              f"side by side will thrash; -S pretrain.threads={max(1, cores // workers)} fits them (its models then "
              "differ from the default run's in their last bits, so its cache serves them no longer)", file=sys.stderr)
    t0 = time.time()
    with left_behind_removed():
        out = run_units(name, params, workers, sys.stdout) if workers > 1 and "pretrain.seeds" in params else ""
        out += _run(["dvc", "exp", "run", "--temp", "--name", name, *_flags(params), *argv], sys.stdout)
    wall = time.time() - t0
    with atomic_outputs(out_dir) as (folder,):
        copy_experiment(name, folder)
        (folder / "study.json").write_text(to_json({
            "experiment": name, "params": params, "workers": workers, "wall_sec": round(wall, 1),
            "stages_run": sorted(ran_stages(out))}), encoding="utf-8")
    plan([str(out_dir), "--target", "1.0"])
    print(f"{which}: {wall / 3600:.2f} h; experiment {name} (dvc exp show; dvc exp push <remote> {name}); report, "
          f"metrics and plan in {out_dir}/")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        print("study: stopped; its temporary workspace is removed (what its stages finished stays in DVC's run cache)",
              file=sys.stderr)
        sys.exit(130)
