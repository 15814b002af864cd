"""Loader ``squad``: SQuAD v1 / CMRC 2018 JSON files into :class:`MrcExample` records,
every ``answer_start`` checked under the malformed-record policy of :mod:`tasks.core.quality`
(step 1 of :mod:`tasks.downstream.mrc`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.quality import Issues

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


MRC_SCHEMA = pa.schema([("id", pa.string()), ("question", pa.string()), ("context", pa.string()),
                        ("answers", pa.list_(pa.struct([("text", pa.string()), ("start", pa.int32())])))])
"""A prepared MRC split: the family's table (:mod:`tasks.downstream.families.mrc`)."""


def mrc_table(examples: list[MrcExample]) -> pa.Table:
    return pa.table({"id": [e.id for e in examples], "question": [e.question for e in examples],
                     "context": [e.context for e in examples],
                     "answers": [[{"text": t, "start": s} for t, s in e.answers] for e in examples]},
                    schema=MRC_SCHEMA)


def mrc_examples(table: pa.Table) -> list[MrcExample]:
    return [MrcExample(r["id"], r["question"], r["context"], tuple((a["text"], a["start"]) for a in r["answers"]))
            for r in table.to_pylist()]


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


UNLOCATED = -1  # the start of an evaluation answer whose text is not in the context (scored by text alone)


def read_squad(path: Path, issues: Issues, require_answers: bool = True, evaluation: bool = False) -> list[MrcExample]:
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

    With ``evaluation`` (a dev or test file) an ``answer_start`` that does not fit is no issue:
    evaluation scores every gold answer *text*, as the official CMRC 2018 and SQuAD scripts do
    (the CMRC 2018 dev set has 200 extra human answers with ``answer_start: -1`` whose text is not
    in the context); such an answer is moved to its nearest occurrence, or kept at
    :data:`UNLOCATED` when the text does not occur. Only training needs a located span
    (:func:`located`).

    Args:
        path: the JSON file.
        issues: the malformed-record policy and its counters.
        require_answers: see ``no_answer`` above.
        evaluation: the file is scored, not trained on (above).
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
                    if evaluation:
                        answers.append((text, min(found, key=lambda s: (abs(s - start), s)) if found else UNLOCATED))
                        continue
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


def located(examples: list[MrcExample], issues: Issues, where: str) -> list[MrcExample]:
    """Training examples from evaluation-read ones: each keeps only its located answers (the first
    is the training target); an example left without one is dropped (``no_answer`` under
    ``issues``, at ``where#<id>``)."""
    out = []
    for ex in examples:
        answers = tuple(a for a in ex.answers if a[1] != UNLOCATED)
        if len(answers) < len(ex.answers) and not answers:
            issues.found(f"{where}#{ex.id}", "no_answer", "no answer text occurs in the context (training needs a span)")
            continue
        out.append(MrcExample(ex.id, ex.question, ex.context, answers) if len(answers) < len(ex.answers) else ex)
    return out
