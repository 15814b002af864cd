"""The evaluation report: Markdown for people and git, and a self-contained HTML page.

The report is built only from the pipeline's metrics files (``metrics/``),
``params.yaml``, ``dvc.lock`` and git, so it can be regenerated at any commit.
Plots are PNG files (matplotlib, Agg backend) next to the Markdown and inlined
as data URIs in the HTML, so the page works offline and with no CDN.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import markdown
import matplotlib
import numpy as np
import pyarrow.parquet as pq
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from tasks.core.io import read_json, read_jsonl  # noqa: E402

# --------------------------------------------------------------------------- formatting


def fmt(value, digits: int = 2, percent: bool = False) -> str:
    """A number for a table cell; ``-`` for missing values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if percent:
        return f"{100 * value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def max_avg(summary: dict, digits: int = 1) -> str:
    """HFL-style cell: ``max (mean ± std)`` of a per-seed summary, in percent."""
    return (f"{fmt(summary['max'], digits, True)} ({fmt(summary['mean'], digits, True)}"
            f" ± {fmt(summary['std'], digits, True)})")


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def read_csv(path: Path) -> list[dict]:
    """Rows of a numeric CSV log; empty cells (e.g. no sentence loss) are ``None``."""
    with open(path, newline="") as f:
        return [{k: float(v) if v != "" else None for k, v in row.items()} for row in csv.DictReader(f)]


# --------------------------------------------------------------------------- provenance


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def provenance(lock_file: Path = Path("dvc.lock")) -> dict:
    """Git commit (and whether the tree has uncommitted changes) and the content
    hashes DVC recorded for every stage output in ``dvc.lock``."""
    import yaml

    outs = {}
    if lock_file.is_file():
        lock = yaml.safe_load(lock_file.read_text()) or {}
        for stage in (lock.get("stages") or {}).values():
            for out in stage.get("outs", []):
                outs[out["path"]] = out.get("md5") or out.get("hash", "")
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    return {"commit": commit or "(no commit)", "dirty": dirty, "outs": outs}


def previous_metrics(path: Path, rev: str = "HEAD") -> dict | None:
    """The committed version of a metrics file at ``rev``, if any (for "what changed")."""
    text = _git("show", f"{rev}:{path.as_posix()}")
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


# --------------------------------------------------------------------------- plots


def plot_curves(curves: dict[str, list[dict]], y: str, ylabel: str, path: Path) -> Path:
    """One line per run (e.g. objective) of column ``y`` against tokens seen."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for name, rows in sorted(curves.items()):
        ax.plot([r["tokens"] / 1e6 for r in rows], [r[y] for r in rows], label=name, linewidth=1.4)
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig, path: Path) -> Path:
    """Write ``fig`` as PNG, cropped to its content, and free it (pyplot keeps open figures alive)."""
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


# --------------------------------------------------------------------------- document


@dataclass
class Report:
    """A Markdown document under construction, with the figures it references."""

    title: str
    parts: list[str] = field(default_factory=list)

    def section(self, heading: str, *blocks: str) -> None:
        self.parts.append(f"## {heading}\n\n" + "\n\n".join(b for b in blocks if b))

    def markdown(self) -> str:
        return f"# {self.title}\n\n" + "\n\n".join(self.parts) + "\n"


_IMG = re.compile(r'<img alt="([^"]*)" src="([^"]+)"')

_CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
table{border-collapse:collapse;margin:1em 0;font-size:.92em}th,td{border:1px solid #ccc;padding:.3em .6em;text-align:right}
th{background:#f2f4f7}td:first-child,th:first-child{text-align:left}code,pre{background:#f6f8fa}
pre{padding:.8em;overflow-x:auto;font-size:.85em}img{max-width:100%}h2{border-bottom:1px solid #ddd;padding-bottom:.2em}"""


def to_html(md_text: str, base: Path, title: str) -> str:
    """Self-contained HTML: Markdown rendered, images inlined as base64 PNG data URIs."""
    body = markdown.markdown(md_text, extensions=["tables", "fenced_code"])

    def inline(m: re.Match) -> str:
        data = base64.b64encode((base / m.group(2)).read_bytes()).decode()
        return f'<img alt="{m.group(1)}" src="data:image/png;base64,{data}"'

    body = _IMG.sub(inline, body)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_CSS}</style></head><body>\n{body}\n</body></html>\n")


