"""Sentence(-pair) classification and regression data in tables with named columns: the reader.

**Tables** with named columns (Arrow feather, Parquet, CSV), e.g. the LCQMC
question pairs (Liu et al. 2018, COLING) of the ``minidata`` package (``label``, ``s1``, ``s2``), read by
:func:`read_table` into a prepared split (the schema, text normalisation and
malformed-record reports are those of :mod:`tasks.downstream.records`). Arrow and
Parquet files are read with ``pyarrow``; CSV with :mod:`csv` (its default,
Excel dialect: commas, ``"`` quoting; a header line), keeping the line of each
record so that problems are reported where they stand.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.core.quality import Issues
from tasks.downstream.records import SplitRows, csv_header, csv_lines, csv_problem, drop

_INTEGER = re.compile(r"[+-]?[0-9]+")


def _class_index(value) -> int | None:
    """``value`` as a non-negative class index, or None when it is not one."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        number = int(value.strip())
    else:
        return None
    return number if number >= 0 else None


def _real(value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


@dataclass(frozen=True)
class _BadRow:
    """Stands for the values of a CSV row with the wrong number of columns."""

    got: int
    expected: int


def _read_csv(path: Path, columns: list[str]) -> tuple[dict[str, list], list[str]]:
    """Columns of a CSV file with a header line (values as strings) and the ``where`` of each row."""
    reader = csv.reader(csv_lines(path))
    header = csv_header(reader, path, "a header line", quoted=True)
    missing = [c for c in columns if c not in header]
    if missing:
        raise SourceError(f"{path}:1: no column(s) {', '.join(map(repr, missing))} (has {', '.join(header)})")
    positions = [header.index(c) for c in columns]
    out: dict[str, list] = {c: [] for c in columns}
    wheres = []
    # Rows with the wrong column count get a _BadRow in every column, so that they
    # are reported in order with the rest.
    while True:
        first = reader.line_num + 1  # a quoted field may span lines: name the line its record starts on
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise SourceError(f"{path}:{first}: unreadable CSV record ({csv_problem(exc, quoted=True)})") from None
        if not row:
            continue
        wheres.append(f"{path}:{reader.line_num}")
        if len(row) != len(header):
            for c in columns:
                out[c].append(_BadRow(len(row), len(header)))
            continue
        for c, p in zip(columns, positions):
            out[c].append(row[p])
    return out, wheres


def read_table(path: Path, text_a: str, text_b: str | None, label: str, issues: Issues, *,
               regression: bool = False, prefix: str | None = None) -> pa.Table:
    """A table with named columns as a prepared split: Arrow feather (``.ft``,
    ``.feather``, ``.arrow``), Parquet (``.parquet``, ``.pq``) or CSV (``.csv``, with a
    header line).

    ``label`` must hold class indices: integers >= 0 (integral floats and decimal
    strings are accepted), or with ``regression=True`` finite real numbers.
    Row ids are ``"<prefix or file stem>-<n>"`` with ``n`` the 0-based data row.

    Malformed records (reported to ``issues`` with ``where`` = ``file:line`` for
    CSV, ``file#row<n>`` otherwise; never repaired): ``text`` (a null or empty
    text), ``label`` (null, negative or not an integer; for regression not a
    number), ``columns`` (a CSV row whose column count differs from the header's).

    Raises:
        SourceError: an unknown format, a missing column, a non-text text column,
            an unreadable file (for CSV also a field over the csv limit of 131072
            characters, usually an unclosed quote), invalid UTF-8 (naming the file,
            and the line for CSV); under ``fail``, the first malformed record.
    """
    path = Path(path)
    columns = [c for c in (text_a, text_b, label) if c is not None]
    suffix = path.suffix.lower()
    if suffix == ".csv":
        data, wheres = _read_csv(path, columns)
    elif suffix in (".ft", ".feather", ".arrow", ".parquet", ".pq"):
        try:
            table = pq.read_table(path) if suffix in (".parquet", ".pq") else feather.read_table(path)
            missing = [c for c in columns if c not in table.column_names]
            if missing:
                raise SourceError(f"{path}: no column(s) {', '.join(map(repr, missing))} "
                                  f"(has {', '.join(table.column_names)})")
            table = table.select(columns)
            table.validate(full=True)  # invalid UTF-8 in a string column
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as exc:
            raise SourceError(f"{path}: unreadable table ({exc})") from None
        for c in (text_a, text_b):
            if c is not None and not (pa.types.is_string(table.schema.field(c).type)
                                      or pa.types.is_large_string(table.schema.field(c).type)):
                raise SourceError(f"{path}: column {c!r} is {table.schema.field(c).type}, not text")
        data = {c: table.column(c).to_pylist() for c in columns}
        wheres = [f"{path}#row{i}" for i in range(table.num_rows)]
    else:
        raise SourceError(f"{path}: unknown table format {suffix!r} (use .ft/.feather/.arrow, .parquet/.pq "
                          "or .csv)")
    rows = SplitRows(pair=text_b is not None, regression=regression)
    b_column = data[text_b] if text_b is not None else [None] * len(wheres)
    for n, (where, a, b, value) in enumerate(zip(wheres, data[text_a], b_column, data[label])):
        if isinstance(a, _BadRow):
            drop(issues, where, "columns", f"{a.got} columns, expected {a.expected}")
            continue
        number = _real(value) if regression else _class_index(value)
        if number is None:
            drop(issues, where, "label", f"label {value!r} is not "
                 + ("a finite number" if regression else "a class index (an integer >= 0)"))
            continue
        rows.add(f"{prefix or path.stem}-{n}", a, b, number, where, issues)
    return rows.table()
