"""The base classes of the metrics models and their one writer and one reader.

A field is written when it was given: :func:`write_metrics` dumps with
``exclude_unset``, so a model built from a stage's values writes exactly those keys
(a value given as ``None`` stays, as ``null``), and a model read from a file writes
exactly that file's keys back. A field without a default must be in every file; a
field declared ``= absent()`` is one that some runs do not write (an older run, another
task family, an option that was off): it reads ``None`` when not given, and ``null`` is
no valid value for it unless its type says ``| None``. (A field whose absence means a
known value has that value as default instead, e.g. ``Dropped.empty_records = 0``.)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tasks.core.errors import MetricsError
from tasks.core.io import to_json

M = TypeVar("M", bound="Metrics")


def absent() -> Any:
    """The default of a field some files do not have (module docstring): ``None``, not validated."""
    return Field(default=None)


class Record(BaseModel):
    """A block of a metrics file: every key declared (extra keys refused), types checked
    without coercion (``"3"`` is not an integer, ``1`` is not ``true``); the docstring under
    a field is its description (unit, scale)."""

    model_config = ConfigDict(extra="forbid", strict=True, use_attribute_docstrings=True)

    def to_dict(self) -> dict[str, Any]:
        """The keys that were given, as plain Python values (what :func:`write_metrics` writes)."""
        return self.model_dump(exclude_unset=True)


class Metrics(Record):
    """The whole of one metrics file; ``file`` is its path under ``metrics/`` (``<name>``
    stands for the stage's item: an objective, a task, a model, a mixture)."""

    file: ClassVar[str]

    @classmethod
    def kind(cls) -> str:
        """The first part of ``file`` without ``.json``: ``finetune`` for ``finetune/<model>-<task>.json``."""
        return cls.file.split("/")[0].removesuffix(".json")


def write_metrics(path: str | os.PathLike, metrics: Metrics) -> None:
    """Write ``metrics`` to ``path`` as :func:`tasks.core.io.to_json` text (sorted keys, two-space
    indent, floats as Python's ``repr``), directly; wrap in :func:`tasks.core.io.atomic_outputs`."""
    Path(path).write_text(to_json(metrics.to_dict()), encoding="utf-8")


def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _problem(error: dict) -> str:
    where = _where(error["loc"])
    kind = error["type"]
    if kind == "missing":
        return f"missing field {where}"
    if kind == "extra_forbidden":
        return f"unknown field {where}"
    if kind == "json_invalid":
        return f"not valid JSON ({error['ctx']['error']})"
    got = repr(error.get("input"))
    got = got if len(got) <= 40 else got[:37] + "..."
    return f"field {where or '(top level)'}: {error['msg'].lower()}, got {got}"


def parse_metrics(text: str, model: type[M], source: str | os.PathLike) -> M:
    """``text`` (the JSON of a metrics file) as ``model``.

    Raises:
        MetricsError: one line naming ``source``, the first field at fault and the model.
    """
    try:
        return model.model_validate_json(text)
    except ValidationError as exc:
        errors = exc.errors()
        more = f"; {len(errors) - 1} more problem(s)" if len(errors) > 1 else ""
        raise MetricsError(f"{os.fspath(source)}: {_problem(errors[0])} ({model.__name__}{more})") from None


def read_metrics(path: str | os.PathLike, model: type[M]) -> M:
    """The metrics file at ``path`` as ``model``.

    Raises:
        MetricsError: the file does not match ``model`` (one line: file, field, model).
    """
    return parse_metrics(Path(path).read_text(encoding="utf-8"), model, path)
