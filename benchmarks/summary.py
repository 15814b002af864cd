"""Write ``benchmarks/README.md`` from ``benchmarks/results/*.json``: each benchmark's purpose (the
first paragraph of its module docstring), the machine it ran on, its settings and its figures,
so that no figure is typed by hand (``make bench`` runs this last; a test checks the file is
current).

Usage::

    python benchmarks/summary.py            # rewrite benchmarks/README.md
    python benchmarks/summary.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
from tasks.core.machine import describe  # noqa: E402
from tasks.orchestration.code_deps import _imports, import_closure  # noqa: E402  (after the path)
RESULTS = HERE / "results"
README = HERE / "README.md"
LONG = {"study_workers": "a reduced study run twice, about 75 minutes of both cores",
        "bf16": "nine whole pretraining runs (three sides x three initialisations), about 45 minutes of both cores"}
"""Benchmarks too long to retake in the stop whose change made them stale (beside its default run and tests):
such a result stays marked *older than the code it measures* here and in the test's skip until a stop retakes it,
as a GPU result does until a GPU is lent. Every other CPU result must be retaken with the change."""

HEAD = """# Benchmarks

Speed and memory, each measured against a peer in the same process (the Hugging Face way, a
naive implementation or a library) and given as a ratio. `make bench` runs them all (after
`make repro`, whose artifacts most of them read) and writes each one's
figures to `benchmarks/results/<name>.json`, with the commit and the machine they were taken on:
compare timings only between runs on the same machine. A result is written only when the files it
runs are committed (else its figures are printed), and one whose code changed in a later commit is
marked *older than the code it measures*, which fails `make test` for a CPU result (rerun it with the
change and commit both). This page is generated from those files by
`python benchmarks/summary.py`; run one benchmark alone with `python benchmarks/<name>.py`.
"""


def _purpose(name: str) -> str:
    source = HERE / f"{name}.py"
    doc = ast.get_docstring(ast.parse(source.read_text(encoding="utf-8"))) if source.exists() else None
    return (doc or "").split("\n\n")[0].replace("\n", " ")


def measured_code(name: str) -> list[str]:
    """The files a benchmark runs: its module and the import closure of the project modules it imports."""
    source = HERE / f"{name}.py"
    if not source.exists():
        return []
    closure = {source.relative_to(ROOT)}
    for module in _imports(ast.parse(source.read_text(encoding="utf-8"))):
        closure |= import_closure(ROOT, module)
    return sorted(str(p) for p in closure)


def changed_since(result: Path, name: str) -> list[str] | None:
    """The measured files (:func:`measured_code`) changed in commits after the one that last wrote ``result``
    (results are committed with the change they measure); None where git cannot tell (no history, or the
    result not committed yet)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()

    try:
        written = git("log", "-1", "--format=%H", "--", str(result.relative_to(ROOT)))
        return git("diff", "--name-only", written, "HEAD", "--", *measured_code(name)).split() if written else None
    except (OSError, subprocess.CalledProcessError):
        return None


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else str(value)


def _is_flat(value) -> bool:
    return isinstance(value, dict) and bool(value) and not any(isinstance(v, dict) for v in value.values())


def _table(figures: dict, label: str = "") -> list[str]:
    """Scalars as a figure/value table; dicts of scalars as one table (a row each); deeper dicts
    under a bold label of their own, recursively."""
    scalars = {k: v for k, v in figures.items() if not isinstance(v, dict)}
    flat = {k: v for k, v in figures.items() if _is_flat(v)}
    deep = {k: v for k, v in figures.items() if isinstance(v, dict) and not _is_flat(v)}
    lines = []
    if scalars:
        lines += ["| figure | value |", "|---|---|", *(f"| {k} | {_cell(v)} |" for k, v in scalars.items()), ""]
    if flat:
        columns = list(dict.fromkeys(c for row in flat.values() for c in row))
        lines += ["| | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
        lines += [f"| {name} | " + " | ".join(_cell(row[c]) if c in row else "" for c in columns) + " |"
                  for name, row in flat.items()]
        lines.append("")
    for name, value in deep.items():
        lines += [f"**{label}{name}**", "", *_table(value, f"{label}{name} / ")]
    return lines


def _machine(machine: dict) -> str:
    """The machine a result was taken on, in one line (older results lack the Python and ISA fields)."""
    python = f"Python {machine['python']}, " if machine.get("python") else ""
    return (f"{describe(machine)}, {python}torch {machine.get('torch')} "
            f"({machine.get('threads')} threads), GPU: {machine.get('gpu') or 'none'}")


def render() -> str:
    """The whole page."""
    lines = [HEAD]
    for path in sorted(RESULTS.glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        name, machine = result["benchmark"], result["machine"]
        changed = changed_since(path, name)
        lines += [f"## {name}", "", _purpose(name), "",
                  *([f"**Older than the code it measures**: {len(changed)} of its files changed since these figures "
                     f"were committed ({', '.join(changed[:4])}{', …' if len(changed) > 4 else ''}); rerun "
                     f"`python benchmarks/{name}.py`.", ""] if changed else []),
                  f"Commit: {result.get('commit') or 'not recorded'}. Machine: {_machine(machine)}. "
                  f"Settings: {', '.join(f'{k} {_cell(v)}' for k, v in result.get('settings', {}).items())}.", "",
                  *_table(result["figures"])]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if benchmarks/README.md is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = README.read_text(encoding="utf-8") if README.exists() else ""
        if current != text:
            print("benchmarks/README.md is out of date: run python benchmarks/summary.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(text, encoding="utf-8")
    print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
