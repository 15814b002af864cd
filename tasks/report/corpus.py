"""Report section "Corpus": pretraining text per language, what ingest dropped, word
segmentation, the tokenizer, and the downstream splits."""

from __future__ import annotations

from pathlib import Path

from tasks.core.metrics.corpus import CorpusMetrics, SegmentMetrics, TokenizeMetrics
from tasks.core.metrics.downstream import DownstreamMetrics
from tasks.report.common import fmt, load_metrics, table
from tasks.report.templating import render_blocks


def corpus_section(metrics: Path, tasks: list[str]) -> str:
    """The section's Markdown (empty when no stage it covers has run)."""
    corpus = load_metrics(metrics / "corpus.json", CorpusMetrics)
    languages = table(["language", "documents", "sentences", "characters"],
                      [[lang, fmt(s.documents), fmt(s.sentences), fmt(s.characters)]
                       for lang, s in corpus.languages.items()]) if corpus else None
    rows = []
    for task in tasks:
        m = load_metrics(metrics / "downstream" / f"{task}.json", DownstreamMetrics)
        if m:
            bad = ", ".join(f"{k} {v}" for k, v in m.malformed.counts.items()) or "none"
            rows.append([task, *(fmt(m.rows[s]) for s in ("train", "dev", "test")), bad])
    downstream = table(["task", "train", "dev", "test", "malformed records"], rows) if rows else None
    return render_blocks("corpus.md.j2", corpus=corpus, languages=languages,
                         segment=load_metrics(metrics / "segment.json", SegmentMetrics),
                         tokenizer=load_metrics(metrics / "tokenize.json", TokenizeMetrics), downstream=downstream)
