"""A git + DVC repository of the project's code with a shrunk params.yaml, and the commands
the end-to-end tests run in it."""

import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import yaml

from tests.conftest import ROOT


def run(cmd: list[str], repo: Path, env: dict) -> str:
    """Run ``cmd`` in ``repo``; its stdout, or a failed assertion with the output's tail."""
    proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def ran_stages(output: str) -> set[str]:
    """The stages a ``dvc repro`` output says it ran."""
    return set(re.findall(r"Running stage '([^']+)'", output))


def lock_outs(repo: Path) -> dict[str, str]:
    """Every output of ``dvc.lock`` and its md5."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text())
    return {out["path"]: out["md5"] for stage in lock["stages"].values() for out in stage.get("outs", [])}


def write_params(repo: Path, params: dict) -> None:
    (repo / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")


@contextmanager
def reproduced(repo: Path, params: dict, prefect_api: str) -> Iterator[tuple[dict, str]]:
    """Create ``repo`` (the code, ``dvc.yaml``, ``.dvcignore`` and ``params``), run ``dvc repro`` in it under the
    Prefect server at ``prefect_api``, as ``make repro`` does; yields the environment the commands
    ran with and the output."""
    for name in ("tasks", "flows"):
        shutil.copytree(ROOT / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dvc.yaml", repo)
    write_params(repo, params)
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PYTHONPATH": str(repo)}
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "config", "core.analytics", "false"]):
        run(cmd, repo, env)
    shutil.copy(ROOT / ".dvcignore", repo)  # the project's: code folders' caches (bytecode, Numba) are not deps
    yield env, run(["dvc", "repro"], repo, env)
