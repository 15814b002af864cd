"""Downstream tasks: preparing their data.

A task (``tasks.<name>`` in ``params.yaml``) names a source, a loader, the files
of each role, and how to split and cap them. :func:`prepare_task` reads the
files (malformed records handled by :mod:`tasks.core.quality`), carves the splits the
data lacks out of train by a seeded shuffle, caps each split (seeded subset),
and returns one Arrow table per split in its family's schema (:mod:`tasks.downstream.families`), with what
the family records of them.

Each loader reads one file into the family's records (:data:`LOADERS`: one module per file
format); the families encode and score these tables.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from tasks.core.errors import ParamsError, SourceError
from tasks.core.params import DownstreamTask, TaskData
from tasks.core.paths import source_file
from tasks.core.quality import Issues
from tasks.core.stage import stage_task
from tasks.downstream.clue import read_clue_jsonl
from tasks.downstream.glue import read_glue
from tasks.downstream.conll import ner_sentences, ner_table, read_conll
from tasks.downstream.families import FAMILIES
from tasks.downstream.ner_mrc import DEFAULT_QUERIES, ner_to_mrc
from tasks.downstream.polarity import deduplicate, read_polarity_lines, split_table
from tasks.downstream.records import table_labels
from tasks.downstream.squad import located, mrc_examples, mrc_table, read_squad
from tasks.downstream.tables import read_table

# --------------------------------------------------------------------------- preparation


def _read_glue(data: TaskData, path: Path, issues: Issues, role: str) -> pa.Table:
    return read_glue(path, data.glue_task, issues)


def _read_clue_jsonl(data: TaskData, path: Path, issues: Issues, role: str) -> pa.Table:
    cols = data.columns
    return read_clue_jsonl(path, cols.get("text_a", "sentence"), cols.get("text_b"), cols.get("label", "label"),
                           data.labels, issues)


TABLE_COLUMNS = ("text_a", "text_b", "label", "score")
"""The column roles of loader ``table`` (``data.columns``): ``score`` in place of ``label`` names a real-valued
label, a regression task's (STS-B's similarity)."""


def _read_table(data: TaskData, path: Path, issues: Issues, role: str) -> pa.Table:
    cols = data.columns
    unknown = sorted(set(cols) - set(TABLE_COLUMNS))
    if unknown or {"label", "score"} <= set(cols):
        raise ParamsError(f"data.columns {cols} (loader table, reading {path}): "
                          + (f"unknown role(s) {', '.join(unknown)}; known: {', '.join(TABLE_COLUMNS)}" if unknown
                             else "give label (a class index) or score (a regression task's real number), not both"))
    regression = "score" in cols
    return read_table(path, cols.get("text_a", "text_a"), cols.get("text_b"),
                      cols["score"] if regression else cols.get("label", "label"), issues, regression=regression)


def _read_conll(data: TaskData, path: Path, issues: Issues, role: str) -> pa.Table:
    return ner_table(read_conll(path, data.scheme, issues, labels=data.labels))


def _read_squad(data: TaskData, path: Path, issues: Issues, role: str) -> pa.Table:
    # every gold answer text of what may be scored (dev, test, or an "all" file carved into them)
    return mrc_table(read_squad(path, issues, evaluation=role != "train"))


# loader name (params ``tasks.<name>.loader``) -> reader of one file (in its role: train, dev, test,
# all) into the loader's records; polarity_lines reads its two files together (see prepare_task)
LOADERS = {"glue": _read_glue, "clue_jsonl": _read_clue_jsonl, "table": _read_table, "conll": _read_conll,
           "ner_as_mrc": _read_conll, "squad": _read_squad}


def _subset(table: pa.Table, n: int, rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    """A seeded subset of ``n`` rows (kept in file order) and the rest."""
    pick = np.zeros(table.num_rows, dtype=bool)
    pick[rng.permutation(table.num_rows)[:n]] = True
    return table.filter(pa.array(pick)), table.filter(pa.array(~pick))


@stage_task
def prepare_task(name: str, spec: DownstreamTask, raw_dir: Path, seed: int) -> tuple[dict[str, pa.Table], dict]:
    """Read, split and cap one task's data.

    Splits the files do not provide are carved out of ``train`` (or ``all``) by
    a shuffle seeded with ``seed``: ``dev`` and ``test`` take ``spec.data.split``
    fractions. ``spec.data.limit`` then caps each split with a seeded subset. For
    ``ner_as_mrc`` splitting and capping count sentences (so one sentence's
    questions never straddle two splits), then each sentence becomes one
    question per entity type (:func:`tasks.downstream.ner_mrc.ner_to_mrc`).

    Returns:
        ``({split: table}, stats)``; stats hold the rows per split, the label or
        entity distribution and the malformed-record counts.
    Raises:
        SourceError: a file is missing or malformed under ``malformed: fail`` (a dev or test label that train lacks,
            when ``data.labels`` is unset, is malformed: dropped and counted under skip and repair), a split is empty,
            or a classification split has fewer than 2 classes (names the split and its class counts).
        ParamsError: loader ``table``'s ``data.columns`` name an unknown role, or both ``label`` and ``score``.
    """
    data = spec.data
    issues = Issues(data.malformed)
    rng = np.random.default_rng(seed)
    stats: dict = {}
    if data.loader == "polarity_lines":
        files = {1: source_file(raw_dir, data.source, data.files["positive"]),
                 0: source_file(raw_dir, data.source, data.files["negative"])}
        examples, stats["deduplication"] = deduplicate(read_polarity_lines(files))
        parts = {"all": split_table(name, examples)}
    else:
        parts = {}
        # train (or all) first: a loader that numbers the labels it sees (clue_jsonl) numbers every file's
        # by train's list, so a class index means one label in every split and a label train lacks is reported
        for role, file in sorted(data.files.items(), key=lambda item: (item[0] not in ("train", "all"), item[0])):
            parts[role] = LOADERS[data.loader](data, source_file(raw_dir, data.source, file), issues, role)
            if data.labels is None and role in ("train", "all") and (labels := table_labels(parts[role])) is not None:
                data = data.model_copy(update={"labels": labels})
    pool = parts.pop("all", None)
    if pool is not None:
        parts.setdefault("train", pool)
    total = parts["train"].num_rows
    for split in ("dev", "test"):
        if split not in parts:
            parts[split], parts["train"] = _subset(parts["train"], round(total * getattr(data.split, split)), rng)
    for split, n in sorted(data.limit.items()):
        if parts[split].num_rows > n:
            parts[split], _ = _subset(parts[split], n, rng)
    if data.loader == "squad" and "train" not in data.files:  # carved from a file read for scoring
        parts["train"] = mrc_table(located(mrc_examples(parts["train"]), issues, data.files["all"]))
    if data.loader == "ner_as_mrc":
        queries = data.queries or DEFAULT_QUERIES
        stats["sentences"] = {s: t.num_rows for s, t in parts.items()}
        parts = {s: mrc_table(ner_to_mrc(ner_sentences(t), queries)) for s, t in parts.items()}
    for split in ("train", "dev", "test"):
        if parts[split].num_rows == 0:
            raise SourceError(f"task {name!r}: the {split} split is empty")
    stats["rows"] = {s: t.num_rows for s, t in sorted(parts.items())}
    stats.update(FAMILIES[spec.family].split_stats(name, parts, stats))
    stats["malformed"] = issues.to_dict()
    return {s: parts[s] for s in ("train", "dev", "test")}, stats
