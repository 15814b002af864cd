"""Downstream tasks: preparing their data, and the three task families that fine-tune on it.

A task (``tasks.<name>`` in ``params.yaml``) names a source, a loader, the files
of each role, and how to split and cap them. :func:`prepare_task` reads the
files (malformed records handled by :mod:`tasks.core.quality`), carves the splits the
data lacks out of train by a seeded shuffle, caps each split (seeded subset),
and returns one Arrow table per split in the family's schema:

==============  ==========================================================
family          columns
==============  ==========================================================
classification  ``id, text_a, text_b, label`` (:mod:`tasks.downstream.classification`)
ner             ``id, tokens: list<string>, tags: list<string>`` (BIO)
mrc             ``id, question, context, answers: list<struct<text, start>>``
==============  ==========================================================

A :class:`Family` turns a split into model inputs, builds the Hugging Face
head, and scores predictions; :mod:`tasks.downstream.finetune` holds the one training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import torch
from transformers import AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoModelForTokenClassification

from tasks.core.errors import SourceError
from tasks.core.params import DownstreamTask
from tasks.core.paths import source_file
from tasks.core.quality import Issues
from tasks.downstream import cmrc_metric
from tasks.downstream.classification import EncodedClassification, MeanPoolClassifier, deduplicate, read_polarity_lines, score, split_table
from tasks.downstream.finetune import predict
from tasks.downstream.glue import read_clue_jsonl, read_glue, read_table, table_labels
from tasks.downstream.mrc import DEFAULT_QUERIES, MrcExample, MrcFeatures, decode as decode_spans, ner_to_mrc, read_squad
from tasks.downstream.ner import EncodedNer, NerSentence, decode as decode_tags, label_list, ner_metrics, read_conll

NER_SCHEMA = pa.schema([("id", pa.string()), ("tokens", pa.list_(pa.string())), ("tags", pa.list_(pa.string()))])
MRC_SCHEMA = pa.schema([("id", pa.string()), ("question", pa.string()), ("context", pa.string()),
                        ("answers", pa.list_(pa.struct([("text", pa.string()), ("start", pa.int32())])))])


# --------------------------------------------------------------------------- tables


def ner_table(sentences: list[NerSentence]) -> pa.Table:
    return pa.table({"id": [s.id for s in sentences], "tokens": [list(s.tokens) for s in sentences],
                     "tags": [list(s.tags) for s in sentences]}, schema=NER_SCHEMA)


def ner_sentences(table: pa.Table) -> list[NerSentence]:
    return [NerSentence(r["id"], r["tokens"], r["tags"]) for r in table.to_pylist()]


def mrc_table(examples: list[MrcExample]) -> pa.Table:
    return pa.table({"id": [e.id for e in examples], "question": [e.question for e in examples],
                     "context": [e.context for e in examples],
                     "answers": [[{"text": t, "start": s} for t, s in e.answers] for e in examples]},
                    schema=MRC_SCHEMA)


def mrc_examples(table: pa.Table) -> list[MrcExample]:
    return [MrcExample(r["id"], r["question"], r["context"], tuple((a["text"], a["start"]) for a in r["answers"]))
            for r in table.to_pylist()]


def eval_texts(family: str, table: pa.Table) -> list[str]:
    """The running text of a split, to keep out of the pretraining corpus."""
    if family == "classification":
        return [t for col in ("text_a", "text_b") for t in table.column(col).to_pylist() if t]
    if family == "ner":
        return ["".join(tokens) for tokens in table.column("tokens").to_pylist()]
    return table.column("context").to_pylist() + table.column("question").to_pylist()


# --------------------------------------------------------------------------- preparation


def _read_role(spec: DownstreamTask, path: Path, issues: Issues) -> pa.Table:
    """One file of a task as a table of the loader's records (before any conversion)."""
    cols = spec.columns
    if spec.loader == "glue":
        return read_glue(path, spec.glue_task, issues)
    if spec.loader == "clue_jsonl":
        return read_clue_jsonl(path, cols.get("text_a", "sentence"), cols.get("text_b"), cols.get("label", "label"),
                               spec.labels, issues)
    if spec.loader == "table":
        return read_table(path, cols.get("text_a", "text_a"), cols.get("text_b"), cols.get("label", "label"), issues)
    if spec.loader in ("conll", "ner_as_mrc"):
        return ner_table(read_conll(path, spec.scheme, issues, labels=spec.labels))
    if spec.loader == "squad":
        return mrc_table(read_squad(path, issues))
    raise SourceError(f"loader {spec.loader!r} cannot read a single file")


