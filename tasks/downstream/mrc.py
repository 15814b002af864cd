"""Span-extraction machine reading comprehension (SQuAD v1 / CMRC 2018 format).

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
4. :func:`decode` picks, per example and over all its windows, the best valid
   span and maps it back to the original context characters;
5. :func:`write_predictions` writes the official ``{id: answer}`` file that
   :func:`tasks.downstream.cmrc_metric.evaluate` (and the official scripts) score.

:func:`ner_to_mrc` turns BIO-tagged NER sentences into MRC examples: one
question per entity type (Li et al. 2020, "A Unified MRC Framework for Named
Entity Recognition", ACL), so NER can be run through the same span head.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from tasks.core.errors import ParamsError, SourceError
from tasks.core.io import write_json_atomic
from tasks.core.quality import Issues
from tasks.training.batching import pad_batch

Answer = tuple[str, int]  # (text, start character in the context)


@dataclass(frozen=True)
class MrcExample:
    """One question about one context.

    Attributes:
        id: question id (unique within a dataset; the key of the prediction file).
        question: the question text.
        context: the passage, exactly as in the source (offsets refer to it).
        answers: gold answers ``((text, start), ...)`` with
            ``context[start:start + len(text)] == text``; the first one is the
            training target. Empty for unlabelled (prediction-only) data.
    """

    id: str
    question: str
    context: str
    answers: tuple[Answer, ...]


def gold_texts(examples: Iterable[MrcExample]) -> dict[str, list[str]]:
    """question id -> gold answer texts, the ``gold`` argument of :func:`tasks.downstream.cmrc_metric.evaluate`."""
    return {ex.id: [text for text, _ in ex.answers] for ex in examples}


# ---------------------------------------------------------------------------------------------------------------------
# Loading SQuAD / CMRC 2018 JSON


def _occurrences(context: str, text: str) -> list[int]:
    """Every start of ``text`` in ``context``, overlapping occurrences included."""
    found, i = [], context.find(text)
    while i != -1:
        found.append(i)
        i = context.find(text, i + 1)
    return found


def _get(obj: Any, key: str, kind: type, path: Path, where: str) -> Any:
    if not isinstance(obj, dict):
        raise SourceError(f"{path}{where}: expected a JSON object, found {type(obj).__name__}")
    if key not in obj:
        raise SourceError(f"{path}{where}: missing key {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SourceError(f"{path}{where}: {key!r} should be {kind.__name__}, found {type(value).__name__}")
    return value


def read_squad(path: Path, issues: Issues, require_answers: bool = True) -> list[MrcExample]:
    """Examples of a SQuAD v1.1 / CMRC 2018 file, in file order.

    Format: ``{"data": [{"paragraphs": [{"context": str, "qas": [{"id": str,
    "question": str, "answers": [{"text": str, "answer_start": int}]}]}]}]}``
    (extra keys such as ``title`` or ``version`` are ignored). Question ids are
    stripped of surrounding white space, as the official CMRC evaluation does;
    contexts, questions and answers are kept verbatim so offsets stay valid.

    Malformed records go through ``issues`` (``where`` is ``f"{path}#{qid}"``):

    * ``answer_start``: ``context[start:start + len(text)] != text``. Repair:
      move the answer to the occurrence of ``text`` in the context nearest to
      the given start (the earlier one on a tie). Not repairable when ``text``
      does not occur in the context; the answer is then dropped.
    * ``empty_answer``: an answer with empty text (not repairable; dropped).
    * ``no_answer``: a question without answers, in the source or after the
      drops above (not repairable; the question is dropped). With
      ``require_answers=False`` a question with no answers *in the source* is
      kept with ``answers=()`` (unlabelled data for prediction).
    * ``duplicate_id``: a question id seen before in the file (not repairable;
      the later question is dropped).

    Args:
        path: the JSON file.
        issues: the malformed-record policy and its counters.
        require_answers: see ``no_answer`` above.
    Returns:
        The examples, one per kept question.
    Raises:
        SourceError: the file is missing, not UTF-8 or not JSON; a required key
            is missing or has the wrong type (the message names the file and
            the question id when known); or the policy is ``fail`` and a record
            is malformed.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SourceError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise SourceError(f"{path}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None

    examples: list[MrcExample] = []
    seen: set[str] = set()
    for i, article in enumerate(_get(raw, "data", list, path, "")):
        for j, paragraph in enumerate(_get(article, "paragraphs", list, path, f": data[{i}]")):
            here = f": data[{i}].paragraphs[{j}]"
            context = _get(paragraph, "context", str, path, here)
            for k, qa in enumerate(_get(paragraph, "qas", list, path, here)):
                qid = _get(qa, "id", str, path, f"{here}.qas[{k}]").strip()
                where = f"{path}#{qid}"
                question = _get(qa, "question", str, path, f"#{qid}")
                source_answers = _get(qa, "answers", list, path, f"#{qid}")
                if qid in seen:
                    issues.found(where, "duplicate_id", f"question id {qid!r} occurs more than once")
                    continue
                seen.add(qid)
                answers: list[Answer] = []
                for n, answer in enumerate(source_answers):
                    text = _get(answer, "text", str, path, f"#{qid}: answers[{n}]")
                    start = _get(answer, "answer_start", int, path, f"#{qid}: answers[{n}]")
                    if not text:
                        issues.found(where, "empty_answer", f"answers[{n}] has empty text")
                        continue
                    if context[start:start + len(text)] == text:
                        answers.append((text, start))
                        continue
                    found = _occurrences(context, text)
                    detail = (f"answers[{n}] {text[:20]!r} does not start at answer_start {start}; "
                              + (f"nearest occurrence at {min(found, key=lambda s: (abs(s - start), s))}"
                                 if found else "the text does not occur in the context"))
                    if issues.found(where, "answer_start", detail, repairable=bool(found)):
                        answers.append((text, min(found, key=lambda s: (abs(s - start), s))))
                if not answers and (source_answers or require_answers):
                    issues.found(where, "no_answer", "question has no (valid) answer")
                    continue
                examples.append(MrcExample(qid, question, context, tuple(answers)))
    return examples


# ---------------------------------------------------------------------------------------------------------------------
# NER as MRC (Li et al. 2020)

DEFAULT_QUERIES: dict[str, str] = {
    "PER": "文中提到了哪些人？找出人名，包括真实或虚构人物的姓名、字号、笔名和译名。",
    "LOC": "文中提到了哪些地点？找出地名，包括国家、省市、城镇、山川、河流、海洋等地理位置。",
    "ORG": "文中提到了哪些组织？找出机构名，包括公司、政府部门、政党、学校、媒体、团体等组织机构。",
}
"""Queries for the MSRA NER types (person, location, organisation).

Natural-language questions in the spirit of the annotation-guideline queries of
Li et al. (2020, Table 2 / §4.3): each names the type and gives examples of what
counts, so the encoder sees the type's definition. The wording is ours.
"""


def bio_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """``(type, first token, last token + 1)`` of every entity in a BIO tag sequence.

    ``B-X`` opens an entity, ``I-X`` continues an open ``X`` entity, ``O``
    closes. An ``I-X`` that does not continue an ``X`` entity opens a new one
    (the lenient conlleval reading; strict BIO checking belongs to the NER
    loader's malformed-record policy).

    >>> bio_spans(["B-PER", "I-PER", "O", "I-LOC"])
    [('PER', 0, 2), ('LOC', 3, 4)]
    """
    spans: list[tuple[str, int, int]] = []
    kind, start = None, 0
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, label = tag.partition("-")
        if kind is not None and not (prefix == "I" and label == kind):
            spans.append((kind, start, i))
            kind = None
        if prefix == "B" or (prefix == "I" and kind is None):
            kind, start = label, i
    return spans


def ner_to_mrc(sentences: Iterable[Any], queries: dict[str, str] = DEFAULT_QUERIES,
               single_answer: bool = True) -> list[MrcExample]:
    """The query-based MRC formulation of NER (Li et al. 2020), as SQuAD v1 examples.

    For each sentence and each entity type in ``queries`` (in the dict's order),
    one question ``queries[type]`` about the context ``"".join(tokens)`` whose
    answers are the entities of that type, as character offsets into the context.

    * ``single_answer=True``: only (sentence, type) pairs with exactly one
      entity of the type become questions (unambiguous single-span targets for
      a SQuAD head).
    * ``single_answer=False``: every pair with at least one entity; all its
      entities are gold answers, in order. A SQuAD head trains on the first
      only, and :func:`tasks.downstream.cmrc_metric.evaluate` scores a prediction against
      the best-matching one: this is an approximation of the paper's
      multi-span extraction, which needs a different head.

    Pairs with no entity of the type are not questions (SQuAD v1 has no
    unanswerable questions). Types without a query are ignored.

    Args:
        sentences: objects with ``id``, ``tokens: list[str]`` (characters, or
            any strings: offsets use their lengths) and ``tags: list[str]`` (BIO,
            e.g. ``B-PER``), ``len(tags) == len(tokens)``.
        queries: entity type -> question text.
        single_answer: see above.
    Returns:
        Examples with ids ``f"{sentence.id}-{type}"``.
    Raises:
        ValueError: a sentence has different numbers of tokens and tags.
    """
    examples: list[MrcExample] = []
    for sentence in sentences:
        tokens, tags = list(sentence.tokens), list(sentence.tags)
        if len(tokens) != len(tags):
            raise ValueError(f"sentence {sentence.id}: {len(tokens)} tokens but {len(tags)} tags")
        starts = np.concatenate([[0], np.cumsum([len(t) for t in tokens], dtype=np.int64)])
        context = "".join(tokens)
        by_type: dict[str, list[Answer]] = {}
        for kind, first, stop in bio_spans(tags):
            a, b = int(starts[first]), int(starts[stop])
            by_type.setdefault(kind, []).append((context[a:b], a))
        for kind, query in queries.items():
            answers = by_type.get(kind, [])
            if not answers or (single_answer and len(answers) != 1):
                continue
            examples.append(MrcExample(f"{sentence.id}-{kind}", query, context, tuple(answers)))
    return examples


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
        q_enc = tokenizer(questions, add_special_tokens=False, return_offsets_mapping=True,
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
                        return_offsets_mapping=True, return_attention_mask=False)

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


# ---------------------------------------------------------------------------------------------------------------------
# Post-processing


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
