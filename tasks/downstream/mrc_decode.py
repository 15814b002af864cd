"""Span-extraction MRC post-processing: from start/end logits to answer texts and the prediction file.

:func:`decode` is the n-best search of the Hugging Face question-answering
example (``examples/pytorch/question-answering/utils_qa.py``,
``postprocess_qa_predictions``): per feature, the best start and end
candidates among context tokens are paired, spans with ``start <= end`` and at
most ``max_answer_length`` tokens are scored ``start logit + end logit``
(Devlin et al. 2019, BERT §4.2), and an example's answer is its best span over
all its sliding windows (:class:`tasks.downstream.mrc.MrcFeatures`), mapped
back to the original context characters. :func:`write_predictions` writes the
official ``{id: answer}`` file that :func:`tasks.downstream.cmrc_metric.evaluate`
(and the CMRC 2018 / SQuAD v1.1 scripts) score.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence

import numpy as np

from tasks.core.io import write_json_atomic
from tasks.downstream.mrc import MrcFeatures
from tasks.downstream.squad import MrcExample


def _rows(logits: np.ndarray | Sequence[np.ndarray]) -> Iterable[np.ndarray]:
    """Rows (one per feature) of ``[F, L]`` logits or of a list of ``[b, L_batch]`` batches."""
    batches = [logits] if isinstance(logits, np.ndarray) else logits
    for batch in batches:
        batch = np.asarray(batch)
        if batch.ndim != 2:
            raise ValueError(f"logits should be [batch, length] arrays, found shape {batch.shape}")
        yield from batch


def decode(start_logits: np.ndarray | Sequence[np.ndarray], end_logits: np.ndarray | Sequence[np.ndarray],
           features: MrcFeatures, examples: Sequence[MrcExample], n_best: int = 20,
           max_answer_length: int = 30) -> dict[str, str]:
    """Best answer text per example from start/end logits (Hugging Face ``postprocess_qa_predictions``).

    For each feature, the ``n_best`` highest start and end logits among its
    context tokens are combined (an ``n_best x n_best`` grid, NumPy, per
    feature); a span ``(s, e)`` is valid when ``s <= e`` and
    ``e - s + 1 <= max_answer_length`` (tokens); its score is
    ``start_logits[s] + end_logits[e]``. An example's answer is its best valid
    span over all its features, mapped back through the offsets to
    ``context[spans[s][0]:spans[e][1]]`` (the original characters, white space
    and case preserved). Ties go to the earlier window, then the earlier span.

    Args:
        start_logits, end_logits: ``[F, L]`` arrays, or lists of ``[b, L_batch]``
            arrays for consecutive features (what :func:`tasks.downstream.finetune.predict`
            returns); padding positions beyond a feature's length are ignored.
        features: the features the logits are for, in the same order.
        examples: the examples ``features`` were encoded from.
        n_best: start and end candidates per feature.
        max_answer_length: longest answer, in tokens.
    Returns:
        question id -> answer text for every example; ``""`` when no feature has
        a valid span.
    Raises:
        ValueError: the logits do not match the features in number or length.
    """
    if n_best < 1 or max_answer_length < 1:
        raise ValueError(f"n_best ({n_best}) and max_answer_length ({max_answer_length}) must be positive")
    best_score = np.full(len(examples), -np.inf)
    best_span: list[tuple[int, int] | None] = [None] * len(examples)
    lengths = features.lengths
    f = -1
    for f, (start_row, end_row) in enumerate(zip(_rows(start_logits), _rows(end_logits), strict=True)):
        if f >= len(features):
            raise ValueError(f"more logit rows than the {len(features)} features")
        if len(start_row) < lengths[f] or len(end_row) < lengths[f]:
            raise ValueError(f"feature {f} has {lengths[f]} tokens but its logits only {len(start_row)}")
        spans = features.feature_spans(f)
        context = np.flatnonzero(spans[:, 0] >= 0)
        if len(context) == 0:
            continue
        k = min(n_best, len(context))
        s_logit, e_logit = start_row[context], end_row[context]
        top_s = np.sort(context[np.argpartition(-s_logit, k - 1)[:k]])
        top_e = np.sort(context[np.argpartition(-e_logit, k - 1)[:k]])
        score = start_row[top_s][:, None].astype(np.float64) + end_row[top_e][None, :]
        width = top_e[None, :] - top_s[:, None]
        score = np.where((width >= 0) & (width < max_answer_length), score, -np.inf)
        i, j = np.unravel_index(np.argmax(score), score.shape)
        e = int(features.example_index[f])
        if score[i, j] > best_score[e]:
            best_score[e] = score[i, j]
            best_span[e] = (int(spans[top_s[i], 0]), int(spans[top_e[j], 1]))
    if f + 1 != len(features):
        raise ValueError(f"{f + 1} logit rows for {len(features)} features")
    return {ex.id: ex.context[span[0]:span[1]] if span else "" for ex, span in zip(examples, best_span)}


def write_predictions(path: str | os.PathLike, predictions: dict[str, str]) -> None:
    """Write the official prediction file ``{question id: answer text}`` atomically.

    UTF-8 JSON with ``ensure_ascii=False`` and sorted keys (deterministic bytes),
    the format the CMRC 2018 and SQuAD v1.1 evaluation scripts read.
    """
    write_json_atomic(path, {str(k): str(v) for k, v in predictions.items()})
