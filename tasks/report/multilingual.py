"""Report section "Multilingual continued pretraining": corpus per language, vocabulary
coverage and extension, resampling shares, per-language held-out MLM after continued
pretraining with each mixture, and vocabulary pruning."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from tasks.core.metrics.multilingual import (ContinuePretrainMetrics, LanguageSample, MultilingualMetrics,
                                             PruneVocabMetrics, ResampleMetrics, VocabExtensionMetrics)
from tasks.report.common import fmt, load_metrics, loaded, save_bars, table
from tasks.report.templating import render_blocks


def plot_shares(shares: dict[str, dict[str, float]], languages: list[str], ylabel: str, path: Path) -> Path:
    """Per language, one bar per series (e.g. corpus before / each mixture after), log scale."""
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    width = 0.8 / max(1, len(shares))
    for j, (name, values) in enumerate(shares.items()):
        xs = [i + (j - (len(shares) - 1) / 2) * width for i in range(len(languages))]
        ax.bar(xs, [values.get(lang, np.nan) for lang in languages], width * 0.9, label=name)
    ax.set_xticks(range(len(languages)), languages)
    ax.set_yscale("log")
    return save_bars(fig, ax, ylabel, path)


def _arrow(before: float, after: float) -> str:
    return f"{fmt(before, 2, True)} → {fmt(after, 2, True)}"


def _resampling(resampled: dict[str, ResampleMetrics], figures: Path) -> list[dict]:
    """Each mixture's shares table; plots the token share per language before and after."""
    mixtures = []
    for name, r in resampled.items():
        rows = [[lang, fmt(s.documents), fmt(s.mean_length, 1), fmt(s.probability, 2, True),
                 _arrow(s.document_share_before, s.document_share_after),
                 _arrow(s.token_share_before, s.token_share_after), fmt(s.repeat_factor, 2), fmt(s.max_copies)]
                for lang, s in r.languages.items()]
        mixtures.append({"name": name, "run": r, "table": table(
            ["language", "n_i", "l_i", "p_i %", "document share %", "token share %", "repeats", "max copies"], rows)})
    first: dict[str, LanguageSample] = next(iter(resampled.values())).languages
    shares = {"corpus": {lang: s.token_share_before for lang, s in first.items()}}
    shares.update({name: {lang: s.token_share_after for lang, s in r.languages.items()}
                   for name, r in resampled.items()})
    plot_shares(shares, list(first), "token share (log scale)", figures / "language_token_shares.png")
    return mixtures


def _continued(continued: dict[str, ContinuePretrainMetrics]) -> dict:
    """Held-out accuracy / perplexity per language before and after each mixture, and the
    accuracy gain of resampling over natural proportions when both ran."""
    base = next(iter(continued.values())).heldout.before
    header = ["language", "predictions", "before: acc % / ppl"] + [f"{n}: acc % / ppl" for n in continued]
    cell = lambda m: f"{fmt(m.accuracy, 1, True)} / {fmt(m.perplexity, 1)}"  # noqa: E731
    rows = [[lang, fmt(b.predictions), cell(b)] + [cell(c.heldout.after[lang]) for c in continued.values()]
            for lang, b in base.items()]
    gains = better = None
    if {"natural", "resampled"} <= set(continued):
        natural, resampled = (continued[k].heldout.after for k in ("natural", "resampled"))
        gains = [(lang, resampled[lang].accuracy - natural[lang].accuracy)
                 for lang in base if natural[lang].accuracy is not None]
        better = [lang for lang, gain in gains if gain > 0]
    return {"run": next(iter(continued.values())), "table": table(header, rows), "gains": gains, "better": better}


def _pruning(pruned: PruneVocabMetrics) -> dict:
    rows = [["vocabulary", fmt(pruned.vocab_size.before), fmt(pruned.vocab_size.after)],
            ["parameters", fmt(pruned.parameters.before), fmt(pruned.parameters.after)],
            ["model.safetensors (MB)", fmt(pruned.model_bytes.before / 1e6, 2), fmt(pruned.model_bytes.after / 1e6, 2)]]
    diff = pruned.max_abs_logit_diff
    return {"run": pruned, "table": table(["", "before", "after"], rows),
            "max_diff": float("nan") if diff is None else diff}


def multilingual_section(metrics: Path, mixtures: list[str], figures: Path) -> str:
    """The section's Markdown; writes ``language_token_shares.png`` into ``figures`` once resampling ran."""
    corpus = load_metrics(metrics / "multilingual.json", MultilingualMetrics)
    if corpus is None:
        return render_blocks("multilingual.md.j2", corpus=None)
    vocab = load_metrics(metrics / "vocab_extension.json", VocabExtensionMetrics)
    coverage = table(["language", "Chinese BERT: [UNK] % / tokens per char", "pipeline tokenizer", "extended"],
                     [[lang] + [f"{fmt(c.unk_rate, 1, True)} / {fmt(c.tokens_per_char, 2)}"
                                for c in (cov.chinese_bert, cov.base, cov.extended)]
                      for lang, cov in vocab.coverage.items()]) if vocab else None
    resampled = loaded(metrics, ResampleMetrics, mixtures)
    continued = loaded(metrics, ContinuePretrainMetrics, mixtures)
    pruned = load_metrics(metrics / "prune_vocab.json", PruneVocabMetrics)
    languages = table(["language", "script", "documents", "held out", "characters", "dropped short", "duplicates"],
                      [[lang, s.script, fmt(s.documents), fmt(s.heldout), fmt(s.characters), fmt(s.short),
                        fmt(s.duplicates)] for lang, s in corpus.languages.items()])
    return render_blocks("multilingual.md.j2", corpus=corpus, languages=languages, vocab=vocab, coverage=coverage,
                         resampled=_resampling(resampled, figures) if resampled else None,
                         continued=_continued(continued) if continued else None,
                         pruned=_pruning(pruned) if pruned else None)
