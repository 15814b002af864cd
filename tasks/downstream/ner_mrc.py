"""NER as span-extraction MRC: one question per entity type (Li et al. 2020).

Li, Feng, Meng, Han, Wu and Li (2020), "A Unified MRC Framework for Named
Entity Recognition", ACL: a sentence tagged with entities becomes, for each
entity type, a question naming the type (:data:`DEFAULT_QUERIES`) about the
sentence, whose answers are the entities of that type, so NER can be run
through the same SQuAD span head as :mod:`tasks.downstream.mrc`.
:func:`ner_to_mrc` builds those :class:`~tasks.downstream.squad.MrcExample`
records; :func:`bio_spans` reads the entities off a BIO tag sequence (the
lenient reading of the CoNLL ``conlleval`` script).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from tasks.downstream.squad import Answer, MrcExample

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