def load_metrics(path: Path) -> dict | None:
    return read_json(path) if path.is_file() else None


# --------------------------------------------------------------------------- the pipeline report


def corpus_section(metrics: Path, tasks: list[str]) -> list[str]:
    corpus, tok = load_metrics(metrics / "corpus.json"), load_metrics(metrics / "tokenize.json")
    seg = load_metrics(metrics / "segment.json")
    blocks = []
    if corpus:
        rows = [[lang, fmt(s["documents"]), fmt(s["sentences"]), fmt(s["characters"])]
                for lang, s in corpus["languages"].items()]
        blocks.append(table(["language", "documents", "sentences", "characters"], rows))
        d = corpus["dropped"]
        blocks.append(f"Dropped: {fmt(d.get('empty_records', 0))} empty records; "
                      f"{fmt(d['empty_documents'])} documents left without a sentence and "
                      f"{fmt(d['duplicate_documents'])} duplicate documents; {fmt(d['eval_overlap_sentences'])} sentences that occur in a downstream "
                      f"evaluation split; {fmt(d['short_sentences'])} sentences that are too short.")
    if seg:
        blocks.append(f"jieba segmentation: {fmt(seg['words'])} words, {fmt(seg['mean_word_chars'])} characters "
                      f"per word, {fmt(seg['chars_per_sec'], 0)} characters/s on {seg['workers']} worker(s).")
    if tok:
        blocks.append(f"Tokenizer: {fmt(tok['vocab_size'])} entries; {fmt(tok['tokens'])} tokens, "
                      f"[UNK] rate {fmt(tok['unk_rate'], 2, True)}%, {fmt(tok['tokens_per_char'], 3)} tokens "
                      f"per character.")
    rows = []
    for task in tasks:
        m = load_metrics(metrics / "downstream" / f"{task}.json")
        if m:
            bad = ", ".join(f"{k} {v}" for k, v in m["malformed"]["counts"].items()) or "none"
            rows.append([task, *(fmt(m["rows"][s]) for s in ("train", "dev", "test")), bad])
    if rows:
        blocks.append("Downstream data (after the budget caps in `tasks.<name>.limit`):\n\n"
                      + table(["task", "train", "dev", "test", "malformed records"], rows))
    return blocks


def describe_objective(spec: dict) -> str:
    """``wwm; mask 80 / random 10 / keep 10; + SOP; dynamic`` for an objective's params."""
    shares = spec.get("replacement") or {"mask": 0.8, "random": 0.1, "keep": 0.1}
    parts = [spec["masking"], " / ".join(f"{k} {100 * v:g}" for k, v in shares.items() if v)]
    if spec.get("sentence_task"):
        parts.append(f"+ {spec['sentence_task'].upper()}")
    parts.append("dynamic" if spec.get("dynamic") else "static")
    return "; ".join(parts)


