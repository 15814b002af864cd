"""A git + DVC repository of the project's code with a shrunk params.yaml, and the commands
the end-to-end tests run in it."""

import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

from tests.e2e.trace_site.params_trace import ENV as PARAMS_TRACE, IMPLIED, PRETRAIN_ONLY, compare as compare_params
from tests.conftest import ROOT


def run(cmd: list[str], repo: Path, env: dict) -> str:
    """Run ``cmd`` in ``repo``; its stdout, or a failed assertion with the output's tail."""
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def lock_outs(repo: Path) -> dict[str, str]:
    """Every output of ``dvc.lock`` and its md5."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {out["path"]: out["md5"] for stage in lock["stages"].values() for out in stage.get("outs", [])}


TRACE_SITE = Path(__file__).parent / "trace_site"  # its sitecustomize wraps load_params in every stage


def params_trace(repo: Path) -> Path:
    """Where the stages run in ``repo`` record the params keys they read (``trace_site/params_trace.py``)."""
    return repo.with_name(f"{repo.name}-params-read.jsonl")


# What the held-out measure reads for Mac alone (tasks.pretraining.objectives.mac): curves and
# sweep declare them for every objective, since a foreach stage cannot vary its params by objective;
# curves reads only replacement.similar of any other objective's block.
MAC_ONLY = ("segment", "pretraining_data.ngram_probabilities")


def params_problems(repo: Path) -> dict[str, tuple[list[str], list[str]]]:
    """``{stage: (params it reads but does not declare, declared params it never reads)}`` for every
    stage of ``dvc.lock`` that ran in ``repo`` (empty when each stage declares exactly what it reads);
    a stage that depends on the whole of ``params.yaml`` (the report, which shows it) reads anything."""
    read: dict[str, set[str]] = {}
    for line in params_trace(repo).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        read.setdefault(" ".join(["python -m", record["module"], *record["args"]]), set()).update(record["keys"])
    raw = yaml.safe_load((repo / "params.yaml").read_text(encoding="utf-8"))
    # looking a model name up in an empty hub_models (these params declare none) reads the whole,
    # empty mapping; with a hub model declared (params.yaml's albert_tiny) the lookup reads only
    # hub_models.<name>.training, which finetune_baseline declares
    lookup = set() if raw.get("hub_models") else {"hub_models"}
    problems = {}
    for name, stage in yaml.safe_load((repo / "dvc.lock").read_text(encoding="utf-8"))["stages"].items():
        if any(dep["path"] == "params.yaml" for dep in stage.get("deps", [])):
            continue
        unread_ok = {f"objectives.{name.split('@')[1].rsplit('-', 1)[0]}.{key}" for key in PRETRAIN_ONLY + IMPLIED} \
            if name.startswith("pretraining_data@") else set()
        if name.startswith(("sweep@", "pretrain@")):  # a pretrain knob every sweep setting overrides is not read
            settings = [set(s) for s in raw["sweep"]["settings"].values()]
            unread_ok |= {f"pretrain.{key}" for key in set.intersection(*settings)} if settings else set()
        if name.startswith(("sweep@", "curves@")):  # Mac's held-out corruption: read for similar-word objectives only
            objective = name.split("@")[1].rsplit("-", 1)[0] if name.startswith("curves@") else name.split("@")[1]
            if not raw["objectives"][objective]["replacement"].get("similar"):
                unread_ok |= set(MAC_ONLY) | ({f"objectives.{objective}"} if name.startswith("curves@") else set())
        declared = set(stage.get("params", {}).get("params.yaml", {}))
        missing, over = compare_params(declared, read.get(stage["cmd"], set()) - lookup,  # stage code reads none
                                       raw, unread_ok)
        if missing or over:
            problems[name] = sorted(missing), sorted(over)
    return problems


def write_params(repo: Path, params: dict) -> None:
    (repo / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")


@contextmanager
def reproduced(repo: Path, params: dict, prefect_api: str, targets: tuple[str, ...] = ()
               ) -> Iterator[tuple[dict, str]]:
    """Create ``repo`` (the code, ``dvc.yaml``, ``.dvcignore`` and ``params``), run ``dvc repro`` in it under the
    Prefect server at ``prefect_api``, as ``make repro`` does; yields the environment the commands
    ran with and the output."""
    for name in ("tasks", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dvc.yaml", repo)
    write_params(repo, params)
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": os.pathsep.join([str(TRACE_SITE), str(repo)]),
           PARAMS_TRACE: str(params_trace(repo))}
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        run(cmd, repo, env)
    shutil.copy(ROOT / ".dvcignore", repo)  # the project's: code folders' caches (bytecode, Numba) are not deps
    yield env, run(["dvc", "repro", *targets], repo, env)