def _subset(table: pa.Table, n: int, rng: np.random.Generator) -> tuple[pa.Table, pa.Table]:
    """A seeded subset of ``n`` rows (kept in file order) and the rest."""
    pick = np.zeros(table.num_rows, dtype=bool)
    pick[rng.permutation(table.num_rows)[:n]] = True
    return table.filter(pa.array(pick)), table.filter(pa.array(~pick))


def prepare_task(name: str, spec: DownstreamTask, raw_dir: Path, seed: int) -> tuple[dict[str, pa.Table], dict]:
    """Read, split and cap one task's data.

    Splits the files do not provide are carved out of ``train`` (or ``all``) by
    a shuffle seeded with ``seed``: ``dev`` and ``test`` take ``spec.split``
    fractions. ``spec.limit`` then caps each split with a seeded subset. For
    ``ner_as_mrc`` splitting and capping count sentences (so one sentence's
    questions never straddle two splits), then each sentence becomes one
    question per entity type (:func:`tasks.downstream.mrc.ner_to_mrc`).

    Returns:
        ``({split: table}, stats)``; stats hold the rows per split, the label or
        entity distribution and the malformed-record counts.
    Raises:
        SourceError: a file is missing or malformed under ``malformed: fail``, a split is empty,
            or a classification split has fewer than 2 classes (names the split and its class counts).
    """
    issues = Issues(spec.malformed)
    rng = np.random.default_rng(seed)
    stats: dict = {}
    if spec.loader == "polarity_lines":
        files = {1: source_file(raw_dir, spec.source, spec.files["positive"]),
                 0: source_file(raw_dir, spec.source, spec.files["negative"])}
        examples, stats["deduplication"] = deduplicate(read_polarity_lines(files))
        parts = {"all": split_table(name, examples)}
    else:
        parts = {role: _read_role(spec, source_file(raw_dir, spec.source, file), issues)
                 for role, file in sorted(spec.files.items())}
    pool = parts.pop("all", None)
    if pool is not None:
        parts.setdefault("train", pool)
    total = parts["train"].num_rows
    for split in ("dev", "test"):
        if split not in parts:
            parts[split], parts["train"] = _subset(parts["train"], round(total * getattr(spec.split, split)), rng)
    for split, n in sorted(spec.limit.items()):
        if parts[split].num_rows > n:
            parts[split], _ = _subset(parts[split], n, rng)
    if spec.loader == "ner_as_mrc":
        queries = spec.queries or DEFAULT_QUERIES
        stats["sentences"] = {s: t.num_rows for s, t in parts.items()}
        parts = {s: mrc_table(ner_to_mrc(ner_sentences(t), queries)) for s, t in parts.items()}
    for split in ("train", "dev", "test"):
        if parts[split].num_rows == 0:
            raise SourceError(f"task {name!r}: the {split} split is empty")
    stats["rows"] = {s: t.num_rows for s, t in sorted(parts.items())}
    if spec.family == "classification" and not pa.types.is_floating(parts["train"].schema.field("label").type):
        stats["labels"] = {s: dict(sorted(zip(*np.unique(t.column("label").to_numpy(), return_counts=True))))
                           for s, t in parts.items()}
        stats["labels"] = {s: {str(k): int(v) for k, v in d.items()} for s, d in stats["labels"].items()}
        few = [f"{s} {stats['labels'][s]}" for s in ("train", "dev", "test") if len(stats["labels"][s]) < 2]
        if few:
            dropped = stats.get("deduplication", {}).get("conflicting_texts_dropped")
            raise SourceError(f"task {name!r}: fewer than 2 classes (class: count) in split(s) {'; '.join(few)}"
                              + (f" after dropping {dropped} text(s) with conflicting labels" if dropped else ""))
    elif spec.family == "ner":
        stats["entities"] = {s: _entity_counts(t) for s, t in parts.items()}
    stats["malformed"] = issues.to_dict()
    return {s: parts[s] for s in ("train", "dev", "test")}, stats


def _entity_counts(table: pa.Table) -> dict[str, int]:
    tags = np.asarray(table.column("tags").combine_chunks().flatten().to_numpy(zero_copy_only=False), dtype=str)
    kinds, counts = np.unique([t[2:] for t in tags if t.startswith("B-")], return_counts=True)
    return {str(k): int(c) for k, c in zip(kinds, counts)}


