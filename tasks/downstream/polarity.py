"""Loader ``polarity_lines``: one text a line, one file per label (e.g. ``pos.txt``, ``neg.txt``),
deduplicated into one single-sentence classification table
(:data:`tasks.downstream.records.SPLIT_SCHEMA`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from tasks.core.io import numbered_lines
from tasks.core.text import normalise
from tasks.downstream.records import SPLIT_SCHEMA


def read_polarity_lines(files: dict[int, Path]) -> list[tuple[str, int, str]]:
    """``(normalised text, label, origin)`` for every non-empty line of one-text-a-line files.

    Args:
        files: label -> file (e.g. ``{1: pos.txt, 0: neg.txt}``).
    Raises:
        SourceError: a file is not UTF-8 (names file and line).
    """
    out = []
    for label, path in sorted(files.items()):
        for number, line in numbered_lines(path):
            text = normalise(line)
            if text:
                out.append((text, label, f"{path.name}:{number}"))
    return out


def deduplicate(records: list[tuple[str, int, str]]) -> tuple[list[tuple[str, int]], dict]:
    """Collapse exact-duplicate texts; drop texts that occur with different labels.

    Returns:
        ``(examples, stats)``: unique ``(text, label)`` pairs sorted by text (so the
        result does not depend on file order), and counts of what was dropped.
    """
    labels: dict[str, set[int]] = {}
    for text, label, _ in records:
        labels.setdefault(text, set()).add(label)
    conflicts = sorted(t for t, ls in labels.items() if len(ls) > 1)
    examples = sorted((t, next(iter(ls))) for t, ls in labels.items() if len(ls) == 1)
    return examples, {"lines": len(records), "unique_texts": len(labels),
                      "duplicate_lines": len(records) - len(labels),
                      "conflicting_texts_dropped": len(conflicts), "examples": len(examples)}


def split_table(task: str, rows: list[tuple[str, int]]) -> pa.Table:
    """A single-sentence split as a :data:`SPLIT_SCHEMA` table (ids ``<task>-<n>``)."""
    return pa.table({"id": [f"{task}-{i:06d}" for i in range(len(rows))], "text_a": [t for t, _ in rows],
                     "text_b": pa.nulls(len(rows), pa.string()), "label": [label for _, label in rows]},
                    schema=SPLIT_SCHEMA)
