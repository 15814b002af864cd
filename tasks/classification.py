"""Sequence classification: data preparation, encoding and metrics.

Prepared splits share one schema (``data/downstream/<task>/{train,dev,test}.parquet``):
``id`` (string), ``text_a`` (string), ``text_b`` (string, null for
single-sentence tasks) and ``label`` (int64 class index).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from sklearn.metrics import accuracy_score, f1_score
from transformers import PreTrainedTokenizerBase

from tasks.batching import pad_batch, ragged
from tasks.errors import SourceError
from tasks.text import normalise

SPLIT_SCHEMA = pa.schema([("id", pa.string()), ("text_a", pa.string()), ("text_b", pa.string()),
                          ("label", pa.int64())])


def read_polarity_lines(files: dict[int, Path]) -> list[tuple[str, int, str]]:
    """``(normalised text, label, origin)`` for every non-empty line of one-text-a-line files.

    Args:
        files: label -> file (e.g. ``{1: pos.txt, 0: neg.txt}``).
    Raises:
        SourceError: a file is not UTF-8 (names file and line).
    """
    out = []
    for label, path in sorted(files.items()):
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    text = normalise(raw.decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise SourceError(f"{path}:{number}: not valid UTF-8 ({exc.reason})") from None
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


def split_examples(examples: list, dev_fraction: float, test_fraction: float, seed: int) -> dict[str, list]:
    """Seeded shuffle, then cut into ``train``/``dev``/``test`` of the given fractions.

    Raises:
        SourceError: a split would be empty.
    """
    order = np.random.default_rng(seed).permutation(len(examples))
    n_dev, n_test = round(len(examples) * dev_fraction), round(len(examples) * test_fraction)
    parts = {"dev": order[:n_dev], "test": order[n_dev:n_dev + n_test], "train": order[n_dev + n_test:]}
    if any(len(p) == 0 for p in parts.values()):
        raise SourceError(f"{len(examples)} examples are too few for a train/dev/test split")
    return {name: [examples[i] for i in sorted(idx)] for name, idx in parts.items()}


def split_table(task: str, rows: list[tuple[str, int]]) -> pa.Table:
    """A single-sentence split as a :data:`SPLIT_SCHEMA` table (ids ``<task>-<n>``)."""
    return pa.table({"id": [f"{task}-{i:06d}" for i in range(len(rows))], "text_a": [t for t, _ in rows],
                     "text_b": pa.nulls(len(rows), pa.string()), "label": [label for _, label in rows]},
                    schema=SPLIT_SCHEMA)


@dataclass
class EncodedClassification:
    """Tokenized classification examples, batched for a ``*ForSequenceClassification`` head."""

    ids: np.ndarray
    offsets: np.ndarray
    type_ids: np.ndarray
    labels: np.ndarray

    @classmethod
    def encode(cls, table: pa.Table, tokenizer: PreTrainedTokenizerBase, max_length: int) -> "EncodedClassification":
        """Tokenize ``text_a`` (and ``text_b`` when present) with truncation to ``max_length``."""
        a = table.column("text_a").to_pylist()
        b = table.column("text_b").to_pylist()
        pairs = any(x is not None for x in b)
        enc = tokenizer(a, b if pairs else None, truncation=True, max_length=max_length,
                        return_attention_mask=False)
        ids, offsets = ragged(pa.array(enc["input_ids"], pa.list_(pa.int32())))
        type_ids, _ = ragged(pa.array(enc["token_type_ids"], pa.list_(pa.int8())))
        return cls(ids, offsets, type_ids, np.asarray(table.column("label").to_numpy()))

    def __len__(self) -> int:
        return len(self.labels)

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        ids, valid = pad_batch(self.ids, self.offsets, index)
        types, _ = pad_batch(self.type_ids, self.offsets, index)
        return {"input_ids": torch.from_numpy(ids.astype(np.int64)),
                "token_type_ids": torch.from_numpy(types.astype(np.int64)),
                "attention_mask": torch.from_numpy(valid.astype(np.int64)),
                "labels": torch.from_numpy(self.labels[index].astype(np.int64))}


def classification_metrics(labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-averaged F1 (scikit-learn)."""
    return {"accuracy": float(accuracy_score(labels, predictions)),
            "macro_f1": float(f1_score(labels, predictions, average="macro"))}
