"""The three task families (classification, CMRC-style MRC, NER) behind one typed protocol.

A :class:`Family` turns a split table (schemas in :mod:`tasks.downstream.downstream`) into
model inputs, builds the Hugging Face head and scores predictions; :mod:`tasks.downstream.finetune` fine-tunes all
three on the one training loop. :data:`FAMILIES` is the registry that ``params.yaml``'s ``family`` names, and
:func:`load_task_data` is the one "read splits -> labels -> encode" of every stage that
trains or scores on a task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from transformers import (AutoModelForQuestionAnswering, AutoModelForSequenceClassification,
                          AutoModelForTokenClassification, PreTrainedTokenizerBase)

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.params import Training
from tasks.downstream import classic, cmrc_metric
from tasks.downstream.classic import Classic
from tasks.downstream.classification import EncodedClassification, MeanPoolClassifier, score
from tasks.downstream.downstream import mrc_examples, ner_sentences
from tasks.downstream.finetune import predict
from tasks.downstream.mrc import MrcFeatures
from tasks.downstream.mrc_decode import decode as decode_spans
from tasks.downstream.conll import label_list
from tasks.downstream.ner import EncodedNer, decode as decode_tags, ner_metrics
from tasks.downstream.records import table_labels


class Family(Protocol):
    """How one task family encodes data, builds its head and scores predictions."""

    def labels(self, tables: dict[str, pa.Table]) -> list[str] | None:
        """Label names over all splits; ``None`` for regression and spans."""

    def model(self, path: str | Path, labels: list[str] | None, training: Training) -> torch.nn.Module:
        """The encoder at ``path`` with this family's head (dropout from ``training``)."""

    def encode(self, table: pa.Table, tokenizer: PreTrainedTokenizerBase, training: Training,
               labels: list[str] | None) -> Any:
        """A dataset for :func:`tasks.downstream.finetune.fit` (``len``, ``batch``, ``stats`` where counted)."""

    def evaluate(self, model: torch.nn.Module, data: Any, table: pa.Table, training: Training,
                 labels: list[str] | None, metrics: list[str], device: torch.device) -> tuple[dict, Any]:
        """``(scores by metric name, predictions)``: rows, or the official MRC ``{id: answer}``."""

    def scored(self, table: pa.Table, predictions: Any, metrics: list[str]) -> tuple[dict, Any]:
        """:meth:`evaluate`'s result for ``predictions`` on ``table``: class indices or scores ``[N]``, BIO tag
        sequences, or ``{id: answer}``."""

    def baseline(self, tables: dict[str, pa.Table], labels: list[str] | None,
                 metrics: list[str]) -> tuple[Classic, dict[str, dict], Any]:
        """The family's classic baseline (:mod:`tasks.downstream.classic`) fitted on ``train``, its
        setting chosen on ``dev`` by ``metrics[0]``: ``(fit, {split: scores}, test predictions)``, the
        scores and predictions as :meth:`evaluate` gives a fine-tune's."""


def _dropout(dropout: float) -> dict:
    return {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}


class Classification:
    """Single sentences and pairs; accuracy/F1/MCC, or Pearson/Spearman for a float label."""

    def labels(self, tables):
        train = tables["train"]
        if pa.types.is_floating(train.schema.field("label").type):
            return None
        names = table_labels(train)
        if names:
            return names
        top = max(int(np.max(t.column("label").to_numpy())) for t in tables.values())
        return [str(i) for i in range(top + 1)]

    def model(self, path, labels, training):
        num_labels = 1 if labels is None else len(labels)
        if training.pooling == "mean":
            return MeanPoolClassifier.from_pretrained(path, num_labels, training.dropout)
        return AutoModelForSequenceClassification.from_pretrained(path, num_labels=num_labels,
                                                                  **_dropout(training.dropout))

    def encode(self, table, tokenizer, training, labels):
        return EncodedClassification.encode(table, tokenizer, training.max_seq_length)

    def evaluate(self, model, data, table, training, labels, metrics, device):
        logits = np.concatenate(predict(model, data, batch_size=training.eval_batch_size, device=device)["logits"])
        return self.scored(table, logits[:, 0] if labels is None else logits.argmax(-1), metrics)

    def scored(self, table, pred, metrics):
        gold = table.column("label").to_numpy()
        rows = [{"id": i, "label": g.item(), "prediction": p.item()}
                for i, g, p in zip(table.column("id").to_pylist(), gold, pred)]
        return score(metrics, gold, pred), rows

    def baseline(self, tables, labels, metrics):
        gold = {s: t.column("label").to_numpy() for s, t in tables.items()}
        dev_score = lambda pred: score(metrics[:1], gold["dev"], pred)[metrics[0]]  # noqa: E731
        sides = {s: (t.column("text_a").to_pylist(), t.column("text_b").to_pylist()) for s, t in tables.items()}
        if any(b is not None for b in sides["train"][1]):
            fit = classic.pair_classifier(sides, gold, labels is None, dev_score)
        else:
            fit = classic.text_classifier({s: a for s, (a, _) in sides.items()}, gold, labels is None, dev_score)
        return _baseline_scores(self, fit, tables, metrics)


