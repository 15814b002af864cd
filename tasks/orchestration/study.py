"""``make study``, ``make compare`` and ``make full``: the pipeline under other params, its report in
``reports/<which>/`` (committed).

``study`` (5 pretraining seeds of MLM, WWM, MacBERT's Mac and ELECTRA at MLM's compute, and random init,
each objective's pretraining learning rate swept and every model's fine-tuning learning rate chosen on
dev) and ``compare`` (every objective of ``params.yaml``, one seed) run as **units whose results live in
git** (:mod:`tasks.orchestration.units`): the study prints its plan (each unit, done or its estimated
minutes, and ``N of M units done``), runs the units not yet committed for the current code and params
(``--workers N`` at once), and when all are done builds the report from the committed units alone
(``reports/<which>/report.md``, ``variance.json``, the MDE planner's ``plan.md``, ``study.json``: units,
minutes, commits). So it stops and resumes across sessions and machines: commit ``reports/<which>/``
after a stop, and the next ``make study`` on a fresh clone runs only what is missing.

``full`` (the default run at its earlier, larger scale: every stage, not unit-shaped) is one DVC
experiment in a temporary workspace (``dvc exp run --temp``), kept as an experiment and its report copied
into ``reports/full/``; DVC reruns only what its params change and takes the rest from its cache.

Each refuses to start when tracked files have uncommitted changes (the run would not be the commit's).

Usage::

    python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study study [--workers N] \
        [-S key=value ...] [--out DIR]
    python -m tasks.orchestration.prefect_server python -m tasks.orchestration.study compare
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from tasks.core import paths
from tasks.core.errors import PipelineError
from tasks.core.io import atomic_outputs, to_json
from tasks.core.params import PARAMS_FILE, Params, ParamsError, load_params
from tasks.orchestration.progress import ran_stages
from tasks.orchestration.units import (WORKSPACES, Unit, _run, done, estimate_minutes, plan_units, read_unit,
                                       run_units, workspace)
from tasks.report.planner import main as plan

# each objective's learning rate chosen on held-out dev text (stage sweep@<objective>); the default run has none
SWEEP = {"++sweep.settings": "{lr5e-4:{learning_rate:0.0005},lr1e-3:{learning_rate:0.001},lr2e-3:{learning_rate:0.002}}"}
STUDIES = {
    "study": {
        "compare": "[mlm,wwm,mac,electra]",  # electra: at MLM's model FLOPs (its budget: mlm_flops)
        "pretrain.seeds": "[42,43,44,45,46]",
        # every model's fine-tuning learning rate (random init's and the reference row's included) chosen on dev
        "finetune.learning_rate_scales": "[0.3,1.0,3.0]",
        "finetune.baseline_tasks": "[sentiment,lcqmc,msra_mrc,msra_ner]",  # the reference row on every task
        **SWEEP,
        # the sweep's horizon: where its gates can tell. At a quarter of the budget no WWM setting had learned (loss not
        # 0.1 nats below the unigram's at lr 5e-4, 1e-3, 2e-3); at half, no ELECTRA setting had (its best, lr 1e-3:
        # ROC AUC 0.74, RTD loss 0.375 against the gate's 0.374)
        "sweep.fraction": "0.75",
    },
    "compare": {"compare": lambda: f"[{','.join(load_params().objectives)}]"},  # one seed: about those checkpoints
    # The default run at the scale it had before it was fitted to a 2-core CPU (docs/running.md#the-default-run-and-
    # what-runs-at-full-scale); its last run is commit ae6f459's dvc.lock and metrics.
    "full": {
        **SWEEP,
        "compare": "[mlm,wwm]",
        "pretrain.token_budget": "9500000",
        "finetune.seeds": "[1,2,3]",
        "finetune.seed_workers": "3",
        "tasks.lcqmc.data.limit": "{train:2000,dev:1000}",
        "tasks.msra_ner.data.limit": "{train:1500,dev:500}",
        "tasks.msra_ner.training.epochs": "12",  # 1,500 sentences: more steps an epoch than the default's 800
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
UNITS = ("study", "compare")  # run as units whose results live in git; full as one experiment
COPIED = ("reports/report.md", "reports/report.html", "reports/figures", "reports/variance.json", "metrics")


def uncommitted() -> list[str]:
    """Tracked files with changes git has not committed (what ``dvc exp run`` would include)."""
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                         check=True).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


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
        # the first k overrides for k = 1..n, so that an error names its override, each set at once as the units'
        # workspaces apply them: one round trip through ruamel (a second misplaced the comment after a list
        # it emptied, e.g. finetune.baselines=[], into invalid YAML)
        for k, override in enumerate(overrides, 1):
            shutil.copyfile(PARAMS_FILE, copy)
            try:
                apply_overrides(copy, overrides[:k])
            except InvalidArgumentError as exc:  # DVC's message names neither the key nor the reason
                reason = str(exc.__cause__ or exc).splitlines()[0]
                raise ParamsError(f"-S {override}: {reason} (Hydra's override syntax: a key of {PARAMS_FILE}, "
                                  "++key=value to add one)") from None
        try:
            return load_params(copy)
        except ParamsError as exc:
            raise ParamsError(f"{str(exc).replace(str(copy), PARAMS_FILE)} (with the study's -S "
                              f"{' -S '.join(overrides)})") from None


def _positive(text: str) -> int:
    """``--workers``: a whole number of at least 1 (0 ran as 1 worker)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of workers (a whole number, at least 1)")
    return int(text)


