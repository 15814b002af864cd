"""The params reference, ``docs/params.md``, generated from the schema: every knob of ``params.yaml``
with its type, default and description (each field's ``Field(description=...)``; a section's is its
model's docstring), the research knobs of a section apart from its infrastructure knobs (those marked
``json_schema_extra=INFRASTRUCTURE``: processes, devices, shards, logging), so that a knob is
documented in one place, next to its validation.

Usage::

    python -m tasks.core.params.reference           # rewrite docs/params.md
    python -m tasks.core.params.reference --check   # exit 1 if it is out of date (a test runs this)
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from tasks.core.params import Params

DOC = Path("docs/params.md")
HEAD = """# Parameters

Every knob of `params.yaml`, generated from its schema (`tasks/core/params/`) by
`python -m tasks.core.params.reference`: its type, default (*required*: `params.yaml` must give it) and
meaning. In each section the research knobs (what a result is) come first, then the infrastructure
knobs (how it is computed: processes, devices, shards, logging), which never change a result's
meaning and, where they change its bits (threads, processes), say so. `<name>` stands for a key of
your choosing. Why the default run uses the values it does: [running.md](running.md).
"""


def _type(annotation) -> str:
    """A short readable type: ``int``, ``'a' | 'b'``, ``list[str]``, ``null | float``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join("null" if a is type(None) else _type(a) for a in args)
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(_type(a) for a in args)}]"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "*required*"
    value = field.default_factory() if field.default_factory is not None else field.default
    if isinstance(value, BaseModel):
        value = value.model_dump()
    return "null" if value is None else f"`{value}`" if value != "" else '`""`'


def _models(annotation) -> list[type[BaseModel]]:
    """The schema models inside a field's type (a model, a list or mapping of them, a union of them)."""
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _path(prefix: str, name: str, annotation) -> str:
    """The dotted path of what a field holds: ``tasks.<name>`` for a mapping, ``inputs[i]`` for a list."""
    path = f"{prefix}.{name}" if prefix else name
    origin = typing.get_origin(typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated
                               else annotation)
    return f"{path}.<name>" if origin is dict else f"{path}[i]" if origin is list else path


def _infrastructure(field: FieldInfo, model: type[BaseModel]) -> bool:
    marks = [field.json_schema_extra, model.model_config.get("json_schema_extra")]
    return any(isinstance(m, dict) and m.get("infrastructure") for m in marks)


def _plain(text: str) -> str:
    """Docstring or description text as one Markdown table-safe line (reST roles and literals as code)."""
    text = re.sub(r":(?:mod|func|class|meth|attr|data):`~?([^`]+)`", r"`\1`", " ".join(text.split()))
    parts = text.replace("``", "`").replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def _doc(model: type[BaseModel]) -> str:
    """The first paragraph of a model's own docstring ("" without one)."""
    doc = model.__doc__ and inspect.cleandoc(model.__doc__)
    return _plain(doc.split("\n\n")[0]) if doc else ""


def _paths(path: str, model: type[BaseModel], found: dict[type[BaseModel], list[str]]) -> None:
    """Every model of the schema with the paths it sits at, in the order of ``params.yaml``."""
    found.setdefault(model, [])
    if path in found[model]:
        return
    found[model].append(path)
    for name, field in model.model_fields.items():
        for inner in _models(field.annotation):
            _paths(_path(path, name, field.annotation), inner, found)


def _section(model: type[BaseModel], paths: list[str]) -> list[str]:
    """A model's section: where it sits, what it is, its research knobs, then its infrastructure ones."""
    rows: dict[bool, list[str]] = {False: [], True: []}
    for name, field in model.model_fields.items():
        held = _models(field.annotation)
        description = _plain(field.description or "") or (_doc(held[0]) if len(held) == 1 else "")
        rows[_infrastructure(field, model)].append(
            f"| `{name}` | {_type(field.annotation)} | {_default(field)} | {description} |")
    lines = [f"## {model.__name__}", "", "At " + ", ".join(f"`{p}`" for p in paths) + "." if paths[0] else
             "The top level of `params.yaml`.", ""]
    if paths[0] and _doc(model):
        lines += [_doc(model), ""]
    for infrastructure in (False, True):
        if rows[infrastructure]:
            lines += (["Infrastructure:", ""] if infrastructure and rows[False] else []) + [
                "| knob | type | default | meaning |", "|---|---|---|---|", *rows[infrastructure], ""]
    return lines


def render() -> str:
    """The whole page."""
    found: dict[type[BaseModel], list[str]] = {}
    _paths("", Params, found)
    lines = [HEAD]
    for model, paths in found.items():
        lines += _section(model, paths)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {DOC} is out of date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.is_file() or DOC.read_text(encoding="utf-8") != text:
            print(f"{DOC} is out of date: run python -m tasks.core.params.reference", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
