"""The code each stage runs, derived from its flow's imports: written into ``dvc.yaml`` and checked.

DVC reruns a stage when a declared dependency changes. A module a stage imports but does
not declare can change its results while DVC calls them up to date; a module it declares
but never imports reruns it for nothing (an hour of CPU for a full rerun). So a stage's code
deps are exactly its flow's *import closure*: every ``import``/``from … import`` of a
``tasks``/``flows`` module anywhere in a file (function-level imports included), plus the
``__init__.py`` of every package on the way, plus the resource files a module names (a
template named by a string literal, and the templates those extend or include). A folder
stands for its files when the closure holds every one of them (bytecode caches aside).

One exception narrows the closure. Every stage validates the whole of ``params.yaml`` first, so
it imports every section's schema (``tasks/core/params/<section>.py``); yet an edit to a section's
schema can change only the results of stages that read that section (a stage that does not can at
worst refuse to start). A stage's code deps therefore hold the schema modules of the params keys
it declares, and of the names its modules import from :mod:`tasks.core.params`, not the rest: an
edit to the compression schema reruns the compression stages, not ``ingest``.

In ``dvc.yaml`` each stage's code deps follow a ``# code`` comment and come before its
data deps; ``--write`` regenerates them there and never touches anything else.

Usage::

    python -m tasks.orchestration.code_deps            # missing or over-broad code deps: exit 1
    python -m tasks.orchestration.code_deps --write    # rewrite them in dvc.yaml
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import yaml

PACKAGES = ("tasks", "flows")
FLOW_CMD = re.compile(r"python -m (flows\.\w+)")
CODE_MARK = re.compile(r"^(\s+)# code\b")
CODE_ITEM = re.compile(r"^\s+- (flows|tasks)(/|\s*$)")
_FILE_NAME = re.compile(r"[\w-]+(\.[\w-]+)+")
_QUOTED = re.compile(r"""["']([\w./-]+)["']""")


def module_path(root: Path, module: str) -> Path | None:
    """The file of a dotted ``tasks``/``flows`` module (``x.py`` or ``x/__init__.py``), relative to ``root``."""
    base = Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


def _visible_files(root: Path, folder: Path) -> set[Path]:
    """The files under ``folder`` whose content DVC hashes (bytecode caches are in ``.dvcignore``)."""
    return {p.relative_to(root) for p in (root / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}


def _resource_dirs(root: Path) -> list[Path]:
    """Folders of the project's packages that hold no Python module: templates and the like."""
    return sorted(p.relative_to(root) for package in PACKAGES for p in (root / package).rglob("*")
                  if p.is_dir() and p.name != "__pycache__" and not any(p.glob("*.py")))


def _file_names(tree: ast.AST) -> set[str]:
    """The string literals of a module that could name a file (``"report.md.j2"``)."""
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and _FILE_NAME.fullmatch(node.value)}


def _resources(root: Path, named: set[str], dirs: list[Path]) -> set[Path]:
    """The files of ``dirs`` that ``named`` names, and those they name in turn (``{% extends "x" %}``)."""
    found: set[Path] = set()
    todo = [d / name for d in dirs for name in named if (root / d / name).is_file()]
    while todo:
        path = todo.pop()
        if path not in found:
            found.add(path)
            text = (root / path).read_text(encoding="utf-8", errors="replace")
            todo.extend(path.parent / m for m in _QUOTED.findall(text) if (root / path.parent / m).is_file())
    return found


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            # ``from tasks.core import paths`` imports the module tasks.core.paths
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {m for m in found if m.split(".")[0] in PACKAGES}


PARAMS = "tasks.core.params"


def import_closure(root: Path, module: str, params_keys: set[str] | None = None) -> set[Path]:
    """Every project file that importing ``module`` executes or reads (relative paths): its
    modules, and the resource files they name (module docstring).

    Args:
        params_keys: the top-level ``params.yaml`` keys a stage declares. Given, the schema modules
            of the other sections are left out (module docstring); ``None`` follows every import.
    """
    by_name = _params_exports(root) if params_keys is not None else {}
    sections = _section_modules(root, by_name)
    schemas = set(sections.values())
    wanted = {sections[key] for key in params_keys or () if key in sections}
    seen: set[Path] = set()
    named: set[str] = set()
    todo = [module]
    while todo:
        parts = todo.pop().split(".")
        # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        for i in range(1, len(parts) + 1):
            path = module_path(root, ".".join(parts[:i]))
            if path is not None and path not in seen:
                seen.add(path)
                tree = ast.parse((root / path).read_text(encoding="utf-8"), filename=str(path))
                imports = _imports(tree)
                if params_keys is not None:
                    if ".".join(parts[:i]) == PARAMS:  # its sections' schemas: only those the stage reads
                        imports = {m for m in imports if not any(m == s or m.startswith(s + ".") for s in schemas)}
                    wanted |= {by_name[n] for n in _names_from(tree, PARAMS) if n in by_name}
                todo.extend(imports)
                named |= _file_names(tree)
        if not todo:
            todo.extend(m for m in wanted if module_path(root, m) not in seen)
    return seen | _resources(root, named, _resource_dirs(root))


def _params_exports(root: Path) -> dict[str, str]:
    """``{name: section module}`` for the names :mod:`tasks.core.params` imports from its sections."""
    path = module_path(root, PARAMS)
    if path is None:
        return {}
    tree = ast.parse((root / path).read_text(encoding="utf-8"))
    return {alias.asname or alias.name: node.module for node in tree.body if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith(PARAMS + ".") for alias in node.names}


def _section_modules(root: Path, exports: dict[str, str]) -> dict[str, str]:
    """``{top-level params key: the module of its schema}`` from the annotations of ``Params``
    (keys of plain types, such as ``seed``, have none); ``exports``: :func:`_params_exports`."""
    if not exports:
        return {}
    tree = ast.parse((root / module_path(root, PARAMS)).read_text(encoding="utf-8"))
    params = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Params"), None)
    out = {}
    for field in params.body if params else ():
        if isinstance(field, ast.AnnAssign) and isinstance(field.target, ast.Name):
            modules = {exports[n.id] for n in ast.walk(field.annotation) if isinstance(n, ast.Name) and n.id in exports}
            out.update({field.target.id: m for m in modules})
    return out


def _names_from(tree: ast.AST, module: str) -> set[str]:
    """The names a module imports with ``from <module> import ...``."""
    return {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 0
            and node.module == module for alias in node.names}


def minimal_deps(root: Path, closure: set[Path]) -> list[str]:
    """``closure`` as dep entries: a folder wherever the closure holds all its files, sorted."""
    folders = sorted({parent for path in closure for parent in path.parents if parent != Path(".")},
                     key=lambda p: len(p.parts))
    whole: list[Path] = []
    for folder in folders:
        if not any(w in folder.parents for w in whole) and _visible_files(root, folder) <= closure:
            whole.append(folder)
    singles = [p for p in closure if not any(w in p.parents for w in whole)]
    return sorted(str(p) for p in [*whole, *singles])


def _stages(root: Path, dvc_yaml: Path) -> dict[str, tuple[str, list[str], set[str]]]:
    """``{stage: (flow module, its code deps as declared, its top-level params keys)}`` for every
    stage of ``dvc_yaml``.

    Raises:
        ValueError: a stage whose command runs no flow module that exists.
    """
    spec = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))
    stages = {}
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        match = FLOW_CMD.search(body["cmd"])
        if match is None or module_path(root, match.group(1)) is None:
            raise ValueError(f"{dvc_yaml}: stage {name}: cmd {body['cmd']!r} runs no flow module of this project")
        deps = [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]
        keys = {k for p in body.get("params", []) for k in ([p] if isinstance(p, str) else next(iter(p.values())))}
        stages[name] = (match.group(1), [d for d in deps if d.split("/")[0] in PACKAGES],
                        {k.split(".")[0] for k in keys})
    return stages