def plan_text(which: str, units: list[Unit], state: dict[str, bool], study: Path, params: Params) -> str:
    """The study's plan before it starts: each unit, done or its estimated minutes, and the total."""
    rows, todo = [], 0.0
    for u in units:
        minutes = estimate_minutes(u, study, units, params)
        todo += 0.0 if state[u.name] else minutes
        rows.append(f"  {u.name:<24} {len(u.stages):>3} stages  " + ("done" if state[u.name] else f"~{minutes:.0f} min"))
    n = sum(state.values())
    return "\n".join([f"{which}: {n} of {len(units)} units done; the rest about {todo / 60:.1f} h on this machine",
                      *rows])


def report(which: str, study: Path, units: list[Unit], params_text: str) -> None:
    """The study's report from its committed units alone (``study/metrics``), ending with how the study ran,
    with ``params.yaml`` (the study's params), ``variance.json``, ``study.json`` (each unit's minutes, commit
    and machine; the units of each commit) and the MDE planner's plan for a 1-point MDE; each written
    atomically."""
    from tasks.report.html import to_html
    from tasks.report.report import TITLE, Inputs, build_report

    with atomic_outputs(study / "params.yaml") as (tmp,):
        tmp.write_text(params_text, encoding="utf-8")
    params = load_params(study / "params.yaml")
    records = {u.name: read_unit(study, u) for u in units}
    inputs = Inputs(metrics=study / "metrics", predictions=None, attributions=study / "attributions",
                    params_file=study / "params.yaml")
    with atomic_outputs(study / "report.md", study / "report.html", study / "figures", study / "variance.json",
                        study / "study.json") as (md, html, figures, variance, summary):
        by_commit = _by_commit(records)
        text = build_report.fn(params, figures, study, inputs, variance=variance) + _units_section(by_commit)
        md.write_text(text, encoding="utf-8")
        html.write_text(to_html(text.replace("](figures/", f"]({figures.name}/"), study, f"{TITLE}: {which}"),
                        encoding="utf-8")
        summary.write_text(to_json({
            "study": which, "units": len(units),
            "unit_minutes": round(sum(r["wall_sec"] for r in records.values()) / 60, 1),
            "by_unit": {n: {k: r[k] for k in ("kind", "wall_sec", "prefix_sec", "commit", "finished", "machine")}
                        for n, r in records.items()},
            "by_commit": by_commit}), encoding="utf-8")
    plan([str(study), "--target", "1.0"])


def _by_commit(records: dict[str, dict]) -> dict[str, dict]:
    """The units grouped by the commit they ran at (a stop of a study run over sessions runs at one commit):
    their names, minutes and machines, in the order they finished."""
    out: dict[str, dict] = {}
    for name, r in sorted(records.items(), key=lambda item: item[1]["finished"]):
        group = out.setdefault(r["commit"], {"units": [], "minutes": 0.0, "machines": []})
        group["units"].append(name)
        group["minutes"] = round(group["minutes"] + r["wall_sec"] / 60, 1)
        if r["machine"] not in group["machines"]:
            group["machines"].append(r["machine"])
    return out