def pretraining_section(metrics: Path, objectives: list[str], specs: dict, figures: Path) -> list[str]:
    rows, curves = [], {}
    for name in objectives:
        data, run = load_metrics(metrics / "pretraining_data" / f"{name}.json"), \
            load_metrics(metrics / "pretrain" / f"{name}.json")
        log = metrics / "pretrain" / f"{name}.csv"
        if log.is_file():
            curves[name] = read_csv(log)
        if data and run:
            chosen = "-" if data.get("dynamic") else fmt(data["chosen_rate"], 2, True)
            fallback = fmt(data.get("similar_fallback_rate"), 1, True)
            rows.append([name, describe_objective(specs.get(name, {})), fmt(data["sequences"]), chosen, fallback,
                         fmt(run["tokens"]), fmt(run["final_loss"], 3),
                         fmt(run.get("final_token_accuracy"), 1, True), fmt(run.get("final_sentence_accuracy"), 1, True),
                         fmt(run["wall_sec"] / 60, 1), fmt(run["tokens_per_sec"], 0), fmt(run["peak_memory_mb"], 0)])
    blocks = [table(["objective", "definition", "sequences", "chosen %", "Mac fallback %", "tokens", "final loss",
                     "token acc %", "sentence acc %", "minutes", "tokens/s", "peak MiB"], rows)] if rows else []
    blocks.append("*chosen %*: share of maskable tokens chosen (static data; dynamic masks are drawn per batch). "
                  "*Mac fallback %*: share of words drawn for a similar word that had none of the same length and "
                  "got a random word instead. *token acc*: argmax accuracy at the chosen positions (PerLM: of the "
                  "position). Final loss and accuracy are the mean of the last logging window.")
    if curves:
        plot_curves(curves, "loss", "training loss", figures / "pretrain_loss.png")
        blocks.append("![pretraining loss](figures/pretrain_loss.png)")
        blocks.append("The loss of every compared objective, under the same token budget and seed. Losses of "
                      "different targets are not on one scale: PerLM predicts one of ≤128 positions, the others one "
                      "of the vocabulary, and NSP/SOP add their sentence loss.")
    return blocks


def comparison_section(results: dict, objectives: list[str], baselines: list[str], tasks: list[str]) -> list[str]:
    """Rows: objectives (then baselines); columns: tasks; HFL cells; and which gaps are noise."""
    tasks = [t for t in tasks if any((m, t) in results for m in objectives)]
    if not tasks:
        return []
    blocks = []
    for split in ("dev", "test"):
        header = ["objective"] + [f"{t} ({results[next(m for m in objectives if (m, t) in results), t]['headline']})"
                                  for t in tasks]
        rows = [[m] + [max_avg(results[m, t][split][results[m, t]["headline"]]) if (m, t) in results else "-"
                       for t in tasks] for m in [*objectives, *baselines]]
        blocks.append(f"**{split.capitalize()}**\n\n" + table(header, rows))
    n_seeds = sorted({len(r["runs"]) for r in results.values()})
    blocks.append(f"Cells: max (mean ± sample std) over {'/'.join(map(str, n_seeds))} fine-tuning seeds, in percent. "
                  "Every objective had the same corpus, token budget, model size and seed.")
    lines = []
    for t in tasks:
        ranked = sorted((m for m in objectives if (m, t) in results),
                        key=lambda m: -results[m, t]["dev"][results[m, t]["headline"]]["mean"])
        best = ranked[0]
        h = results[best, t]["headline"]
        b = results[best, t]["dev"][h]
        tied, beyond = [], []
        for m in ranked[1:]:
            o = results[m, t]["dev"][h]
            gap, spread = b["mean"] - o["mean"], max(b["max"] - b["min"], o["max"] - o["min"])
            (tied if gap <= spread else beyond).append(f"{m} (−{100 * gap:.2f}, spread {100 * spread:.2f})")
        verdict = (f"within noise of it: {', '.join(tied)}" if tied else "no other objective within noise")
        if beyond:
            verdict += f"; worse beyond noise: {', '.join(beyond)}"
        lines.append(f"- **{t}** ({h}, dev mean): best {best} {100 * b['mean']:.2f}; {verdict}."
                     if len(ranked) > 1 else f"- **{t}**: only {best} was fine-tuned.")
    blocks.append("Which differences are noise (dev means; a gap counts only when it exceeds the larger seed "
                  "spread, max - min, of the two objectives):\n\n" + "\n".join(lines))
    return blocks


def as_fractions(result: dict) -> dict:
    """A fine-tuning metrics dict with every score in [0, 1]. MRC runs store the
    official CMRC 2018 script's percentages; classification (scikit-learn) and NER
    (seqeval) store fractions. Summaries' ``n`` is a count and stays as is."""
    if result.get("family") != "mrc":
        return result
    out = dict(result)
    for split in ("dev", "test"):
        if split in out:
            out[split] = {m: {k: (v if k == "n" else v / 100) for k, v in s.items()} for m, s in out[split].items()}
    out["runs"] = [{**run, **{split: {m: v / 100 for m, v in run[split].items()} for split in ("dev", "test")
                              if split in run}} for run in out.get("runs", [])]
    return out


