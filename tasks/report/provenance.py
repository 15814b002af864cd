"""Where the report's numbers come from: the git commit, the data versions DVC recorded
in ``dvc.lock``, and report section "What changed since the last commit"."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

from tasks.core.errors import MetricsError
from tasks.core.metrics.base import parse_metrics
from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.core.paths import METRICS
from tasks.report.common import fmt, table
from tasks.report.finetune import as_fractions
from tasks.report.statistics import from_runs


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


def previous_metrics(path: Path, rev: str = "HEAD") -> FinetuneMetrics | None:
    """The committed version of a fine-tuning metrics file at ``rev`` (for "what changed");
    ``None`` when none is committed, or when it does not match today's model (a run of
    other code: nothing to compare with)."""
    text = _git("show", f"{rev}:./{Path(os.path.relpath(path)).as_posix()}")
    try:
        return parse_metrics(text, FinetuneMetrics, f"{rev}:{path.as_posix()}") if text else None
    except MetricsError:
        return None


def changes_section(results: dict[tuple[str, str], FinetuneMetrics], metrics: Path = METRICS) -> str:
    """Headline scores of this run vs the committed version of the same metrics files (``metrics``: the
    default run's, or a study's folder) at HEAD, each difference with its 95% interval over the fine-tuning
    seeds (Welch: the runs of the two commits are independent), as a table of the scores that changed and a
    line counting those identical; empty when nothing is committed to compare with. Under
    :data:`~tasks.report.statistics.MIN_REPLICATES` runs a side the row gives the difference alone.

    On the machine that produced the committed metrics, a rerun of unchanged code gives the same
    numbers ("identical"); on another machine training is not bitwise reproducible (BLAS kernels,
    CPU/GPU), so a score there should differ within noise.
    """
    rows, identical = [], 0
    for (m, t), now in sorted(results.items()):
        before = previous_metrics(metrics / "finetune" / f"{m}-{t}.json")
        before = as_fractions(before) if before else None
        h = now.headline
        for split in ("dev", "test"):
            if not before or h not in before.summary(split) or h not in now.summary(split):
                continue
            a, b = now.summary(split)[h], before.summary(split)[h]
            if a == b:
                identical += 1
                continue
            runs_a = [100 * getattr(r, split)[h] for r in now.runs]
            runs_b = [100 * getattr(r, split)[h] for r in before.runs]
            if min(len(runs_a), len(runs_b)) < 2:
                change, verdict = f"{100 * (a.mean - b.mean):+.2f}", "one run: no interval"
            else:
                c = from_runs(runs_a, runs_b, paired=False)
                change = f"{c.difference:+.2f}" + ("" if c.withheld else f" [{c.low:+.2f}, {c.high:+.2f}]")
                verdict = {"better": "higher", "worse": "lower"}.get(c.verdict, c.verdict)
            rows.append([f"{m} / {t} {split} {h} (mean)", fmt(b.mean, 2, True), fmt(a.mean, 2, True), change, verdict])
    parts = [table(["metric", "HEAD", "this run", "change, points [95% CI]", "verdict"], rows)] if rows else []
    if identical:
        parts.append(f"{identical} of {identical + len(rows)} scores identical to HEAD's.")
    return "\n\n".join(parts)
