"""The committed run is this commit's run: every stage of ``dvc.yaml`` is in ``dvc.lock`` with the code
(its fingerprint; stage ``code``: ``tasks`` and ``flows``) and the params of this checkout, so the
committed ``metrics/`` and report are what this code computes and a second ``make repro`` does nothing.
A change to a stage's code or params fails here until the default run is rerun and its ``dvc.lock``,
``metrics/`` and fingerprints are committed with it (docs/reproducibility.md). Data deps are not
compared: a fresh clone has none, and DVC's hashes of the outputs are what ``make pull`` restores."""

import contextlib
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tasks.orchestration.code_deps import FINGERPRINTS, PACKAGES
from tests.conftest import ROOT

CODE = (f"{FINGERPRINTS.name}/", *PACKAGES)


def stale_deps(root: Path) -> dict[str, list[str]]:
    """``{stage: what differs from dvc.lock}``: its code deps and params keys (``params.yaml:<key>``), a
    changed command, or ``not in dvc.lock``; by DVC's own status of the stages, data deps left out."""
    from dvc.repo import Repo

    with contextlib.chdir(root), Repo(".") as repo:  # stage names as in the repository, not the cwd
        stages = {s.addressing for s in repo.index.stages}
        status = repo.status()
    lock = yaml.safe_load((root / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    stale = {name: ["not in dvc.lock"] for name in stages - set(lock)}
    for name, entries in status.items():
        found = []
        for entry in entries:
            if entry == "changed command":
                found.append(entry)
            elif isinstance(entry, dict):
                deps = entry.get("changed deps", {})
                found += [path for path in deps if path.startswith(CODE)]
                params = deps.get("params.yaml", {})  # keys, or "modified" for a stage that reads the whole file
                found += [f"params.yaml:{key}" for key in params] if isinstance(params, dict) else \
                    [f"params.yaml ({params})"] if params else []
        if found and name not in stale:
            stale[name] = found
    return stale


def test_the_committed_lock_is_this_checkouts_run():
    stale = stale_deps(ROOT)
    assert stale == {}, ("dvc.lock is not this code's and params' run; rerun the default run (`make repro`) and "
                         f"commit dvc.lock, metrics/ and fingerprints/ with the change: {stale}")


def test_a_one_line_edit_is_seen(tmp_path):
    """The check can fail: a copy of the checkout with one line added to a module fine-tuning imports."""
    for name in ("tasks", "flows", "fingerprints", ".dvc"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "tmp", "cache"))
    for name in ("dvc.yaml", "dvc.lock", "params.yaml", ".dvcignore"):
        shutil.copy(ROOT / name, tmp_path / name)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert stale_deps(tmp_path) == stale_deps(ROOT)  # the copy is the checkout
    with (tmp_path / "tasks" / "downstream" / "ner.py").open("a", encoding="utf-8") as f:
        f.write("# one line\n")
    assert stale_deps(tmp_path)["code"] == ["tasks"]
    subprocess.run([sys.executable, "-m", "tasks.orchestration.code_deps", "--fingerprint"], cwd=tmp_path, check=True,
                   capture_output=True)  # what stage code does first in a repro
    stale = stale_deps(tmp_path)
    assert stale["finetune@mlm-42-msra_ner"] == ["fingerprints/finetune.txt"] and "ingest" not in stale
    params = yaml.safe_load((tmp_path / "params.yaml").read_text(encoding="utf-8"))
    params["finetune"]["training"]["epochs"] += 1
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    assert "params.yaml:finetune.training" in stale_deps(tmp_path)["finetune@mlm-42-sentiment"]
