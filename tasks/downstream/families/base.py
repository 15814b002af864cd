"""The :class:`Family` protocol: everything the stages and the report ask of a task family."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
import pyarrow as pa
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks.core.params import Training
from tasks.downstream.classic import Classic
from tasks.downstream.outcomes import Reduction


class Family(Protocol):
    """One task family: its prepared split's data, model head, encoding, decoding and scores, per-example
    outcomes, wrong predictions and classic baseline. Registered in
    :data:`tasks.downstream.families.FAMILIES` under the name ``params.yaml``'s ``family`` gives."""

    name: ClassVar[str]
    """Its name in ``params.yaml`` (``tasks.<task>.family``) and in the metrics."""
    percent: ClassVar[float]
    """Percentage points per unit of the scores it stores: 100 for fractions (scikit-learn, seqeval), 1 for
    percentages (the official CMRC 2018 script's)."""
    counted: ClassVar[dict[str, Reduction]]
    """Its metrics that are a function of per-example counts (:meth:`counts`), and how the sums give each."""

    def eval_texts(self, table: pa.Table) -> list[str]:
        """The running text of a prepared split, which ingest keeps out of the pretraining corpus."""

    def split_stats(self, task: str, parts: dict[str, pa.Table], stats: dict) -> dict:
        """What ``metrics/downstream/<task>.json`` records of the prepared splits beyond their rows (class or
        entity counts); ``stats``: what preparation recorded so far.

        Raises:
            SourceError: splits it cannot be trained or scored on (e.g. a split with one class)."""

    def labels(self, tables: dict[str, pa.Table]) -> list[str] | None:
        """Label names over all splits; ``None`` for regression and spans."""

    pipeline_tag: ClassVar[str]
    """The Hugging Face task of its fine-tuned models (``text-classification``, ...), as a model card names it."""
    usage: ClassVar[str]
    """Python that loads one of its fine-tuned model folders (``{folder}``) with transformers alone and uses it,
    for the model card (``{max_seq_length}``, ``{n_best}``, ``{max_answer_length}``: the recipe's)."""

    def model(self, path: str | Path, labels: list[str] | None, training: Training) -> torch.nn.Module:
        """The encoder at ``path`` with this family's head (dropout from ``training``), its config naming the
        labels (``id2label``, ``label2id``)."""

    def head(self, training: Training) -> type[PreTrainedModel]:
        """The class whose ``from_pretrained`` loads a fine-tuned model folder of this family (its ``AutoModelFor*``,
        or the head of :mod:`tasks.downstream.mean_pool`)."""

    def encode(self, table: pa.Table, tokenizer: PreTrainedTokenizerBase, training: Training,
               labels: list[str] | None) -> Any:
        """A dataset for :func:`tasks.downstream.finetune.fit` (``len``, ``batch``, ``stats`` where counted)."""

    def evaluate(self, model: torch.nn.Module, data: Any, table: pa.Table, training: Training,
                 labels: list[str] | None, metrics: list[str], device: torch.device) -> tuple[dict, Any]:
        """``(scores by metric name, predictions)``: rows, or the official MRC ``{id: answer}``."""

    def scored(self, table: pa.Table, predictions: Any, metrics: list[str]) -> tuple[dict, Any]:
        """:meth:`evaluate`'s result for ``predictions`` on ``table``: class indices or scores ``[N]``, BIO tag
        sequences, or ``{id: answer}``."""

    def counts(self, metric: str, table: pa.Table, predictions: Any) -> np.ndarray:
        """The per-example counts ``float64 [N, k]`` of :meth:`evaluate`'s ``predictions`` on ``table`` (a test
        split, in its stored order) for ``metric`` (layouts: :mod:`tasks.downstream.outcomes`).

        Raises:
            ValueError: a metric not in :attr:`counted`, or predictions that do not cover the split in order."""

    def wrong_predictions(self, predictions: Any, test: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
        """The report's table of wrong test predictions: its header and one row of cells per wrong one;
        ``predictions`` as :meth:`evaluate` gives them (read back from the stage's files), ``test``: the
        test split's rows by id."""

    def baseline(self, tables: dict[str, pa.Table], labels: list[str] | None,
                 metrics: list[str]) -> tuple[Classic, dict[str, dict], Any]:
        """The family's classic baseline (:mod:`tasks.downstream.classic`) fitted on ``train``, its
        setting chosen on ``dev`` by ``metrics[0]``: ``(fit, {split: scores}, test predictions)``, the
        scores and predictions as :meth:`evaluate` gives a fine-tune's."""


def dropout(rate: float) -> dict:
    """A Hugging Face config's dropout keywords at ``rate``."""
    return {"hidden_dropout_prob": rate, "attention_probs_dropout_prob": rate}


def label_names(labels: list[str]) -> dict:
    """A Hugging Face config's label keywords (``id2label``, ``label2id``) for class names in index order."""
    return {"num_labels": len(labels), "id2label": dict(enumerate(labels)),
            "label2id": {label: i for i, label in enumerate(labels)}}


def require_counted(family: Family, metric: str) -> None:
    """Raises ValueError: ``metric`` of ``family`` has no per-example outcomes."""
    if metric not in family.counted:
        raise ValueError(f"{family.name} metric {metric!r} has no per-example outcomes")


def baseline_scores(family: Family, fit: Classic, tables: dict[str, pa.Table], metrics: list[str]):
    """A fitted classic baseline's scores on dev and test and its test predictions, as a fine-tune's."""
    scores, predictions = {}, None
    for split in ("dev", "test"):
        scores[split], predictions = family.scored(tables[split], getattr(fit, split), metrics)
    return fit, scores, predictions