# --------------------------------------------------------------------------- task families


@dataclass
class Family:
    """How one task family encodes data, builds its head and scores predictions.

    Attributes:
        labels: split tables -> label names (``None``: regression / spans).
        model: (model dir, labels, training knobs) -> the encoder with the family's head.
        encode: (table, tokenizer, training knobs, labels) -> a dataset for :func:`tasks.downstream.finetune.fit`.
        evaluate: (model, dataset, table, training knobs, labels, metric names, device)
            -> (scores, predictions): scores by metric name, predictions in the
            family's file format (rows, or the official MRC ``{id: answer}``).
    """

    labels: Callable
    model: Callable
    encode: Callable
    evaluate: Callable


def _dropout(dropout: float) -> dict:
    return {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}


def _classifier(path, labels: list[str] | None, training) -> torch.nn.Module:
    num_labels = 1 if labels is None else len(labels)
    if training.pooling == "mean":
        return MeanPoolClassifier.from_pretrained(path, num_labels, training.dropout)
    return AutoModelForSequenceClassification.from_pretrained(path, num_labels=num_labels, **_dropout(training.dropout))


def _classification_labels(tables: dict[str, pa.Table]) -> list[str] | None:
    train = tables["train"]
    if pa.types.is_floating(train.schema.field("label").type):
        return None
    names = table_labels(train)
    if names:
        return names
    top = max(int(np.max(t.column("label").to_numpy())) for t in tables.values())
    return [str(i) for i in range(top + 1)]


def _evaluate_classification(model, data, table, training, labels, metrics, device):
    logits = np.concatenate(predict(model, data, batch_size=training.eval_batch_size, device=device)["logits"])
    pred = logits[:, 0] if labels is None else logits.argmax(-1)
    gold = table.column("label").to_numpy()
    rows = [{"id": i, "label": g.item(), "prediction": p.item()}
            for i, g, p in zip(table.column("id").to_pylist(), gold, pred)]
    return score(metrics, gold, pred), rows


def _evaluate_ner(model, data, table, training, labels, metrics, device):
    logits = predict(model, data, batch_size=training.eval_batch_size, device=device)["logits"]
    pred = decode_tags(logits, data, labels)
    gold = table.column("tags").to_pylist()
    result = ner_metrics(gold, pred)
    rows = [{"id": i, "tokens": t, "gold": g, "prediction": p}
            for i, t, g, p in zip(table.column("id").to_pylist(), table.column("tokens").to_pylist(), gold, pred)]
    return {**{m: result[m] for m in metrics}, "per_type": result["per_type"]}, rows


def _evaluate_mrc(model, data, table, training, labels, metrics, device):
    out = predict(model, data, batch_size=training.eval_batch_size, device=device, outputs=("start_logits", "end_logits"))
    examples = mrc_examples(table)
    answers = decode_spans(out["start_logits"], out["end_logits"], data, examples, n_best=training.n_best,
                           max_answer_length=training.max_answer_length)
    result = cmrc_metric.evaluate({e.id: [t for t, _ in e.answers] for e in examples}, answers)
    return {m: result[m] for m in metrics}, answers


FAMILIES: dict[str, Family] = {
    "classification": Family(
        labels=_classification_labels,
        model=_classifier,
        encode=lambda table, tok, training, labels: EncodedClassification.encode(table, tok, training.max_seq_length),
        evaluate=_evaluate_classification),
    "ner": Family(
        labels=lambda tables: label_list([s for t in tables.values() for s in ner_sentences(t)]),
        model=lambda path, labels, training: AutoModelForTokenClassification.from_pretrained(
            path, num_labels=len(labels), id2label=dict(enumerate(labels)),
            label2id={l: i for i, l in enumerate(labels)}, **_dropout(training.dropout)),
        encode=lambda table, tok, training, labels: EncodedNer.encode(ner_sentences(table), tok, labels,
                                                                      training.max_seq_length),
        evaluate=_evaluate_ner),
    "mrc": Family(
        labels=lambda tables: None,
        model=lambda path, labels, training: AutoModelForQuestionAnswering.from_pretrained(
            path, **_dropout(training.dropout)),
        encode=lambda table, tok, training, labels: MrcFeatures.encode(
            mrc_examples(table), tok, training.max_seq_length, training.doc_stride, training.max_query_length),
        evaluate=_evaluate_mrc),
}

