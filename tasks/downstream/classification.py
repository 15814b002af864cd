"""Sequence classification: encoding and metrics (the mean-pooling head: :mod:`tasks.downstream.mean_pool`).

Prepared splits share one schema (``data/downstream/<task>/{train,dev,test}.parquet``,
:data:`tasks.downstream.records.SPLIT_SCHEMA`): ``id`` (string), ``text_a`` (string),
``text_b`` (string, null for single-sentence tasks) and ``label``: an int64 class index
or, for regression tasks such as STS-B, a float64 score. :class:`EncodedClassification` batches the
first as ``torch.int64`` labels and the second as ``torch.float32`` labels, which is
what a Hugging Face ``*ForSequenceClassification`` head with ``num_labels=1``
needs for its MSE regression loss.

:func:`score` is the one implementation of the classification and regression
metrics (:func:`classification_metrics` is a fixed selection of it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch
from transformers import PreTrainedTokenizerBase

from tasks.training.batching import pad_batch, ragged

@dataclass
class EncodedClassification:
    """Tokenized classification examples, batched for a ``*ForSequenceClassification`` head.

    ``labels`` is ``int64`` for classification and ``float32`` for regression (a
    floating-point ``label`` column); batches carry them as ``torch.int64`` or
    ``torch.float32`` of shape ``[B]``.
    """

    ids: np.ndarray
    offsets: np.ndarray
    type_ids: np.ndarray
    labels: np.ndarray

    @classmethod
    def encode(cls, table: pa.Table, tokenizer: PreTrainedTokenizerBase, max_length: int) -> "EncodedClassification":
        """Tokenize ``text_a`` (and ``text_b`` when present) within ``max_length`` tokens. Pairs are truncated
        by the tokenizer (``longest_first``); a longer single sentence keeps its head (a quarter of the budget)
        and its tail (the rest): the best of the truncations Sun et al. (2019, "How to Fine-Tune BERT for Text
        Classification?", §5.3.1) compare on long reviews (their 128 + 382 of 512), where the verdict of a
        review is often at its end."""
        a = table.column("text_a").to_pylist()
        b = table.column("text_b").to_pylist()
        pairs = any(x is not None for x in b)
        # split_special_tokens: a literal "[MASK]"/"[SEP]" in a text is word-pieced, never a special id (as in
        # tasks.corpus.tokenize); [CLS]/[SEP] are still added by id. Same ids for text without such strings.
        enc = tokenizer(a, b if pairs else None, truncation=pairs, max_length=max_length if pairs else None,
                        split_special_tokens=True, return_attention_mask=False)
        input_ids, token_types = enc["input_ids"], enc["token_type_ids"]
        if not pairs:
            head = (max_length - 2) // 4
            tail = max_length - 2 - head
            keep = lambda x: x if len(x) <= max_length else x[:1 + head] + x[-(tail + 1):]  # noqa: E731
            input_ids, token_types = [keep(x) for x in input_ids], [keep(x) for x in token_types]
        ids, offsets = ragged(pa.array(input_ids, pa.list_(pa.int32())))
        type_ids, _ = ragged(pa.array(token_types, pa.list_(pa.int8())))
        label = table.column("label")
        labels = np.asarray(label.to_numpy())
        labels = labels.astype(np.float32 if pa.types.is_floating(label.type) else np.int64)
        return cls(ids, offsets, type_ids, labels)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def regression(self) -> bool:
        """Whether the labels are real-valued scores (a ``num_labels=1`` head)."""
        return bool(np.issubdtype(self.labels.dtype, np.floating))

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        ids, valid = pad_batch(self.ids, self.offsets, index)
        types, _ = pad_batch(self.type_ids, self.offsets, index)
        return {"input_ids": torch.from_numpy(ids.astype(np.int64)),
                "token_type_ids": torch.from_numpy(types.astype(np.int64)),
                "attention_mask": torch.from_numpy(valid.astype(np.int64)),
                "labels": torch.from_numpy(self.labels[index].astype(
                    np.float32 if self.regression else np.int64))}


# SciPy and scikit-learn are imported when a metric is computed, not with this module: they
# cost 0.5-1.2 s of start-up in every stage that imports the task families, NER and MRC ones too.
def _pearson(labels: np.ndarray, predictions: np.ndarray) -> float:
    from scipy.stats import pearsonr

    return pearsonr(labels.astype(np.float64), predictions.astype(np.float64)).statistic


def _spearman(labels: np.ndarray, predictions: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return spearmanr(labels, predictions).statistic


def _sklearn(name: str, **kwargs):
    def metric(labels: np.ndarray, predictions: np.ndarray) -> float:
        import sklearn.metrics

        return getattr(sklearn.metrics, name)(labels, predictions, **kwargs)
    return metric


# name -> f(labels, predictions). F1 scores count an undefined precision or recall
# (no predictions / no examples of a class) as 0, without a warning.
METRICS = {
    "accuracy": _sklearn("accuracy_score"),
    "f1": _sklearn("f1_score", average="binary", pos_label=1, zero_division=0),
    "macro_f1": _sklearn("f1_score", average="macro", zero_division=0),
    "matthews": _sklearn("matthews_corrcoef"),
    "pearson": _pearson,
    "spearman": _spearman,
}


def score(metric_names: list[str], labels, predictions) -> dict[str, float]:
    """The named metrics of ``predictions`` against gold ``labels`` (scikit-learn, SciPy).

    * ``accuracy``: fraction of exact matches;
    * ``f1``: binary F1 of the positive class ``1`` (MRPC, QQP; Wang et al. 2019);
    * ``macro_f1``: unweighted mean of per-class F1 over the classes present in
      ``labels`` or ``predictions``;
    * ``matthews``: Matthews correlation coefficient (CoLA);
    * ``pearson``, ``spearman``: correlation of real-valued scores (STS-B); NaN when
      either side is constant.

    Args:
        metric_names: names from :data:`METRICS`; the result keeps their order.
        labels: gold class indices (or scores), shape ``[N]``.
        predictions: predicted class indices (or scores), shape ``[N]``.
    Raises:
        ValueError: an unknown metric name, or empty or mismatched inputs.
    """
    unknown = [m for m in metric_names if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape or labels.ndim != 1 or len(labels) == 0:
        raise ValueError(f"labels {labels.shape} and predictions {predictions.shape} must be equal, "
                         "non-empty and one-dimensional")
    return {name: float(METRICS[name](labels, predictions)) for name in metric_names}


def classification_metrics(labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """Accuracy and macro-averaged F1: ``score(["accuracy", "macro_f1"], ...)``."""
    return score(["accuracy", "macro_f1"], labels, predictions)
