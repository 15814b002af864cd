"""Helpers shared by the report sections: number formatting, the one Markdown table
helper, reading metrics files, and saving figures (matplotlib, Agg backend)."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import TypeVar

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tasks.core.metrics.base import Metrics, read_metrics  # noqa: E402
from tasks.report.templating import ENV  # noqa: E402

M = TypeVar("M", bound=Metrics)


def json_number(value: float) -> float | None:
    """``value`` as a JSON number; None where it is NaN (JSON has none: a variance component one seed
    cannot estimate, an MDE under 3 replicates)."""
    return None if math.isnan(value) else float(value)


def fmt(value, digits: int = 2, percent: bool = False) -> str:
    """A number for a table cell; ``-`` for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if percent:
        return f"{100 * value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table: the only place the report builds one."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


ENV.filters["fmt"] = fmt  # templates format numbers as table cells do: {{ x | fmt(1, true) }}


def read_csv(path: Path) -> list[dict]:
    """Rows of a numeric CSV log; empty cells (e.g. no sentence loss) are ``None``."""
    with open(path, newline="") as f:
        return [{k: float(v) if v != "" else None for k, v in row.items()} for row in csv.DictReader(f)]


def load_metrics(path: Path, model: type[M]) -> M | None:
    """The metrics file at ``path`` as ``model``, or ``None`` when its stage has not run.

    Raises:
        MetricsError: the file does not match ``model``.
    """
    return read_metrics(path, model) if path.is_file() else None


def missing_inputs(stage: str = "report", root: str = ".") -> list[str]:
    """The outputs of ``dvc.yaml``'s stages that lie under one of ``stage``'s deps (the metrics, results
    and data the report reads) but are not on disk, each as ``"<path> (stage <name>)"``: what a report
    built now would silently leave out (DVC tracks the report's deps as whole folders, so it does not
    order the stages that write into them before it)."""
    from dvc.repo import Repo  # 0.6 s: only the report stage asks

    with Repo(root) as repo:
        stages = repo.index.stages
        deps = [Path(root, d.def_path) for s in stages if s.name == stage for d in s.deps]
        return [f"{Path(o.def_path)} (stage {s.name})" for s in stages if s.name != stage
                for o in s.outs if (path := Path(root, o.def_path)) and not path.exists()
                and any(path == d or d in path.parents for d in deps)]


def loaded(metrics: Path, model: type[M], names: list[str]) -> dict[str, M]:
    """``name -> metrics`` of the per-item stage whose files ``model`` describes
    (``metrics/<kind>/<name>.json``), for the names that have run."""
    found = {n: load_metrics(metrics / model.kind() / f"{n}.json", model) for n in names}
    return {n: v for n, v in found.items() if v is not None}


def save_figure(fig, path: Path) -> Path:
    """Write ``fig`` as PNG, cropped to its content, and free it (pyplot keeps open figures alive)."""
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def save_bars(fig, ax, ylabel: str, path: Path) -> Path:
    """Finish and save a bar chart: y label, horizontal grid, legend."""
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
