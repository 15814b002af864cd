"""Sentence(-pair) classification and regression data: GLUE and CLUE loaders, metrics.

Every loader returns a prepared split in the schema of :mod:`tasks.downstream.classification`
(``id``, ``text_a``, ``text_b`` (null for single-sentence tasks), ``label``: int64
class index, or float64 score for regression, see
:func:`tasks.downstream.classification.split_schema`). Texts go through
:func:`tasks.core.text.normalise`, as every downstream text does. Malformed records are
reported to an :class:`~tasks.core.quality.Issues` (the ``malformed:`` policy) with
``where = "<file>:<line>"`` (``"<file>#row<n>"`` for Arrow/Parquet rows); none of
the problems found here has a repair, so under ``repair`` they are skipped too,
and counted.

Sources:

* **GLUE** (Wang et al. 2019, "GLUE: A Multi-Task Benchmark and Analysis Platform
  for Natural Language Understanding", ICLR): the tab-separated ``train.tsv`` /
  ``dev.tsv`` files of the official distribution (MNLI: ``dev_matched.tsv`` and
  ``dev_mismatched.tsv``), layouts in :data:`GLUE_TASKS`, read by :func:`read_glue`.
  The test files carry no labels and are not read here.
* **CLUE** (Xu et al. 2020, "CLUE: A Chinese Language Understanding Evaluation
  Benchmark", COLING): one JSON object a line (AFQMC ``{"sentence1", "sentence2",
  "label": "0"}``, TNEWS ``{"label": "102", "label_desc", "sentence", ...}``,
  CMNLI/OCNLI ``{"sentence1", "sentence2", "label": "entailment"}``), read by
  :func:`read_clue_jsonl`.
* **Tables** with named columns (Arrow feather, Parquet, CSV), e.g. the LCQMC
  question pairs of the ``minidata`` package (``label``, ``s1``, ``s2``), read by
  :func:`read_table`.

Metrics are those of the papers: CoLA Matthews correlation; SST-2, MNLI (matched
and mismatched), QNLI, RTE, WNLI accuracy; MRPC and QQP accuracy and F1 of the
positive class; STS-B Pearson and Spearman correlation; CLUE classification tasks
accuracy. :func:`score` (from :mod:`tasks.downstream.classification`, the one implementation)
computes them.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

from tasks.core.errors import ParamsError, SourceError
from tasks.core.io import numbered_lines
from tasks.core.quality import Issues
from tasks.core.text import normalise
from tasks.downstream.classification import METRICS, score, split_schema

__all__ = ["GLUE_TASKS", "GlueTask", "METRICS", "glue_task", "read_clue_jsonl", "read_glue", "read_table",
           "score", "table_labels"]


@dataclass(frozen=True)
class GlueTask:
    """Layout of one GLUE task's labelled TSV files and how it is scored.

    Attributes:
        name: the GLUE directory name (``"SST-2"``).
        files: split -> file name inside the task directory.
        header: whether the first line names the columns; when it does, ``text_a``,
            ``text_b`` and ``label`` are header names and every row must have as many
            columns as the header, otherwise they are 0-based positions and rows must
            have ``columns`` columns.
        labels: the label strings as written in the files, in class-index order
            (the label of a row is its position here); ``None`` for regression.
        label_names: readable names of the classes, same order.
        metrics: names understood by :func:`score`; the first is the task's main one.
        score_range: the closed interval of a regression label.
    """

    name: str
    files: dict[str, str]
    header: bool
    text_a: str | int
    text_b: str | int | None
    label: str | int
    labels: tuple[str, ...] | None
    label_names: tuple[str, ...] | None
    metrics: tuple[str, ...]
    columns: int | None = None
    score_range: tuple[float, float] | None = None

    @property
    def regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        """``num_labels`` of the ``*ForSequenceClassification`` head (1: MSE regression)."""
        return 1 if self.labels is None else len(self.labels)


_TRAIN_DEV = {"train": "train.tsv", "dev": "dev.tsv"}
_NLI = ("entailment", "not_entailment")

# The layouts of the GLUE distribution (``download_glue_data.py``; the same files as
# Hugging Face ``datasets``' "glue" builder reads with ``csv.QUOTE_NONE``). Label
# orders follow the GLUE baselines / ``transformers`` GLUE processors, so MNLI is
# contradiction, entailment, neutral (``datasets`` numbers MNLI entailment, neutral,
# contradiction instead: convert predictions before comparing with it).
GLUE_TASKS: dict[str, GlueTask] = {t.name: t for t in (
    # No header: source code, label (0/1), original author's label ("*" or empty), sentence.
    GlueTask("CoLA", _TRAIN_DEV, header=False, columns=4, text_a=3, text_b=None, label=1,
             labels=("0", "1"), label_names=("unacceptable", "acceptable"), metrics=("matthews",)),
    # sentence, label
    GlueTask("SST-2", _TRAIN_DEV, header=True, text_a="sentence", text_b=None, label="label",
             labels=("0", "1"), label_names=("negative", "positive"), metrics=("accuracy",)),
    # Quality, #1 ID, #2 ID, #1 String, #2 String (the header may start with a BOM)
    GlueTask("MRPC", _TRAIN_DEV, header=True, text_a="#1 String", text_b="#2 String", label="Quality",
             labels=("0", "1"), label_names=("not_equivalent", "equivalent"), metrics=("accuracy", "f1")),
    # id, qid1, qid2, question1, question2, is_duplicate
    GlueTask("QQP", _TRAIN_DEV, header=True, text_a="question1", text_b="question2", label="is_duplicate",
             labels=("0", "1"), label_names=("not_duplicate", "duplicate"), metrics=("accuracy", "f1")),
    # index, genre, filename, year, old_index, source1, source2, sentence1, sentence2, score
    GlueTask("STS-B", _TRAIN_DEV, header=True, text_a="sentence1", text_b="sentence2", label="score",
             labels=None, label_names=None, metrics=("pearson", "spearman"), score_range=(0.0, 5.0)),
    # train: index, promptID, pairID, genre, sentence{1,2}_binary_parse, sentence{1,2}_parse,
    # sentence1, sentence2, label1, gold_label; dev_*: the same with label1..label5 before gold_label.
    GlueTask("MNLI", {"train": "train.tsv", "dev_matched": "dev_matched.tsv",
                      "dev_mismatched": "dev_mismatched.tsv"},
             header=True, text_a="sentence1", text_b="sentence2", label="gold_label",
             labels=("contradiction", "entailment", "neutral"),
             label_names=("contradiction", "entailment", "neutral"), metrics=("accuracy",)),
    # index, question, sentence, label
    GlueTask("QNLI", _TRAIN_DEV, header=True, text_a="question", text_b="sentence", label="label",
             labels=_NLI, label_names=_NLI, metrics=("accuracy",)),
    # index, sentence1, sentence2, label
    GlueTask("RTE", _TRAIN_DEV, header=True, text_a="sentence1", text_b="sentence2", label="label",
             labels=_NLI, label_names=_NLI, metrics=("accuracy",)),
    # index, sentence1, sentence2, label (1: the second sentence is entailed)
    GlueTask("WNLI", _TRAIN_DEV, header=True, text_a="sentence1", text_b="sentence2", label="label",
             labels=("0", "1"), label_names=("not_entailment", "entailment"), metrics=("accuracy",)),
)}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def glue_task(name: str) -> GlueTask:
    """The :data:`GLUE_TASKS` entry for ``name``, ignoring case and punctuation (``sst2``, ``STS-B``).

    Raises:
        ParamsError: not a GLUE task.
    """
    for task in GLUE_TASKS.values():
        if _key(task.name) == _key(name):
            return task
    raise ParamsError(f"unknown GLUE task {name!r}; known: {', '.join(GLUE_TASKS)}")


def table_labels(table: pa.Table) -> list[str] | None:
    """The label strings (in class-index order) a loader stored in ``table``'s schema metadata."""
    meta = table.schema.metadata or {}
    return json.loads(meta[b"labels"]) if b"labels" in meta else None


