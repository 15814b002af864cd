"""GLUE sentence(-pair) classification and regression data: the task layouts and their reader.

**GLUE** (Wang et al. 2019, "GLUE: A Multi-Task Benchmark and Analysis Platform
for Natural Language Understanding", ICLR): the tab-separated ``train.tsv`` /
``dev.tsv`` files of the official distribution (MNLI: ``dev_matched.tsv`` and
``dev_mismatched.tsv``), layouts in :data:`GLUE_TASKS`, read by :func:`read_glue`
into a prepared split (the schema, text normalisation and malformed-record
reports are those of :mod:`tasks.downstream.records`). The test files carry no
labels and are not read here.

Metrics are those of the paper: CoLA Matthews correlation; SST-2, MNLI (matched
and mismatched), QNLI, RTE, WNLI accuracy; MRPC and QQP accuracy and F1 of the
positive class; STS-B Pearson and Spearman correlation. :func:`score` (from
:mod:`tasks.downstream.classification`, the one implementation) computes them.

The other sentence(-pair) readers: CLUE JSON lines in :mod:`tasks.downstream.clue`,
tables with named columns in :mod:`tasks.downstream.tables`.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tasks.core.errors import ParamsError, SourceError
from tasks.core.quality import Issues
from tasks.downstream.records import SplitRows, csv_header, csv_lines, csv_problem, drop

__all__ = ["GLUE_TASKS", "GlueTask", "glue_task", "read_glue"]


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
    reader = csv.reader(csv_lines(path), delimiter="\t", quoting=csv.QUOTE_NONE)
    if spec.header:
        header = csv_header(reader, path, f"a {spec.name} header", quoted=False)
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
    rows = SplitRows(pair=ib is not None, regression=spec.regression)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            drop(issues, f"{path}:{reader.line_num}", "csv", f"unreadable line ({csv_problem(exc, quoted=False)})")
            continue
        if not row:
            continue
        line = reader.line_num
        where = f"{path}:{line}"
        if len(row) != width:
            drop(issues, where, "columns", f"{len(row)} tab-separated columns, expected {width}")
            continue
        token = row[il].strip()
        if spec.regression:
            try:
                label = float(token)
            except ValueError:
                label = math.nan
            low, high = spec.score_range
            if not low <= label <= high:  # also NaN
                drop(issues, where, "label", f"score {token!r} is not a number in [{low:g}, {high:g}]")
                continue
        elif token in label_index:
            label = label_index[token]
        else:
            drop(issues, where, "label", f"label {token!r} is not one of {', '.join(spec.labels)}")
            continue
        rows.add(f"{spec.name}-{path.stem}-{line}", row[ia], row[ib] if ib is not None else None, label, where,
                 issues)
    return rows.table(None if spec.regression else list(spec.labels))
