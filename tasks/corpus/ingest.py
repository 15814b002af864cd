"""Ingest: read raw corpus files into documents of normalised sentences.

Output (``data/corpus/sentences.parquet``), one row per sentence, in corpus order:

========  ========  ==================================================
column    type      meaning
========  ========  ==================================================
doc_id    string    ``<source>-<n>``: the document the sentence is from, unique
                    (``n`` counts on across the files of a source)
sent_id   int32     position of the sentence in its document (0-based)
lang      string    ISO 639 code of the input (params ``corpus.inputs[].lang``)
source    string    the source name in params
text      string    the normalised sentence (:func:`tasks.core.text.normalise`)
========  ========  ==================================================

Records (documents) with no text after normalisation, including null or empty
Parquet values, and exact duplicates of an earlier document are dropped; so is
every sentence that also occurs in a downstream evaluation split (to keep
evaluation text out of pretraining), every sentence shorter than
``corpus.min_sentence_chars``, and a document left with no sentence. All drops
are counted in the stats (stage metrics ``dropped``). Blank lines of ``txt`` and
``jsonl`` files separate records and are not records themselves.

Out of core: every reader streams its file and the sentences are written in row groups of
``shards.rows`` rows as they come, so memory holds one row group, the evaluation
sentences and the dedupe set: 64-bit hashes of the documents seen
(:func:`tasks.core.text.text_hash`), about 60 bytes per kept document in a Python set,
i.e. ~120 MB per billion characters of 500-character documents.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq
from prefect import get_run_logger

from tasks.core.errors import SourceError
from tasks.core.io import ParquetStream, numbered_lines, stream_parquet
from tasks.core.paths import source_file
from tasks.core.stage import stage_task
from tasks.core.text import join_words, normalise, split_sentences, text_hash

SCHEMA = pa.schema([("doc_id", pa.string()), ("sent_id", pa.int32()), ("lang", pa.string()),
                    ("source", pa.string()), ("text", pa.string())])

_SUFFIX_FORMATS = {".txt": "txt", ".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".parquet": "parquet"}
_SENTENCE_FINAL = tuple("。！？!?”」』…：；")
_TRAILING_PARENTHETICAL = re.compile(r"[（(][^（）()]*[）)]$")


def read_peoples_daily(path: Path) -> Iterator[list[str]]:
    """Documents (lists of paragraphs) of the People's Daily 1998 corpus.

    Each line is a paragraph of ``word/POS`` tokens (``中共中央/nt  总书记/n``); the
    tags are stripped and the words joined (:func:`tasks.core.text.join_words`). The
    file carries no article ids, so an article is recovered from layout: a new
    one starts at a headline, i.e. a line that does not end in sentence-final
    punctuation, following a line that does. A trailing parenthetical (photo
    credit, "（附图片１张）") is ignored in that test, and a line wholly in
    parentheses (a date line) neither starts nor ends an article.

    Raises:
        SourceError: a token lacks its ``/POS`` tag (names file and line).
    """
    doc: list[str] = []
    prev_terminated = True
    for number, line in numbered_lines(path):
        tokens = line.split()
        if not tokens:
            continue
        words = []
        for tok in tokens:
            word, sep, tag = tok.rpartition("/")
            if not sep or not word or not tag:
                raise SourceError(f"{path}:{number}: token {tok!r} is not in word/POS format")
            words.append(word)
        text = join_words(words)
        doc.append(text)
        body = _TRAILING_PARENTHETICAL.sub("", text)
        if not body:
            continue
        terminated = body.endswith(_SENTENCE_FINAL)
        if not terminated and prev_terminated and len(doc) > 1:
            yield doc[:-1]
            doc = doc[-1:]
        prev_terminated = terminated
    if doc:
        yield doc


_JSON_SNIFF_LINES = 100


def _is_json_object(line: str) -> bool:
    if not line.lstrip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except json.JSONDecodeError:
        return False


def _read_txt(path: Path, _field: str) -> Iterator[list[str]]:
    lines = (line for _, line in numbered_lines(path) if line.strip())
    # A JSON-lines file declared as txt would be ingested as raw JSON text: refuse it when
    # most of its first lines are JSON objects (prose practically never is).
    head = list(itertools.islice(lines, _JSON_SNIFF_LINES))
    n_json = sum(map(_is_json_object, head))
    if n_json * 2 > len(head):
        raise SourceError(f"{path}: {n_json} of its first {len(head)} non-empty lines are JSON objects: "
                          f"this is JSON lines, not plain text; declare it with format: jsonl")
    for line in itertools.chain(head, lines):
        yield [line]


def _read_jsonl(path: Path, text_field: str) -> Iterator[list[str]]:
    for number, line in numbered_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{path}:{number}: invalid JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise SourceError(f"{path}:{number}: record has no string field {text_field!r}")
        yield [record[text_field]]


# A pretraining document may be a whole article: allow fields far beyond csv's 128 KB default.
CSV_FIELD_LIMIT = 2**31 - 1


def _read_csv(path: Path, text_field: str) -> Iterator[list[str]]:
    csv.field_size_limit(CSV_FIELD_LIMIT)
    # line ends as "\n": a quoted field spanning lines reads the same whatever the file's ends
    reader = csv.DictReader(line + "\n" for _, line in numbered_lines(path))
    try:
        if reader.fieldnames is None or text_field not in reader.fieldnames:
            raise SourceError(f"{path}:1: CSV header has no column {text_field!r} (columns: {reader.fieldnames})")
        for row in reader:
            if row[text_field] is None:
                raise SourceError(f"{path}:{reader.line_num}: row has fewer columns than the header")
            yield [row[text_field]]
    except csv.Error as exc:
        raise SourceError(f"{path}:{reader.line_num}: unreadable CSV record ({exc}; an unclosed quote?)") from None


def _read_parquet(path: Path, text_field: str) -> Iterator[list[str]]:
    try:
        pf = stream_parquet(path)
    except (pa.ArrowException, OSError) as exc:
        raise SourceError(f"{path}: not a readable Parquet file ({exc})") from None
    if text_field not in pf.schema_arrow.names:
        raise SourceError(f"{path}: Parquet file has no column {text_field!r} (columns: {pf.schema_arrow.names})")
    i = 0
    for batch in pf.iter_batches(batch_size=1 << 14, columns=[text_field]):
        for value in batch.column(0).to_pylist():
            if value is not None and not isinstance(value, str):
                raise SourceError(f"{path}: row {i}: column {text_field!r} is not a string")
            yield [value or ""]  # a null or empty record is counted as empty by build_corpus
            i += 1


READERS = {"peoples_daily": lambda p, _f: read_peoples_daily(p), "txt": _read_txt, "jsonl": _read_jsonl,
           "csv": _read_csv, "parquet": _read_parquet}


def read_documents(path: Path, fmt: str, text_field: str = "text") -> Iterator[list[str]]:
    """Documents (lists of paragraphs) of one corpus file.

    ``fmt``: ``peoples_daily``; ``txt`` (one document a line); ``jsonl``, ``csv``,
    ``parquet`` (one document a record, text in ``text_field``); ``auto`` picks by
    file suffix.

    Raises:
        SourceError: unknown format or malformed content (names file and line/row),
            or a ``txt`` file that is JSON lines (suggests ``format: jsonl``).
    """
    if fmt == "auto":
        fmt = _SUFFIX_FORMATS.get(path.suffix.lower(), "")
        if not fmt:
            raise SourceError(f"{path}: cannot tell the format from the suffix; set 'format' in corpus.inputs")
    return READERS[fmt](path, text_field)


@dataclass
class IngestStats:
    """Counts per language, plus what was dropped and why: records with no text after
    normalisation, duplicate documents, evaluation-overlap and short sentences, and
    documents left with no sentence after those sentence drops."""

    documents: dict[str, int] = field(default_factory=dict)
    sentences: dict[str, int] = field(default_factory=dict)
    characters: dict[str, int] = field(default_factory=dict)
    dropped_empty_records: int = 0
    dropped_empty_documents: int = 0
    dropped_duplicate_documents: int = 0
    dropped_eval_sentences: int = 0
    dropped_short_sentences: int = 0

    def to_dict(self) -> dict:
        langs = sorted(self.documents)
        return {
            "languages": {lang: {"documents": self.documents[lang], "sentences": self.sentences[lang],
                                 "characters": self.characters[lang]} for lang in langs},
            "dropped": {"empty_records": self.dropped_empty_records,
                        "empty_documents": self.dropped_empty_documents,
                        "duplicate_documents": self.dropped_duplicate_documents,
                        "eval_overlap_sentences": self.dropped_eval_sentences,
                        "short_sentences": self.dropped_short_sentences},
        }


def build_corpus(inputs: Iterable[tuple[str, str, Iterable[list[str]]]], eval_sentences: set[str],
                 min_sentence_chars: int, out: ParquetStream) -> IngestStats:
    """Normalise, split, deduplicate and filter documents into a sentence table, streaming.

    Args:
        inputs: ``(source, lang, documents)`` triples; a document is a list of paragraphs.
        eval_sentences: normalised sentences of downstream evaluation splits, to remove.
        min_sentence_chars: shorter sentences are dropped.
        out: where the sentences go (:data:`SCHEMA`), a row group at a time.

    Returns:
        The stats.

    Raises:
        SourceError: no sentence is left (empty corpus).
    """
    stats = IngestStats()
    seen_docs: set[int] = set()
    n_docs: dict[str, int] = {}  # per source, across its files: a doc_id is never reused
    cols: dict[str, list] = {name: [] for name in SCHEMA.names}
    sources = []

    def flush() -> None:
        out.write(pa.table(cols, schema=SCHEMA))
        for values in cols.values():
            values.clear()

    for source, lang, documents in inputs:
        sources.append(source)
        for counter in (stats.documents, stats.sentences, stats.characters):
            counter.setdefault(lang, 0)
        for paragraphs in documents:
            sentences = [s for p in paragraphs for s in split_sentences(normalise(p))]
            if not sentences:
                stats.dropped_empty_records += 1
                continue
            key = text_hash("\n".join(sentences))
            if key in seen_docs:
                stats.dropped_duplicate_documents += 1
                continue
            seen_docs.add(key)
            kept = []
            for s in sentences:
                if s in eval_sentences:
                    stats.dropped_eval_sentences += 1
                elif len(s) < min_sentence_chars:
                    stats.dropped_short_sentences += 1
                else:
                    kept.append(s)
            if not kept:
                stats.dropped_empty_documents += 1
                continue
            n_docs[source] = n_docs.get(source, -1) + 1
            doc_id = f"{source}-{n_docs[source]:06d}"
            for i, s in enumerate(kept):
                cols["doc_id"].append(doc_id)
                cols["sent_id"].append(i)
                cols["lang"].append(lang)
                cols["source"].append(source)
                cols["text"].append(s)
            stats.documents[lang] += 1
            stats.sentences[lang] += len(kept)
            stats.characters[lang] += sum(map(len, kept))
            if len(cols["text"]) >= out.row_group_rows:
                flush()
    flush()
    if not sum(stats.sentences.values()):
        raise SourceError(f"empty corpus: no sentence left after ingesting source(s) {', '.join(sources)}")
    return stats


@stage_task
def ingest_corpus(corpus, raw_dir: Path, eval_sentences: set[str], output: Path, rows: int) -> IngestStats:
    """:func:`build_corpus` of every input of the ``corpus`` params, read from the acquired
    files under ``raw_dir``, written to ``output`` in row groups of ``rows`` rows (write to a
    temporary: wrap in :func:`tasks.core.io.atomic_outputs`)."""
    inputs = ((item.source, item.lang,
               read_documents(source_file(raw_dir, item.source, item.file), item.format, item.text_field))
              for item in corpus.inputs)
    with ParquetStream(output, SCHEMA, rows) as out:
        stats = build_corpus(inputs, eval_sentences, corpus.min_sentence_chars, out)
    get_run_logger().info(f"corpus: {stats.to_dict()}")
    return stats


@stage_task
def load_eval_sentences(folder: Path) -> set[str]:
    """Normalised sentences of the evaluation text of every prepared downstream task
    (``<folder>/<task>.parquet``, :func:`tasks.core.paths.eval_texts`)."""
    texts = [t for path in sorted(Path(folder).glob("*.parquet"))
             for t in pq.read_table(path, columns=["text"]).column("text").to_pylist()]
    return {s for t in texts for s in split_sentences(normalise(t))}
