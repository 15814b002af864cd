"""Span-extraction machine reading comprehension (SQuAD v1 / CMRC 2018 format): examples and features.

The task: given a question and a context, predict the answer as a span of the
context (SQuAD, Rajpurkar et al. 2016). A BERT-style encoder reads
``[CLS] question [SEP] context [SEP]`` and a two-vector head scores every token
as the answer's start and end; the answer is the span maximising
``start logit + end logit`` with ``start <= end`` (Devlin et al. 2019, BERT §4.2).

Pipeline, as in the Hugging Face question-answering example
(``examples/pytorch/question-answering``, ``run_qa.py`` / ``utils_qa.py``):

1. :func:`read_squad` loads a SQuAD v1 / CMRC 2018 JSON file into
   :class:`MrcExample` records, checking every ``answer_start`` under the
   malformed-record policy of :mod:`tasks.core.quality`;
2. :meth:`MrcFeatures.encode` tokenizes each (question, context) pair with a
   fast tokenizer into one or more *features*: sliding windows over contexts
   longer than ``max_length``, overlapping by ``doc_stride`` tokens, each with
   its training labels and its token -> context-character offsets;
3. the shared loop (:mod:`tasks.downstream.finetune`) trains an
   ``AutoModelForQuestionAnswering`` on ``MrcFeatures.batch(index)`` and
   predicts ``start_logits``/``end_logits``;
4. :func:`tasks.downstream.mrc_decode.decode` picks, per example and over all
   its windows, the best valid span and maps it back to the original context
   characters;
5. :func:`tasks.downstream.mrc_decode.write_predictions` writes the official
   ``{id: answer}`` file that :func:`tasks.downstream.cmrc_metric.evaluate`
   (and the official scripts) score.

This module holds steps 1 and 2; :mod:`tasks.downstream.mrc_decode` steps 4
and 5. :func:`tasks.downstream.ner_mrc.ner_to_mrc` turns BIO-tagged NER
sentences into :class:`MrcExample` records (Li et al. 2020).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from tasks.core.errors import ParamsError
from tasks.downstream.squad import MrcExample
from tasks.training.batching import pad_batch

# ---------------------------------------------------------------------------------------------------------------------
# Features: tokenized sliding windows


@dataclass
class MrcFeatures:
    """Tokenized (question, context-window) features, batched for ``*ForQuestionAnswering``.

    Feature ``f`` is tokens ``offsets[f]:offsets[f + 1]`` of the flat arrays.
    Several features may come from one example (long contexts).

    Attributes:
        ids: ``int32 [T]`` token ids, ``[CLS] question [SEP] window [SEP]`` per feature.
        type_ids: ``int8 [T]`` segment ids (0 question, 1 context).
        spans: ``int32 [T, 2]`` ``(start, end)`` character offsets of each token in
            its example's context (end exclusive); ``(-1, -1)`` for tokens outside
            the context (special tokens, question).
        offsets: ``int64 [F + 1]`` feature boundaries.
        example_index: ``int64 [F]`` index of each feature's example in the
            ``examples`` list given to :meth:`encode`.
        start_positions, end_positions: ``int64 [F]`` token index (within the
            feature) of the first answer's first and last token, or 0 (``[CLS]``)
            when the feature's window does not contain the whole answer or the
            example has no answer.
        stats: ``examples``, ``features``; ``questions_answer_in_no_window``:
            questions with answers whose first answer (the training target) no
            window wholly contains, so that every feature of theirs is labelled
            ``[CLS]`` (an answer across a window boundary when ``doc_stride`` is
            small, or longer than a window); ``answers_in_no_window``: gold
            answers (all of them) that no window wholly contains.
    """

    ids: np.ndarray
    type_ids: np.ndarray
    spans: np.ndarray
    offsets: np.ndarray
    example_index: np.ndarray
    start_positions: np.ndarray
    end_positions: np.ndarray
    stats: dict = field(default_factory=dict)

    @classmethod
    def encode(cls, examples: Sequence[MrcExample], tokenizer: PreTrainedTokenizerBase, max_length: int,
               doc_stride: int, max_query_length: int = 64) -> "MrcFeatures":
        """Tokenize examples into sliding-window features.

        Questions are cut to ``max_query_length`` tokens (BERT's
        ``run_squad.py``); then the fast tokenizer is called with
        ``truncation="only_second", return_overflowing_tokens=True,
        stride=doc_stride, return_offsets_mapping=True``: contexts that do not
        fit ``max_length`` tokens are split into windows, consecutive windows
        sharing ``doc_stride`` tokens (Hugging Face semantics: ``doc_stride`` is
        the overlap, not BERT's step). Answers that no window wholly contains
        are counted in :attr:`stats` (their questions train on ``[CLS]`` only).

        Args:
            examples: the examples; features refer to them by index.
            tokenizer: a *fast* (Rust) tokenizer, for offset mappings.
            max_length: tokens per feature, special tokens included.
            doc_stride: overlap of consecutive windows, in tokens.
            max_query_length: question tokens kept.
        Raises:
            ParamsError: the lengths leave no room for a window
                (``doc_stride + question tokens + 3 >= max_length`` for the
                longest question after cutting), or the tokenizer is not fast.
        """
        if not getattr(tokenizer, "is_fast", False):
            raise ParamsError(f"{type(tokenizer).__name__} is not a fast tokenizer; MRC needs offset mappings")
        if max_query_length < 1 or doc_stride < 0:
            raise ParamsError(f"max_query_length ({max_query_length}) must be positive and doc_stride "
                              f"({doc_stride}) not negative")
        empty = np.zeros(0, dtype=np.int64)
        if not examples:
            return cls(np.zeros(0, np.int32), np.zeros(0, np.int8), np.zeros((0, 2), np.int32),
                       np.zeros(1, np.int64), empty, empty, empty, _stats([], 0))

        questions = [ex.question.lstrip() for ex in examples]
        # split_special_tokens: a literal "[SEP]" in a question or passage is text, not a special id
        q_enc = tokenizer(questions, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True,
                          return_attention_mask=False, return_token_type_ids=False)
        questions = [q[:q_off[max_query_length - 1][1]] if len(q_off) > max_query_length else q
                     for q, q_off in zip(questions, q_enc["offset_mapping"])]
        q_len = [min(len(q_off), max_query_length) for q_off in q_enc["offset_mapping"]]
        longest = int(np.argmax(q_len))
        if doc_stride + q_len[longest] + 3 >= max_length:
            raise ParamsError(f"max_length {max_length} leaves no room for a context window: it must exceed "
                              f"doc_stride {doc_stride} + {q_len[longest]} question tokens (question "
                              f"{examples[longest].id}, max_query_length {max_query_length}) + 3 special tokens")
        enc = tokenizer(questions, [ex.context for ex in examples], truncation="only_second",
                        max_length=max_length, stride=doc_stride, return_overflowing_tokens=True,
                        split_special_tokens=True, return_offsets_mapping=True, return_attention_mask=False)

        n = len(enc["input_ids"])
        inside = [np.zeros(len(ex.answers), bool) for ex in examples]  # answer wholly inside some window
        ids, types, spans = [], [], []
        starts, ends = np.zeros(n, np.int64), np.zeros(n, np.int64)
        example_index = np.asarray(enc["overflow_to_sample_mapping"], dtype=np.int64)
        for f in range(n):
            seq = np.array([-1 if s is None else s for s in enc.sequence_ids(f)], dtype=np.int8)
            span = np.asarray(enc["offset_mapping"][f], dtype=np.int32).reshape(-1, 2)
            span[seq != 1] = -1
            ids.append(np.asarray(enc["input_ids"][f], dtype=np.int32))
            types.append(np.asarray(enc["token_type_ids"][f], dtype=np.int8))
            spans.append(span)
            e = example_index[f]
            for a, answer in enumerate(examples[e].answers):
                position = _label(span, *answer)
                if a == 0:
                    starts[f], ends[f] = position
                inside[e][a] |= position != (0, 0)
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        return cls(np.concatenate(ids), np.concatenate(types), np.concatenate(spans),
                   np.concatenate([[0], np.cumsum(lengths)]), example_index, starts, ends, _stats(inside, n))

    def __len__(self) -> int:
        return len(self.example_index)

    @property
    def lengths(self) -> np.ndarray:
        """``int64 [F]`` tokens per feature."""
        return np.diff(self.offsets)

    def feature_spans(self, f: int) -> np.ndarray:
        """``int32 [L_f, 2]`` context character offsets of feature ``f``'s tokens (``-1`` outside the context)."""
        return self.spans[self.offsets[f]:self.offsets[f + 1]]

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        """Right-padded batch of features ``index``.

        Returns:
            ``input_ids``, ``token_type_ids``, ``attention_mask``: ``int64 [B, W]``
            (``W`` the longest selected feature); ``start_positions``,
            ``end_positions``: ``int64 [B]``.
        """
        index = np.asarray(index)
        ids, valid = pad_batch(self.ids, self.offsets, index)
        types, _ = pad_batch(self.type_ids, self.offsets, index)
        return {"input_ids": torch.from_numpy(ids.astype(np.int64)),
                "token_type_ids": torch.from_numpy(types.astype(np.int64)),
                "attention_mask": torch.from_numpy(valid.astype(np.int64)),
                "start_positions": torch.from_numpy(self.start_positions[index].astype(np.int64)),
                "end_positions": torch.from_numpy(self.end_positions[index].astype(np.int64))}


def _stats(inside: list[np.ndarray], features: int) -> dict:
    """:attr:`MrcFeatures.stats` from, per example, whether each answer lies wholly inside some window."""
    return {"examples": len(inside), "features": features,
            "questions_answer_in_no_window": sum(int(len(i) > 0 and not i[0]) for i in inside),
            "answers_in_no_window": sum(int((~i).sum()) for i in inside)}


def _label(span: np.ndarray, text: str, start: int) -> tuple[int, int]:
    """Token indices of the answer ``text`` at ``start`` in one feature, or ``(0, 0)`` if not wholly inside.

    ``span`` is the feature's ``[L, 2]`` context offsets (``-1`` outside the
    context). The answer's characters, white space at its ends excluded, must
    lie within the window's first and last context token; its first token is
    the first one ending after the answer starts, its last the last one
    starting before the answer ends.
    """
    first = start + len(text) - len(text.lstrip())
    last = start + len(text.rstrip())
    context = np.flatnonzero(span[:, 0] >= 0)
    if len(context) == 0 or last <= first:
        return 0, 0
    if span[context[0], 0] > first or span[context[-1], 1] < last:
        return 0, 0
    starts, ends = span[context, 0], span[context, 1]
    overlap = context[(ends > first) & (starts < last)]
    if len(overlap) == 0:
        return 0, 0
    return int(overlap[0]), int(overlap[-1])