def finetune_results(metrics: Path, models: list[str], tasks: list[str]) -> dict[tuple[str, str], dict]:
    """``(model, task) -> metrics`` (scores as fractions) of every fine-tuning run found."""
    found = {}
    for m in models:
        for t in tasks:
            r = load_metrics(metrics / "finetune" / f"{m}-{t}.json")
            if r:
                found[m, t] = as_fractions(r)
    return found


def finetune_section(results: dict, models: list[str], tasks: list[str], figures: Path) -> list[str]:
    if not results:
        return []
    blocks = []
    verdict_rows = []
    for t in tasks:
        base = results.get(("random", t))
        for m in models:
            r = results.get((m, t))
            if not r or not base or m == "random":
                continue
            h = r["headline"]
            gap = r["dev"][h]["mean"] - base["dev"][h]["mean"]
            spread = max(s["dev"][h]["max"] - s["dev"][h]["min"] for s in (r, base))
            verdict = ("better, beyond seed spread" if gap > spread else
                       "worse, beyond seed spread" if gap < -spread else "within seed spread")
            verdict_rows.append([t, m, f"{100 * gap:+.2f}", f"{100 * spread:.2f}", verdict])
    if verdict_rows:
        blocks.append("**What pretraining buys** (dev, headline metric, mean vs the random-init baseline; a "
                      "difference counts only when it exceeds the larger of the two seed spreads, max - min):\n\n"
                      + table(["task", "model", "Δ vs random", "seed spread", "verdict"], verdict_rows))
    values = {}
    for (m, t), r in results.items():
        values.setdefault(t, {})[m] = [run["dev"][r["headline"]] for run in r["runs"]]
    plot_grouped(values, models, "dev headline metric", figures / "finetune_dev.png")
    blocks.append("![fine-tuning dev scores](figures/finetune_dev.png)")
    return blocks


def _save_bars(fig, ax, ylabel: str, path: Path) -> Path:
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_grouped(values: dict[str, dict[str, list[float]]], models: list[str], ylabel: str, path: Path) -> Path:
    """Per task, one bar per model (mean over seeds) with the per-seed points."""
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    tasks = list(values)
    width = 0.8 / max(1, len(models))
    for j, m in enumerate(models):
        xs = [i + (j - (len(models) - 1) / 2) * width for i in range(len(tasks))]
        means = [np.mean(values[t][m]) if m in values[t] else np.nan for t in tasks]
        ax.bar(xs, means, width * 0.9, label=m)
        for x, t in zip(xs, tasks):
            if m in values[t]:
                ax.scatter([x] * len(values[t][m]), values[t][m], color="black", s=8, zorder=3)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.set_ylim(0, 1)
    return _save_bars(fig, ax, ylabel, path)


def _spans(tokens: list[str], tags: list[str]) -> str:
    from tasks.downstream.mrc import bio_spans

    return "; ".join(f"{''.join(tokens[a:b])}/{kind}" for kind, a, b in bio_spans(tags)) or "(none)"


def errors_section(results: dict, models: list[str], tasks: list[str], predictions: Path, data: Path,
                   per_task: int = 3) -> list[str]:
    """A few wrong test predictions per task, from the first pipeline model's first seed."""
    blocks = []
    for t in tasks:
        model = next((m for m in models if m != "random" and (m, t) in results), None)
        if model is None:
            continue
        r = results[model, t]
        seed = r["runs"][0]["seed"]
        folder = predictions / f"{model}-{t}"
        test = {row["id"]: row for row in pq.read_table(data / t / "test.parquet").to_pylist()}
        rows = []
        if r["family"] == "mrc":
            answers = read_json(folder / f"test-seed{seed}.json")
            for qid, pred in answers.items():
                gold = [a["text"] for a in test[qid]["answers"]]
                if pred not in gold:
                    rows.append([test[qid]["question"][:16] + "…", test[qid]["context"][:60], " / ".join(gold),
                                 pred or "(empty)"])
            header = ["question", "context", "gold", "predicted"]
        else:
            for row in read_jsonl(folder / f"test-seed{seed}.jsonl"):
                if r["family"] == "ner" and row["gold"] != row["prediction"]:
                    rows.append(["".join(row["tokens"])[:60], _spans(row["tokens"], row["gold"]),
                                 _spans(row["tokens"], row["prediction"])])
                elif r["family"] == "classification" and row["label"] != row["prediction"]:
                    ex = test[row["id"]]
                    text = ex["text_a"] + (f" ‖ {ex['text_b']}" if ex["text_b"] else "")
                    rows.append([text[:80], str(row["label"]), str(row["prediction"])])
            header = ["sentence", "gold entities", "predicted"] if r["family"] == "ner" else \
                ["text", "gold", "predicted"]
        cells = [[c.replace("|", "\\|").replace("\n", " ") for c in row] for row in rows[:per_task]]
        blocks.append(f"**{t}** ({model}, seed {seed}; {len(rows)} wrong of {len(test)} test examples)\n\n"
                      + table(header, cells))
    return blocks