FIELD_LIMIT = 131072  # csv's default, set explicitly: the corpus reader raises the process-wide limit


def _lines(path: Path) -> Iterator[str]:
    """Decoded lines of ``path`` with their line endings, as ``csv`` wants them."""
    csv.field_size_limit(FIELD_LIMIT)
    return (line for _, line in numbered_lines(path, keep_ends=True))


def _csv_problem(exc: csv.Error, quoted: bool) -> str:
    """What :mod:`csv` could not read, in words. Its field size limit (131072 characters)
    is kept on purpose: no model reads a text that long, so such a field means a
    broken file (with quoting, a quote left open runs on to the end of the file)."""
    if "field larger than field limit" not in str(exc):
        return str(exc)
    return (f"a field longer than {csv.field_size_limit()} characters, the csv limit"
            + ("; is a quote left open?" if quoted else ""))


def _drop(issues: Issues, where: str, kind: str, detail: str) -> None:
    """Report a record that has no repair; under every policy that continues, it is dropped."""
    repair = issues.found(where, kind, detail, repairable=False)
    assert not repair  # nothing to repair: Issues only asks for repairs of repairable problems


def _table(ids: list[str], a: list[str], b: list[str | None] | None, labels: list, regression: bool,
           label_list: list[str] | None = None) -> pa.Table:
    schema = split_schema(regression)
    if label_list is not None:
        schema = schema.with_metadata({"labels": json.dumps(label_list, ensure_ascii=False)})
    return pa.table({"id": ids, "text_a": a, "text_b": pa.nulls(len(ids), pa.string()) if b is None else b,
                     "label": labels}, schema=schema)


