"""The code each stage runs, derived from its flow's imports: one fingerprint per stage, its dep in ``dvc.yaml``.

DVC reruns a stage when a declared dependency changes. A module a stage imports but does
not declare can change its results while DVC calls them up to date; a module it declares
but never imports reruns it for nothing (an hour of CPU for a full rerun). So a stage's code
is exactly its flow's *import closure*: every ``import``/``from … import`` of a
``tasks``/``flows`` module anywhere in a file (function-level imports included), plus the
``__init__.py`` of every package on the way, plus the resource files a module names (a
template named by a string literal, and the templates those extend or include).

One exception narrows the closure. Every stage validates the whole of ``params.yaml`` first, so
it imports every section's schema (``tasks/core/params/<section>.py``); yet an edit to a section's
schema can change only the results of stages that read that section (a stage that does not can at
worst refuse to start). A stage's closure therefore holds the schema modules of the params keys
it declares, and of the names its modules import from :mod:`tasks.core.params`, not the rest: an
edit to the compression schema reruns the compression stages, not ``ingest``.

**One fingerprint per stage.** Listing the closure's ~30 files as deps of every stage made
``dvc.lock`` 88% code entries, and DVC rewrites the whole lock after every stage
(treeverse/dvc#10629): seconds a stage, growing with the DAG. Instead stage ``code`` (which
depends on ``tasks`` and ``flows``, two entries) writes
``fingerprints/<stage>.txt``, the md5 and path of every file of the stage's closure, and each
stage depends on its fingerprint alone. An edit changes the fingerprints of exactly the stages
whose closure holds the file, so the rerun decisions are the same as with the files as deps.
The fingerprints are tracked by git (``cache: false``), so a fresh clone's ``dvc status`` is that
of the commit. A stage's params keys (which narrow its closure) are in ``dvc.yaml``, which DVC
refuses as a dep: after editing them, ``--write`` (the check below fails until then).

In ``dvc.yaml`` each stage's code dep follows a ``# code`` comment and comes before its
data deps; ``--write`` regenerates those lines and stage ``code``'s outputs there (never
touching anything else) and then the fingerprints.

Usage::

    python -m tasks.orchestration.code_deps               # a wrong code dep or a stale fingerprint: exit 1
    python -m tasks.orchestration.code_deps --write       # rewrite them in dvc.yaml, then the fingerprints
    python -m tasks.orchestration.code_deps --fingerprint # the fingerprints alone (the command of stage code)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import re
import sys
from pathlib import Path

import yaml

PACKAGES = ("tasks", "flows")
FINGERPRINTS = Path("fingerprints")
CODE_STAGE = "code"  # the stage that writes the fingerprints
FLOW_CMD = re.compile(r"python -m (flows\.\w+)")
CODE_MARK = re.compile(r"^(\s+)# code\b")
CODE_ITEM = re.compile(r"^\s+- (flows|tasks|fingerprints)(/|\s*$)")
OUTS_ITEM = re.compile(r"^\s+- fingerprints/")
_FILE_NAME = re.compile(r"[\w-]+(\.[\w-]+)+")
_QUOTED = re.compile(r"""["']([\w./-]+)["']""")


def module_path(root: Path, module: str) -> Path | None:
    """The file of a dotted ``tasks``/``flows`` module (``x.py`` or ``x/__init__.py``), relative to ``root``."""
    base = Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return None


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


def fingerprint(root: Path, closure: set[Path]) -> str:
    """The md5 and path of every file of ``closure``, one a line, sorted by path (DVC's md5 of a file)."""
    return "".join(f"{hashlib.md5((root / p).read_bytes()).hexdigest()}  {p.as_posix()}\n" for p in sorted(closure))


def fingerprint_file(stage: str) -> str:
    """Where stage ``stage``'s fingerprint is, as its dep in ``dvc.yaml``."""
    return (FINGERPRINTS / f"{stage}.txt").as_posix()


def _stages(root: Path, dvc_yaml: Path) -> dict[str, tuple[str, list[str], set[str]]]:
    """``{stage: (flow module, its code deps as declared, its top-level params keys)}`` for every
    stage of ``dvc_yaml`` but :data:`CODE_STAGE`.

    Raises:
        ValueError: a stage whose command runs no flow module that exists.
    """
    spec = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))
    stages = {}
    for name, stage in spec["stages"].items():
        if name == CODE_STAGE:
            continue
        body = stage.get("do", stage)
        match = FLOW_CMD.search(body["cmd"])
        if match is None or module_path(root, match.group(1)) is None:
            raise ValueError(f"{dvc_yaml}: stage {name}: cmd {body['cmd']!r} runs no flow module of this project")
        deps = [d if isinstance(d, str) else next(iter(d)) for d in body.get("deps", [])]
        keys = {k for p in body.get("params", []) for k in ([p] if isinstance(p, str) else next(iter(p.values())))}
        stages[name] = (match.group(1), [d for d in deps if d.split("/")[0] in (*PACKAGES, FINGERPRINTS.name)],
                        {k.split(".")[0] for k in keys})
    return stages