def changes_section(results: dict) -> list[str]:
    """Dev headline scores now vs the committed metrics at HEAD."""
    rows = []
    for (m, t), now in sorted(results.items()):
        before = previous_metrics(Path("metrics") / "finetune" / f"{m}-{t}.json")
        before = as_fractions(before) if before else None
        h = now["headline"]
        if before and "dev" in before and h in before["dev"]:
            a, b = now["dev"][h]["mean"], before["dev"][h]["mean"]
            rows.append([f"{m} / {t} dev {h} (mean)", fmt(b, 2, True), fmt(a, 2, True), f"{100 * (a - b):+.2f}"])
    if not rows:
        return ["No committed metrics to compare with (first run, or metrics not committed yet)."]
    return [table(["metric", "HEAD", "this run", "change"], rows)]


def runtime_section(metrics: Path, objectives: list[str], results: dict) -> list[str]:
    rows = []
    for stage, file in [("segment", metrics / "segment.json")] + \
            [(f"pretrain@{o}", metrics / "pretrain" / f"{o}.json") for o in objectives]:
        m = load_metrics(file)
        if m and "wall_sec" in m:
            rows.append([stage, fmt(m["wall_sec"] / 60, 2)])
    for (model, task), r in sorted(results.items()):
        rows.append([f"finetune@{model}-{task}", fmt(sum(run["train"]["wall_sec"] for run in r["runs"]) / 60, 2)])
    return [table(["stage", "minutes (training compute)"], rows)] if rows else []


def plot_shares(shares: dict[str, dict[str, float]], languages: list[str], ylabel: str, path: Path) -> Path:
    """Per language, one bar per series (e.g. corpus before / each mixture after), log scale."""
    fig, ax = plt.subplots(figsize=(8, 4), dpi=110)
    width = 0.8 / max(1, len(shares))
    for j, (name, values) in enumerate(shares.items()):
        xs = [i + (j - (len(shares) - 1) / 2) * width for i in range(len(languages))]
        ax.bar(xs, [values.get(lang, np.nan) for lang in languages], width * 0.9, label=name)
    ax.set_xticks(range(len(languages)), languages)
    ax.set_yscale("log")
    return _save_bars(fig, ax, ylabel, path)


