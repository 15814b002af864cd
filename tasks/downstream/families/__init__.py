"""The task families, one module each, behind one typed protocol (:class:`~tasks.downstream.families.base.Family`).

A family owns everything a stage or the report asks of its tasks: the running text and statistics of its
prepared splits, its model head, the encoding, decoding and scores, the per-example outcomes its statistics
resample, the rows of its wrong predictions and its classic baseline. :mod:`tasks.downstream.finetune`
fine-tunes every family on the one training loop. :data:`FAMILIES` is the registry that ``params.yaml``'s
``family`` names, and :func:`load_task_data` is the one "read splits -> labels -> encode" of every stage that
trains or scores on a task.

==================  ===========================================================  ==============================
family              split columns                                                module
==================  ===========================================================  ==============================
``classification``  ``id, text_a, text_b, label`` (int64, or float64: regression)  :mod:`.classification`
``ner``             ``id, tokens: list<string>, tags: list<string>`` (BIO)       :mod:`.ner`
``mrc``             ``id, question, context, answers: list<struct<text, start>>``  :mod:`.mrc`
==================  ===========================================================  ==============================

Adding a family: a module here with a class that satisfies the protocol, its entry in :data:`FAMILIES`, and its
name and loaders in ``tasks.core.params.downstream`` (docs/data.md).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from transformers import PreTrainedTokenizerBase

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.params import Training
from tasks.downstream.families.base import Family
from tasks.downstream.families.classification import Classification
from tasks.downstream.families.mrc import Mrc
from tasks.downstream.families.ner import Ner

FAMILIES: dict[str, Family] = {f.name: f for f in (Classification(), Ner(), Mrc())}


def read_splits(task: str, splits: tuple[str, ...] = ("train", "dev", "test")) -> dict[str, pa.Table]:
    """``splits`` of a prepared task (``data/downstream/<task>``) by name.

    Raises:
        SourceError: a split file is missing (names it and the stage that makes it).
    """
    files = {s: paths.downstream_split(task, s) for s in splits}
    for file in files.values():
        if not file.is_file():
            raise SourceError(f"{file} is missing: stage downstream@{task} makes it")
    return {s: pq.read_table(f) for s, f in files.items()}


def load_task_data(task: str, family: Family, splits: tuple[str, ...], tokenizer: PreTrainedTokenizerBase,
                   training: Training) -> tuple[dict[str, pa.Table], list[str] | None, dict[str, Any]]:
    """Read ``splits`` of a prepared task (:func:`read_splits`), its labels, and encode them.

    Returns:
        ``(tables, labels, data)``, tables and encoded data by split.
    Raises:
        SourceError: a split file is missing (names it and the stage that makes it).
    """
    tables = read_splits(task, splits)
    labels = family.labels(tables)
    return tables, labels, {s: family.encode(t, tokenizer, training, labels) for s, t in tables.items()}