def code_dep_problems(root: Path, dvc_yaml: Path | None = None) -> dict[str, dict[str, list[str]]]:
    """``{stage: {"missing": [...], "over_broad": [...]}}`` for every stage of ``dvc.yaml`` whose
    code deps are not exactly its flow's import closure: files it imports that no dep covers,
    and deps covering a file it does not import (a folder: the files it does not import).
    Empty when every stage is exact."""
    problems: dict[str, dict[str, list[str]]] = {}
    for name, (flow, deps, keys) in _stages(root, dvc_yaml or root / "dvc.yaml").items():
        closure = import_closure(root, flow, keys)
        covered = {f for d in deps for f in ({Path(d)} if (root / d).is_file() else _visible_files(root, Path(d)))}
        missing = sorted(str(p) for p in closure - covered)
        over = sorted(str(p) for p in covered - closure)
        if missing or over:
            problems[name] = {"missing": missing, "over_broad": over}
    return problems


def write_code_deps(root: Path, dvc_yaml: Path | None = None) -> list[str]:
    """Rewrite the code deps of every stage in ``dvc.yaml`` (the items after its ``# code``
    comment) as :func:`minimal_deps` of its flow's closure; returns the stages that changed.

    Raises:
        ValueError: a stage has no ``# code`` comment in its deps.
    """
    dvc_yaml = dvc_yaml or root / "dvc.yaml"
    flows = {name: (flow, keys) for name, (flow, _, keys) in _stages(root, dvc_yaml).items()}
    lines = dvc_yaml.read_text(encoding="utf-8").splitlines(keepends=True)
    out, stage, changed, marked = [], None, [], set()
    i = 0
    while i < len(lines):
        line = lines[i]
        top = re.match(r"^  (\w+):", line)
        if top:
            stage = top.group(1)
        if re.match(r"^\s+<<: \*", line):  # inherits another stage's definition, its code deps included
            marked.add(stage)
        mark = CODE_MARK.match(line)
        out.append(line)
        i += 1
        if mark and stage in flows:
            marked.add(stage)
            old = []
            while i < len(lines) and CODE_ITEM.match(lines[i]):
                old.append(lines[i])
                i += 1
            new = [f"{mark.group(1)}- {d}\n" for d in minimal_deps(root, import_closure(root, *flows[stage]))]
            out.extend(new)
            if new != old:
                changed.append(stage)
    unmarked = set(flows) - marked
    if unmarked:
        raise ValueError(f"{dvc_yaml}: no '# code' comment in the deps of {', '.join(sorted(unmarked))}")
    dvc_yaml.write_text("".join(out), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the code deps of dvc.yaml")
    args = parser.parse_args(argv)
    root = Path(".")
    if args.write:
        changed = write_code_deps(root)
        print(f"dvc.yaml: code deps rewritten for {', '.join(changed)}" if changed else "dvc.yaml: code deps exact")
        return 0
    problems = code_dep_problems(root)
    for stage, found in problems.items():
        for kind, files in found.items():
            if files:
                print(f"{stage}: {kind.replace('_', '-')} code deps {', '.join(files)}")
    if problems:
        print("run `python -m tasks.orchestration.code_deps --write` to make them exact", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
