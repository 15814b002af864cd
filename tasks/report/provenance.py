"""Where the report's numbers come from: the git commit, the data versions DVC recorded
in ``dvc.lock``, and report section "What changed since the last commit"."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tasks.report.common import fmt, table
from tasks.report.finetune import as_fractions


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance(lock_file: Path = Path("dvc.lock")) -> dict:
    """Git commit (and whether the tree has uncommitted changes) and the content
    hashes DVC recorded for every stage output in ``dvc.lock``."""
    outs = {}
    if lock_file.is_file():
        lock = yaml.safe_load(lock_file.read_text()) or {}
        for stage in (lock.get("stages") or {}).values():
            for out in stage.get("outs", []):
                outs[out["path"]] = out.get("md5") or out.get("hash", "")
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit or "(no commit)", "dirty": dirty, "outs": outs}


def data_versions(prov: dict) -> str:
    """The ``dvc.lock`` hashes as a table; empty before the first ``dvc repro``."""
    outs = [[f"`{path}`", f"`{md5}`"] for path, md5 in sorted(prov["outs"].items())]
    return table(["artifact", "md5"], outs) if outs else ""


def previous_metrics(path: Path, rev: str = "HEAD") -> dict | None:
    """The committed version of a metrics file at ``rev``, if any (for "what changed")."""
    text = _git("show", f"{rev}:{path.as_posix()}")
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def changes_section(results: dict) -> str:
    """Dev headline scores now vs the committed metrics at HEAD, as a table; empty
    when nothing is committed to compare with."""
    rows = []
    for (m, t), now in sorted(results.items()):
        before = previous_metrics(Path("metrics") / "finetune" / f"{m}-{t}.json")
        before = as_fractions(before) if before else None
        h = now["headline"]
        if before and "dev" in before and h in before["dev"]:
            a, b = now["dev"][h]["mean"], before["dev"][h]["mean"]
            rows.append([f"{m} / {t} dev {h} (mean)", fmt(b, 2, True), fmt(a, 2, True), f"{100 * (a - b):+.2f}"])
    return table(["metric", "HEAD", "this run", "change"], rows) if rows else ""