def _units_section(by_commit: dict[str, dict]) -> str:
    """The report's last section: how the study ran, a row per commit its units ran at (a stop)."""
    from tasks.core.machine import describe
    from tasks.report.common import table

    rows = [[commit, str(len(g["units"])), ", ".join(g["units"]), f"{g['minutes']:.1f}",
             "; ".join(describe(m) for m in g["machines"])] for commit, g in by_commit.items()]
    units, minutes = sum(len(g["units"]) for g in by_commit.values()), sum(g["minutes"] for g in by_commit.values())
    stops = len(by_commit)
    return (f"\n## How the study ran\n\n{units} units in {stops} stop{'s' * (stops != 1)} (the commits they ran at), "
            f"{minutes:.1f} unit-minutes in all (each unit's own in `study.json`).\n\n"
            + table(["commit", "units", "which", "minutes", "machine"], rows))


def run_study(which: str, params: dict, checked: Params, workers: int, study: Path, plan_only: bool = False) -> int:
    """:mod:`tasks.orchestration.units`: print the plan, run the units not done (``plan_only``: none), and when
    all are done build the report from the committed ones."""
    overrides, units = _flags(params)[1::2], plan_units(checked)
    with left_behind_removed():
        with workspace(WORKSPACES / f"{which}-check", study, overrides, units) as check:
            params_text = (check / "params.yaml").read_text(encoding="utf-8")
            state = done(check, study, units)
    print(plan_text(which, units, state, study, checked), flush=True)
    todo = [u for u in units if not state[u.name]]
    if plan_only:
        return 0
    with left_behind_removed():
        run_units(study, todo, units, overrides, workers, sys.stdout, which)
    report(which, study, units, params_text)
    print(f"{which}: {len(units)} of {len(units)} units done; report, metrics and plan in {study}/ (commit them)")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="study", description="make study / compare / full (module docstring)")
    parser.add_argument("which", nargs="?", choices=list(STUDIES), default="study")
    parser.add_argument("--workers", type=_positive, default=1, help="units of work at once (study and compare)")
    parser.add_argument("--out", type=Path, help="where the report goes (default: reports/<which>)")
    parser.add_argument("--plan", action="store_true", help="print the plan (units done, minutes of the rest) only")
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
    params = {**{k: v() if callable(v) else v for k, v in STUDIES[which].items()}, **overrides}
    try:
        checked = check_params(params)
    except ParamsError as exc:
        print(f"study: {exc}", file=sys.stderr)
        return 2
    threads, cores = checked.pretrain.threads, len(os.sched_getaffinity(0))
    if workers > 1 and (threads or cores) * workers > cores:  # measured: 2 x 2 threads on 2 cores, 1.74x slower
        print(f"study: {workers} workers x pretrain.threads {threads or cores} > {cores} cores: the pretrainings "
              f"side by side will thrash; -S pretrain.threads={max(1, cores // workers)} fits them (its models then "
              "differ from the default run's in their last bits, so its cache serves them no longer)", file=sys.stderr)
    if which in UNITS:
        return run_study(which, params, checked, workers, out_dir, args.plan)
    name = time.strftime(f"{which}-%Y%m%d-%H%M%S")
    t0 = time.time()
    with left_behind_removed():
        out = _run(["dvc", "exp", "run", "--temp", "--name", name, *_flags(params), *argv], sys.stdout)
    wall = time.time() - t0
    with atomic_outputs(out_dir) as (folder,):
        copy_experiment(name, folder)
        (folder / "study.json").write_text(to_json({
            "experiment": name, "params": params, "wall_sec": round(wall, 1),
            "stages_run": sorted(ran_stages(out))}), encoding="utf-8")
    plan([str(out_dir), "--target", "1.0"])
    print(f"{which}: {wall / 3600:.2f} h; experiment {name} (dvc exp show; dvc exp push <remote> {name}); report, "
          f"metrics and plan in {out_dir}/")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except PipelineError as exc:  # a damaged unit record, a unit naming a stage dvc.yaml lacks
        print(f"study: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("study: stopped; its temporary workspace is removed (what its stages finished stays in DVC's run cache)",
              file=sys.stderr)
        sys.exit(130)