def _texts(a: str | None, b: str | None, pair: bool, where: str, issues: Issues) -> tuple[str, str | None] | None:
    """The normalised text(s) of a record, or None (reported as malformed) when one is empty or null."""
    a = normalise(a or "")
    b = normalise(b or "") if pair else None
    problem = "text_a is empty or null" if not a else "text_b is empty or null" if pair and not b else None
    if problem:
        _drop(issues, where, "text", problem)
        return None
    return a, b


def read_glue(path: Path, task: str, issues: Issues) -> pa.Table:
    """A labelled GLUE TSV file (``train.tsv``, ``dev.tsv``, ...) as a prepared split.

    Read with :mod:`csv` (tab-delimited, ``quoting=csv.QUOTE_NONE``: GLUE texts hold
    unbalanced ``"``). Blank lines are not records. Row ids are
    ``"<task>-<file stem>-<line number>"`` (``"MNLI-dev_matched-17"``), stable and
    traceable to the source line. The table's metadata holds the task's label
    strings (:func:`table_labels`).

    Malformed records (reported to ``issues``, never repaired):

    * ``columns``: a row whose column count differs from the header's (or 4 for CoLA);
    * ``csv``: a line :mod:`csv` cannot split (a stray carriage return, a field
      over the csv limit of 131072 characters);
    * ``label``: a label not in the task's label list, or for STS-B not a number in
      [0, 5];
    * ``text``: a text empty after normalisation.

    Raises:
        SourceError: a line is not UTF-8, the file is empty, or its header lacks a
            needed column (the wrong task's file); under the ``fail`` policy, the
            first malformed record.
        ParamsError: ``task`` is not a GLUE task.
    """
    path = Path(path)
    spec = glue_task(task)
    reader = csv.reader(_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE)
    if spec.header:
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise SourceError(f"{path}: empty file, expected a {spec.name} header") from None
        except csv.Error as exc:
            raise SourceError(f"{path}:1: unreadable header ({_csv_problem(exc, quoted=False)})") from None
        wanted = [c for c in (spec.text_a, spec.text_b, spec.label) if c is not None]
        missing = [c for c in wanted if c not in header]
        if missing:
            raise SourceError(f"{path}:1: header has no column(s) {', '.join(map(repr, missing))} "
                              f"(has {', '.join(header)}); is this a {spec.name} file?")
        width = len(header)
        ia, il = header.index(spec.text_a), header.index(spec.label)
        ib = header.index(spec.text_b) if spec.text_b is not None else None
    else:
        width, ia, ib, il = spec.columns, spec.text_a, spec.text_b, spec.label
    label_index = {token: i for i, token in enumerate(spec.labels or ())}
    ids, a_texts, b_texts, labels = [], [], [], []
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            _drop(issues, f"{path}:{reader.line_num}", "csv", f"unreadable line ({_csv_problem(exc, quoted=False)})")
            continue
        if not row:
            continue
        line = reader.line_num
        where = f"{path}:{line}"
        if len(row) != width:
            _drop(issues, where, "columns", f"{len(row)} tab-separated columns, expected {width}")
            continue
        token = row[il].strip()
        if spec.regression:
            try:
                label = float(token)
            except ValueError:
                label = math.nan
            low, high = spec.score_range
            if not low <= label <= high:  # also NaN
                _drop(issues, where, "label", f"score {token!r} is not a number in [{low:g}, {high:g}]")
                continue
        elif token in label_index:
            label = label_index[token]
        else:
            _drop(issues, where, "label", f"label {token!r} is not one of {', '.join(spec.labels)}")
            continue
        texts = _texts(row[ia], row[ib] if ib is not None else None, ib is not None, where, issues)
        if texts is None:
            continue
        a, b = texts
        ids.append(f"{spec.name}-{path.stem}-{line}")
        a_texts.append(a)
        b_texts.append(b)
        labels.append(label)
    return _table(ids, a_texts, b_texts if ib is not None else None, labels, spec.regression,
                  None if spec.regression else list(spec.labels))


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
    records = []
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            _drop(issues, where, "json", f"not valid JSON ({exc.msg} at column {exc.colno})")
            continue
        if not isinstance(obj, dict):
            _drop(issues, where, "json", f"a JSON {type(obj).__name__}, not an object")
            continue
        missing = [k for k in keys if k not in obj]
        if missing:
            _drop(issues, where, "field", f"no key(s) {', '.join(map(repr, missing))}")
            continue
        not_text = [k for k in (text_a, text_b) if k is not None and not isinstance(obj[k], str)]
        if not_text:
            _drop(issues, where, "field", f"{', '.join(map(repr, not_text))} is not a string")
            continue
        value = obj[label]
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            _drop(issues, where, "field", f"label {value!r} is neither a string nor an integer")
            continue
        value = str(value).strip()
        if labels is not None and value not in labels:
            _drop(issues, where, "label", f"label {value!r} is not one of {', '.join(labels)}")
            continue
        texts = _texts(obj[text_a], obj[text_b] if text_b is not None else None, text_b is not None, where, issues)
        if texts is None:
            continue
        a, b = texts
        records.append((f"{prefix or path.stem}-{number}", a, b, value))
    if labels is None:
        labels = _label_order({r[3] for r in records})
    index = {token: i for i, token in enumerate(labels)}
    return _table([r[0] for r in records], [r[1] for r in records],
                  [r[2] for r in records] if text_b is not None else None,
                  [index[r[3]] for r in records], regression=False, label_list=list(labels))


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
    reader = csv.reader(_lines(path))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise SourceError(f"{path}: empty file, expected a header line") from None
    except csv.Error as exc:
        raise SourceError(f"{path}:1: unreadable header ({_csv_problem(exc, quoted=True)})") from None
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
            raise SourceError(f"{path}:{first}: unreadable CSV record ({_csv_problem(exc, quoted=True)})") from None
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
    ids, a_texts, b_texts, labels = [], [], [], []
    b_column = data[text_b] if text_b is not None else [None] * len(wheres)
    for n, (where, a, b, value) in enumerate(zip(wheres, data[text_a], b_column, data[label])):
        if isinstance(a, _BadRow):
            _drop(issues, where, "columns", f"{a.got} columns, expected {a.expected}")
            continue
        number = _real(value) if regression else _class_index(value)
        if number is None:
            _drop(issues, where, "label", f"label {value!r} is not "
                  + ("a finite number" if regression else "a class index (an integer >= 0)"))
            continue
        texts = _texts(a, b, text_b is not None, where, issues)
        if texts is None:
            continue
        a, b = texts
        ids.append(f"{prefix or path.stem}-{n}")
        a_texts.append(a)
        b_texts.append(b)
        labels.append(number)
    return _table(ids, a_texts, b_texts if text_b is not None else None, labels, regression)
