"""CLUE sentence(-pair) classification data: the JSON-lines reader.

**CLUE** (Xu et al. 2020, "CLUE: A Chinese Language Understanding Evaluation
Benchmark", COLING): one JSON object a line (AFQMC ``{"sentence1", "sentence2",
"label": "0"}``, TNEWS ``{"label": "102", "label_desc", "sentence", ...}``,
CMNLI/OCNLI ``{"sentence1", "sentence2", "label": "entailment"}``), read by
:func:`read_clue_jsonl` into a prepared split (the schema, text normalisation and
malformed-record reports are those of :mod:`tasks.downstream.records`). The label
strings are numbered by their position in a given list, or in one inferred from
the file, and the list is stored in the split's metadata
(:func:`tasks.downstream.records.table_labels`).

CLUE classification tasks are scored by accuracy, as in the paper
(:func:`tasks.downstream.classification.score`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from tasks.core.io import numbered_lines
from tasks.core.quality import Issues
from tasks.downstream.records import SplitRows, drop


def _label_order(seen: set[str]) -> list[str]:
    """Numeric order when every label is a decimal integer ("2" before "10"), else string order."""
    if all(s.isdigit() for s in seen):
        return sorted(seen, key=lambda s: (int(s), s))
    return sorted(seen)


def read_clue_jsonl(path: Path, text_a: str, text_b: str | None, label: str, labels: list[str] | None,
                    issues: Issues, *, prefix: str | None = None) -> pa.Table:
    """A CLUE-style JSON-lines file (one object a line) as a prepared split.

    Labels are read as strings (a JSON integer ``3`` as ``"3"``) and numbered by
    their position in ``labels``. With ``labels=None`` the list is the set of
    labels seen in this file, in numeric order when all are decimal integers
    (TNEWS ``"100"``..``"116"`` -> 0..14), else sorted as strings. **A list
    inferred from one file need not match another's** (a class absent from dev
    shifts every later index): read train with ``labels=None`` if you must, take
    :func:`table_labels` of the result and pass it when reading dev and test, or
    better pass the task's documented list to all. Note that an inferred list also
    takes in placeholder labels such as OCNLI's ``"-"`` (no majority label); with
    an explicit list they are malformed.

    Row ids are ``"<prefix or file stem>-<line number>"``. The label list used is in
    the table's metadata (:func:`table_labels`).

    Malformed records (reported to ``issues``, never repaired): ``json`` (not a JSON
    object), ``field`` (a key missing, a text not a string, a label neither string
    nor integer), ``label`` (not in ``labels``), ``text`` (empty after
    normalisation).

    Raises:
        SourceError: a line is not UTF-8; under ``fail``, the first malformed record.
        ValueError: ``labels`` repeats a label.
    """
    path = Path(path)
    if labels is not None and len(set(labels)) != len(labels):
        raise ValueError(f"labels {labels} repeat a label")
    keys = [k for k in (text_a, text_b, label) if k is not None]
    rows = SplitRows(pair=text_b is not None)
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            drop(issues, where, "json", f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(obj, dict):
            drop(issues, where, "json", f"a JSON {type(obj).__name__}, not an object")
            continue
        missing = [k for k in keys if k not in obj]
        if missing:
            drop(issues, where, "field", f"no key(s) {', '.join(map(repr, missing))}")
            continue
        not_text = [k for k in (text_a, text_b) if k is not None and not isinstance(obj[k], str)]
        if not_text:
            drop(issues, where, "field", f"{', '.join(map(repr, not_text))} is not a string")
            continue
        value = obj[label]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            drop(issues, where, "field", f"label {value!r} is neither a string nor an integer")
            continue
        value = str(value).strip()
        if labels is not None and value not in labels:
            drop(issues, where, "label", f"label {value!r} is not one of {', '.join(labels)}")
            continue
        rows.add(f"{prefix or path.stem}-{number}", obj[text_a], obj[text_b] if text_b is not None else None, value,
                 where, issues)
    if labels is None:
        labels = _label_order(set(rows.labels))
    index = {token: i for i, token in enumerate(labels)}
    rows.labels = [index[value] for value in rows.labels]
    return rows.table(list(labels))