class Ner:
    """Token classification with BIO tags; entity-level F1 (seqeval)."""

    def labels(self, tables):
        return label_list([s for t in tables.values() for s in ner_sentences(t)])

    def model(self, path, labels, training):
        return AutoModelForTokenClassification.from_pretrained(
            path, num_labels=len(labels), id2label=dict(enumerate(labels)),
            label2id={label: i for i, label in enumerate(labels)}, **_dropout(training.dropout))

    def encode(self, table, tokenizer, training, labels):
        return EncodedNer.encode(ner_sentences(table), tokenizer, labels, training.max_seq_length)

    def evaluate(self, model, data, table, training, labels, metrics, device):
        logits = predict(model, data, batch_size=training.eval_batch_size, device=device)["logits"]
        return self.scored(table, decode_tags(logits, data, labels), metrics)

    def baseline(self, tables, labels, metrics):
        gold = {s: t.column("tags").to_pylist() for s, t in tables.items()}
        fit = classic.crf_tagger({s: t.column("tokens").to_pylist() for s, t in tables.items()}, gold,
                                 lambda pred: ner_metrics(gold["dev"], pred)[metrics[0]])
        return _baseline_scores(self, fit, tables, metrics)

    def scored(self, table, pred, metrics):
        gold = table.column("tags").to_pylist()
        result = ner_metrics(gold, pred)
        rows = [{"id": i, "tokens": t, "gold": g, "prediction": p}
                for i, t, g, p in zip(table.column("id").to_pylist(), table.column("tokens").to_pylist(), gold, pred)]
        return {**{m: result[m] for m in metrics}, "per_type": result["per_type"]}, rows


class Mrc:
    """Span extraction over sliding windows; the official CMRC 2018 EM/F1."""

    def labels(self, tables):
        return None

    def model(self, path, labels, training):
        return AutoModelForQuestionAnswering.from_pretrained(path, **_dropout(training.dropout))

    def encode(self, table, tokenizer, training, labels):
        return MrcFeatures.encode(mrc_examples(table), tokenizer, training.max_seq_length, training.doc_stride,
                                  training.max_query_length)

    def evaluate(self, model, data, table, training, labels, metrics, device):
        out = predict(model, data, batch_size=training.eval_batch_size, device=device,
                      outputs=("start_logits", "end_logits"))
        answers = decode_spans(out["start_logits"], out["end_logits"], data, mrc_examples(table),
                               n_best=training.n_best, max_answer_length=training.max_answer_length)
        return self.scored(table, answers, metrics)

    def scored(self, table, answers, metrics):
        result = cmrc_metric.evaluate(_gold_answers(table), answers)
        return {m: result[m] for m in metrics}, answers

    def baseline(self, tables, labels, metrics):
        dev = _gold_answers(tables["dev"])
        fit = classic.crf_reader({s: mrc_examples(t) for s, t in tables.items()},
                                 lambda answers: cmrc_metric.evaluate(dev, answers)[metrics[0]])
        return _baseline_scores(self, fit, tables, metrics)


def _gold_answers(table: pa.Table) -> dict[str, list[str]]:
    return {e.id: [t for t, _ in e.answers] for e in mrc_examples(table)}


def _baseline_scores(family, fit: Classic, tables: dict[str, pa.Table], metrics: list[str]):
    """A fitted classic baseline's scores on dev and test and its test predictions, as a fine-tune's."""
    scores, predictions = {}, None
    for split in ("dev", "test"):
        scores[split], predictions = family.scored(tables[split], getattr(fit, split), metrics)
    return fit, scores, predictions


FAMILIES: dict[str, Family] = {"classification": Classification(), "ner": Ner(), "mrc": Mrc()}


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