def fingerprints(root: Path, dvc_yaml: Path | None = None) -> dict[str, str]:
    """``{fingerprint file: its text}`` for every stage of ``dvc.yaml`` (:func:`fingerprint` of its closure)."""
    return {fingerprint_file(name): fingerprint(root, import_closure(root, flow, keys))
            for name, (flow, _, keys) in _stages(root, dvc_yaml or root / "dvc.yaml").items()}


def write_fingerprints(root: Path, dvc_yaml: Path | None = None) -> list[str]:
    """Write every stage's fingerprint (and remove those of stages that are gone); returns those that changed."""
    wanted = fingerprints(root, dvc_yaml)
    changed = [f for f, text in wanted.items() if not (root / f).is_file() or (root / f).read_text("utf-8") != text]
    (root / FINGERPRINTS).mkdir(exist_ok=True)
    for f in changed:  # atomically: a killed write leaves the old fingerprint, never half of one
        tmp = (root / f).with_suffix(".tmp")
        tmp.write_text(wanted[f], encoding="utf-8")
        os.replace(tmp, root / f)
    for old in (root / FINGERPRINTS).glob("*.txt") if (root / FINGERPRINTS).is_dir() else ():
        if old.relative_to(root).as_posix() not in wanted:
            old.unlink()
    return changed


def code_dep_problems(root: Path, dvc_yaml: Path | None = None) -> dict[str, dict[str, list[str]]]:
    """``{stage: {"missing": [...], "over_broad": [...], "stale": [...]}}`` for every stage of ``dvc.yaml``
    whose code dep is not exactly its fingerprint (a code file as a dep, or another stage's fingerprint),
    whose fingerprint is not stage ``code``'s output, or whose fingerprint file is not that of its
    closure today. Empty when every stage is exact."""
    dvc_yaml = dvc_yaml or root / "dvc.yaml"
    spec = yaml.safe_load(dvc_yaml.read_text(encoding="utf-8"))["stages"]
    written = {o if isinstance(o, str) else next(iter(o)) for o in spec.get(CODE_STAGE, {}).get("outs", [])}
    problems: dict[str, dict[str, list[str]]] = {}
    for name, (flow, deps, keys) in _stages(root, dvc_yaml).items():
        own = fingerprint_file(name)
        found = {"missing": [own] if own not in deps else [],
                 "over_broad": sorted(d for d in deps if d != own),
                 "stale": []}
        if own not in written:
            found["missing"].append(f"{own} as an output of stage {CODE_STAGE}")
        path = root / own
        if not path.is_file() or path.read_text("utf-8") != fingerprint(root, import_closure(root, flow, keys)):
            found["stale"].append(own)
        if any(found.values()):
            problems[name] = found
    return problems


def write_code_deps(root: Path, dvc_yaml: Path | None = None) -> list[str]:
    """Rewrite the code dep of every stage in ``dvc.yaml`` (the items after its ``# code`` comment) as its
    fingerprint, and stage ``code``'s outputs (after its ``outs:``) as every stage's; returns the stages
    that changed.

    Raises:
        ValueError: a stage has no ``# code`` comment in its deps, or there is no stage ``code``.
    """
    dvc_yaml = dvc_yaml or root / "dvc.yaml"
    names = list(_stages(root, dvc_yaml))
    lines = dvc_yaml.read_text(encoding="utf-8").splitlines(keepends=True)
    out, stage, changed, marked = [], None, [], set()
    i = 0
    while i < len(lines):
        line = lines[i]
        top = re.match(r"^  (\w+):", line)
        if top:
            stage = top.group(1)
        mark = CODE_MARK.match(line) if stage in names else re.match(r"^(\s+)outs:", line) if stage == CODE_STAGE \
            else None
        out.append(line)
        i += 1
        if mark:
            marked.add(stage)
            old = []
            while i < len(lines) and (CODE_ITEM if stage in names else OUTS_ITEM).match(lines[i]):
                old.append(lines[i])
                i += 1
            indent = mark.group(1) + ("" if stage in names else "  ")
            new = [f"{indent}- {fingerprint_file(stage)}\n"] if stage in names else \
                [f"{indent}- {fingerprint_file(n)}: {{cache: false}}\n" for n in names]
            out.extend(new)
            if new != old:
                changed.append(stage)
    unmarked = {*names, CODE_STAGE} - marked
    if unmarked:
        raise ValueError(f"{dvc_yaml}: no '# code' comment in the deps of (or no stage) {', '.join(sorted(unmarked))}")
    dvc_yaml.write_text("".join(out), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the code deps of dvc.yaml, then the fingerprints")
    mode.add_argument("--fingerprint", action="store_true", help="write the fingerprints (stage code's command)")
    args = parser.parse_args(argv)
    root = Path(".")
    if args.write:
        changed = write_code_deps(root)
        print(f"dvc.yaml: code deps rewritten for {', '.join(changed)}" if changed else "dvc.yaml: code deps exact")
    if args.write or args.fingerprint:
        written = write_fingerprints(root)
        print(f"fingerprints written: {', '.join(written)}" if written else "fingerprints unchanged")
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