def multilingual_section(metrics: Path, mixtures: dict, figures: Path) -> list[str]:
    """Corpus per language, vocabulary coverage and extension, resampling shares, per-language
    held-out MLM after continued pretraining with each mixture, and vocabulary pruning."""
    corpus = load_metrics(metrics / "multilingual.json")
    if corpus is None:
        return ["The multilingual stages have not run."]
    langs = corpus["languages"]
    blocks = [table(["language", "script", "documents", "held out", "characters", "dropped short", "duplicates"],
                    [[lang, s["script"], fmt(s["documents"]), fmt(s["heldout"]), fmt(s["characters"]),
                      fmt(s["short"]), fmt(s["duplicates"])] for lang, s in langs.items()])]
    for m in corpus["missing_inputs"]:
        blocks.append(f"**Missing input** ({m['lang']}, source `{m['source']}`): {m['reason']}")
    if corpus["absent_languages"]:
        blocks.append(f"**Languages with no text this run:** {', '.join(corpus['absent_languages'])}.")

    vocab = load_metrics(metrics / "vocab_extension.json")
    if vocab:
        blocks.append(
            f"### Vocabulary\n\n[UNK] rate and tokens per character on held-out text, for the Chinese BERT vocabulary "
            f"({fmt(vocab['chinese_bert_vocab_size'])} entries), the pipeline's tokenizer "
            f"({fmt(vocab['base_vocab_size'])}) and the extended one ({fmt(vocab['extended_vocab_size'])}: "
            f"{fmt(vocab['new_tokens'])} WordPiece tokens learnt on {', '.join(vocab['extended_languages']) or 'none'}, "
            "the languages whose training text had an [UNK] rate above the threshold).")
        rows = []
        for lang, cov in vocab["coverage"].items():
            rows.append([lang] + [f"{fmt(cov[k]['unk_rate'], 1, True)} / {fmt(cov[k]['tokens_per_char'], 2)}"
                                  for k in ("chinese_bert", "base", "extended")])
        blocks.append(table(["language", "Chinese BERT: [UNK] % / tokens per char", "pipeline tokenizer",
                             "extended"], rows))

    resampled = {name: load_metrics(metrics / "resample" / f"{name}.json") for name in mixtures}
    resampled = {k: v for k, v in resampled.items() if v}
    if resampled:
        order = list(next(iter(resampled.values()))["languages"])
        blocks.append("### Resampling\n\np_i ∝ n_i^α / l_i^β over the training documents (n_i documents of mean "
                      "length l_i tokens; `tasks/multilingual/resample.py`). Shares in percent; *repeats* = m_i / n_i, how many "
                      "times each document of the language is used on average.")
        for name, r in resampled.items():
            rows = [[lang, fmt(s["documents"]), fmt(s["mean_length"], 1), fmt(s["probability"], 2, True),
                     f"{fmt(s['document_share_before'], 2, True)} → {fmt(s['document_share_after'], 2, True)}",
                     f"{fmt(s['token_share_before'], 2, True)} → {fmt(s['token_share_after'], 2, True)}",
                     fmt(s["repeat_factor"], 2), fmt(s["max_copies"])]
                    for lang, s in r["languages"].items()]
            blocks.append(f"**{name}** (α = {r['alpha']:g}, β = {r['beta']:g}): {fmt(r['documents'])} documents, "
                          f"{fmt(r['tokens'])} tokens (requested {fmt(r['requested_tokens'])}).\n\n" + table(
                              ["language", "n_i", "l_i", "p_i %", "document share %", "token share %", "repeats",
                               "max copies"], rows))
        first = next(iter(resampled.values()))["languages"]
        shares = {"corpus": {lang: s["token_share_before"] for lang, s in first.items()}}
        shares.update({name: {lang: s["token_share_after"] for lang, s in r["languages"].items()}
                       for name, r in resampled.items()})
        plot_shares(shares, order, "token share (log scale)", figures / "language_token_shares.png")
        blocks.append("![token share per language](figures/language_token_shares.png)")

    continued = {name: load_metrics(metrics / "continue_pretrain" / f"{name}.json") for name in mixtures}
    continued = {k: v for k, v in continued.items() if v}
    if continued:
        base = next(iter(continued.values()))["heldout"]["before"]
        header = ["language", "predictions", "before: acc % / ppl"] + [f"{n}: acc % / ppl" for n in continued]
        rows = []
        for lang, b in base.items():
            cells = [f"{fmt(b['accuracy'], 1, True)} / {fmt(b['perplexity'], 1)}"]
            cells += [f"{fmt(c['heldout']['after'][lang]['accuracy'], 1, True)} / "
                      f"{fmt(c['heldout']['after'][lang]['perplexity'], 1)}" for c in continued.values()]
            rows.append([lang, fmt(b["predictions"])] + cells)
        c0 = next(iter(continued.values()))
        blocks.append(f"### Continued pretraining per language\n\n`{c0['base_model']}` with the extended vocabulary "
                      f"(embeddings {fmt(c0['vocab_size_before'])} → {fmt(c0['vocab_size'])} rows), trained "
                      f"{fmt(c0['tokens'])} tokens on each mixture. Held-out MLM accuracy and perplexity over the "
                      "same masked positions (15% of tokens, all [MASK]) for every model; *before* is the base model "
                      "with new embedding rows, not yet trained on the mixture.\n\n" + table(header, rows))
        if {"natural", "resampled"} <= set(continued):
            gains = {lang: continued["resampled"]["heldout"]["after"][lang]["accuracy"]
                     - continued["natural"]["heldout"]["after"][lang]["accuracy"]
                     for lang in base if continued["natural"]["heldout"]["after"][lang]["accuracy"] is not None}
            better = [lang for lang, g in gains.items() if g > 0]
            blocks.append("Resampling vs natural proportions (held-out accuracy, points): "
                          + ", ".join(f"{lang} {100 * g:+.1f}" for lang, g in gains.items())
                          + f". Resampling helps {len(better)} of {len(gains)} languages"
                          + (f" ({', '.join(better)})." if better else "."))

    pruned = load_metrics(metrics / "prune_vocab.json")
    if pruned:
        blocks.append(
            f"### Vocabulary pruning\n\nThe `{pruned['mixture']}` model kept only the tokens that the "
            f"{', '.join(pruned['languages'])} training text uses (plus special tokens).\n\n" + table(
                ["", "before", "after"],
                [["vocabulary", fmt(pruned["vocab_size"]["before"]), fmt(pruned["vocab_size"]["after"])],
                 ["parameters", fmt(pruned["parameters"]["before"]), fmt(pruned["parameters"]["after"])],
                 ["model.safetensors (MB)", fmt(pruned["model_bytes"]["before"] / 1e6, 2),
                  fmt(pruned["model_bytes"]["after"] / 1e6, 2)]])
            + f"\n\nSame logits check on {pruned['sequences_checked']} held-out sequences whose tokens are all kept: "
            f"max |Δ logit| = {pruned.get('max_abs_logit_diff', float('nan')):.2e}; the pruned tokenizer splits text "
            f"{'identically' if pruned['tokenization_identical'] else 'DIFFERENTLY'}.")
    return blocks


