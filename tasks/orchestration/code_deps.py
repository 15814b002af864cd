"""The code each stage runs, derived from its flow's imports, checked against ``dvc.yaml``.

DVC reruns a stage only when a declared dependency changes, so a module that a stage
imports but does not declare can change results while DVC calls them up to date. This
module derives a flow's import closure statically (every ``import``/``from … import``
of a ``tasks``/``flows`` module anywhere in a file, function-level imports included,
plus the ``__init__.py`` of every package on the way) and lists the files of that
closure that no ``deps`` entry of the stage covers (a dep covers itself and, if it is a
folder, everything below it).

Usage::

    python -m tasks.orchestration.code_deps          # prints what is missing; exit 1 if anything is
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

PACKAGES = ("tasks", "flows")
FLOW_CMD = re.compile(r"python -m (flows\.\w+)")


def module_path(root: Path, module: str) -> Path | None:
    """The file of a dotted ``tasks``/``flows`` module (``x.py`` or ``x/__init__.py``), relative to ``root``."""
    base = Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def _imported_modules(root: Path, file: Path) -> set[str]:
    tree = ast.parse((root / file).read_text(encoding="utf-8"), filename=str(file))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            # ``from tasks.core import paths`` imports the module tasks.core.paths
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def import_closure(root: Path, module: str) -> set[Path]:
    """Every project file that importing ``module`` executes (relative paths)."""
    seen: set[Path] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        for i in range(1, len(parts) + 1):
            path = module_path(root, ".".join(parts[:i]))
            if path is not None and path not in seen:
                seen.add(path)
                todo.extend(_imported_modules(root, path))
    return seen


def _covered(path: Path, deps: list[str]) -> bool:
    return any(path == Path(d) or Path(d) in path.parents for d in deps)


def missing_code_deps(root: Path, dvc_yaml: Path | None = None) -> dict[str, list[str]]:
    """``{stage: [files its flow imports that its deps miss]}`` for every stage of ``dvc.yaml``
    whose command runs a flow (``python -m flows.<name>``). Empty when every stage is complete.

    Raises:
        ValueError: a stage whose command runs no flow module that exists.
    """
    spec = yaml.safe_load((dvc_yaml or root / "dvc.yaml").read_text(encoding="utf-8"))
    missing: dict[str, list[str]] = {}
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        match = FLOW_CMD.search(body["cmd"])
        if match is None or module_path(root, match.group(1)) is None:
            raise ValueError(f"dvc.yaml: stage {name}: cmd {body['cmd']!r} runs no flow module of this project")
        deps = [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]
        lacking = sorted(str(p) for p in import_closure(root, match.group(1)) if not _covered(p, deps))
        if lacking:
            missing[name] = lacking
    return missing


def main() -> None:
    missing = missing_code_deps(Path("."))
    for stage, files in missing.items():
        print(f"{stage}: missing deps {', '.join(files)}")
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
