"""What the sentence(-pair) split readers share: kept records, the split table, malformed-record reports, CSV lines.

The readers (:func:`tasks.downstream.glue.read_glue` for GLUE TSV,
:func:`tasks.downstream.clue.read_clue_jsonl` for CLUE JSON lines,
:func:`tasks.downstream.tables.read_table` for tables with named columns) return a
prepared split in the schema of :mod:`tasks.downstream.classification` (``id``,
``text_a``, ``text_b`` (null for single-sentence tasks), ``label``: int64 class
index, or float64 score for regression, see
:func:`tasks.downstream.classification.split_schema`). Texts go through
:func:`tasks.core.text.normalise`, as every downstream text does. Malformed records are
reported to an :class:`~tasks.core.quality.Issues` (the ``malformed:`` policy) with
``where = "<file>:<line>"`` (``"<file>#row<n>"`` for Arrow/Parquet rows); none of
the problems the readers find has a repair, so under ``repair`` they are skipped too,
and counted.

Here: :class:`SplitRows` gathers the kept records and builds the split table, with
the label strings in its schema metadata (read back by :func:`table_labels`);
:func:`drop` reports a record that has no repair; :func:`csv_lines`,
:func:`csv_header` and :func:`csv_problem` serve the readers built on :mod:`csv`
(GLUE TSV, CSV tables), whose field size limit stays at csv's default
(:data:`FIELD_LIMIT`).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.io import numbered_lines
from tasks.core.quality import Issues
from tasks.core.text import normalise


SPLIT_SCHEMA = pa.schema([("id", pa.string()), ("text_a", pa.string()), ("text_b", pa.string()),
                          ("label", pa.int64())])
REGRESSION_SPLIT_SCHEMA = SPLIT_SCHEMA.set(3, pa.field("label", pa.float64()))


def split_schema(regression: bool = False) -> pa.Schema:
    """:data:`REGRESSION_SPLIT_SCHEMA` for regression tasks, else :data:`SPLIT_SCHEMA`."""
    return REGRESSION_SPLIT_SCHEMA if regression else SPLIT_SCHEMA


def table_labels(table: pa.Table) -> list[str] | None:
    """The label strings (in class-index order) a loader stored in ``table``'s schema metadata."""
    meta = table.schema.metadata or {}
    return json.loads(meta[b"labels"]) if b"labels" in meta else None


def drop(issues: Issues, where: str, kind: str, detail: str) -> None:
    """Report a record that has no repair; under every policy that continues, it is dropped."""
    repair = issues.found(where, kind, detail, repairable=False)
    assert not repair  # nothing to repair: Issues only asks for repairs of repairable problems


class SplitRows:
    """The records a reader keeps, in source order, and the prepared split they make.

    Attributes:
        pair: whether records have a ``text_b`` (else the column is all null).
        regression: float labels (:func:`tasks.downstream.classification.split_schema`).
        ids, a, b, labels: the columns so far (``b`` holds ``None`` when not ``pair``).
    """

    def __init__(self, pair: bool, regression: bool = False):
        self.pair, self.regression = pair, regression
        self.ids: list[str] = []
        self.a: list[str] = []
        self.b: list[str | None] = []
        self.labels: list = []

    def add(self, id_: str, a: str | None, b: str | None, label, where: str, issues: Issues) -> None:
        """Keep a record with its normalised text(s), or drop it (reported as malformed, ``text``)
        when one is empty or null."""
        a = normalise(a or "")
        b = normalise(b or "") if self.pair else None
        problem = "text_a is empty or null" if not a else "text_b is empty or null" if self.pair and not b else None
        if problem:
            drop(issues, where, "text", problem)
            return
        self.ids.append(id_)
        self.a.append(a)
        self.b.append(b)
        self.labels.append(label)

    def table(self, label_list: list[str] | None = None) -> pa.Table:
        """The kept records as a split table; ``label_list`` (class-index order) goes into its metadata."""
        schema = split_schema(self.regression)
        if label_list is not None:
            schema = schema.with_metadata({"labels": json.dumps(label_list, ensure_ascii=False)})
        return pa.table({"id": self.ids, "text_a": self.a,
                         "text_b": self.b if self.pair else pa.nulls(len(self.ids), pa.string()),
                         "label": self.labels}, schema=schema)


FIELD_LIMIT = 131072  # csv's default, set explicitly: the corpus reader raises the process-wide limit


def csv_lines(path: Path) -> Iterator[str]:
    """Decoded lines of ``path`` with their line endings, as ``csv`` wants them."""
    csv.field_size_limit(FIELD_LIMIT)
    return (line for _, line in numbered_lines(path, keep_ends=True))


def csv_problem(exc: csv.Error, quoted: bool) -> str:
    """What :mod:`csv` could not read, in words. Its field size limit (131072 characters)
    is kept on purpose: no model reads a text that long, so such a field means a
    broken file (with quoting, a quote left open runs on to the end of the file)."""
    if "field larger than field limit" not in str(exc):
        return str(exc)
    return (f"a field longer than {csv.field_size_limit()} characters, the csv limit"
            + ("; is a quote left open?" if quoted else ""))


def csv_header(reader: Iterator[list[str]], path: Path, expected: str, quoted: bool) -> list[str]:
    """The column names of the first line of ``reader``, stripped of white space.

    Raises:
        SourceError: the file is empty (the message says ``expected`` was
            wanted) or :mod:`csv` cannot read the line.
    """
    try:
        return [h.strip() for h in next(reader)]
    except StopIteration:
        raise SourceError(f"{path}: empty file, expected {expected}") from None
    except csv.Error as exc:
        raise SourceError(f"{path}:1: unreadable header ({csv_problem(exc, quoted=quoted)})") from None