def build_report(params_text: str, objectives: list[str], models: list[str], tasks: list[str], metrics: Path,
                 predictions: Path, data: Path, figures: Path, interpretability: list[str] = ()) -> str:
    """The pipeline report as Markdown; figures are written into ``figures``. ``interpretability``:
    the blocks of that section (:mod:`tasks.report.interpretability`)."""
    figures.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    results = finetune_results(metrics, models, tasks)
    report = Report("zhplm pipeline report")
    report.parts.append(
        f"Code: git `{prov['commit']}`{' with uncommitted changes' if prov['dirty'] else ''}. "
        "Every number below comes from the metrics files of this run (`metrics/`).")
    report.section("Corpus", *corpus_section(metrics, tasks))
    specs = (yaml.safe_load(params_text) or {}).get("objectives", {})
    report.section("Pretraining", *pretraining_section(metrics, objectives, specs, figures))
    report.section("Objective comparison", *comparison_section(
        results, objectives, [m for m in models if m not in objectives], tasks))
    report.section("Fine-tuning", *finetune_section(results, models, tasks, figures))
    report.section("Wrong predictions", *errors_section(results, models, tasks, predictions, data))
    mixtures = ((yaml.safe_load(params_text) or {}).get("multilingual") or {}).get("mixtures", {})
    report.section("Multilingual continued pretraining", *multilingual_section(metrics, mixtures, figures))
    if interpretability:
        report.section("Interpretability", *interpretability)
    report.section("What changed since the last commit", *changes_section(results))
    report.section("Run times", *runtime_section(metrics, objectives, results))
    report.section("Parameters", f"```yaml\n{params_text.strip()}\n```")
    outs = [[f"`{path}`", f"`{md5}`"] for path, md5 in sorted(prov["outs"].items())]
    report.section("Data versions (dvc.lock)",
                   table(["artifact", "md5"], outs) if outs else "No dvc.lock yet: run the pipeline with `dvc repro`.")
    return report.markdown()
