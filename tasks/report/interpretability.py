"""The report's interpretability section: attention-zone ablation (table in the shape of
Cui et al. 2022, heatmaps), probe curves, scalar-mix weights beside fine-tuning, and
Integrated Gradients attributions. Each part ends with a paragraph computed from the
numbers of this run, so the text never claims what the metrics do not show."""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tasks.interpretability.ablation import ZONE_LABELS, ZONES  # noqa: E402
from tasks.interpretability.attributions import attribution_html  # noqa: E402
from tasks.report.report import as_fractions, fmt, load_metrics, save_figure, table  # noqa: E402


def _loaded(metrics: Path, stage: str, models: list[str]) -> dict[str, dict]:
    found = {m: load_metrics(metrics / stage / f"{m}.json") for m in models}
    return {m: v for m, v in found.items() if v}


def _heatmaps(grids: dict[str, np.ndarray], rows: list[str], cols: list[str], title: str, path: Path) -> Path:
    """One ΔF1 heat map per model, diverging around 0, values written in the cells."""
    width = max(2.6, 0.7 * len(cols) + 0.6)
    fig, axes = plt.subplots(1, len(grids), figsize=(width * len(grids) + 1.2, 1.6 + 0.45 * len(rows)), dpi=110,
                             squeeze=False, sharey=True, layout="constrained")
    limit = max(1e-9, max(float(np.nanmax(np.abs(g))) for g in grids.values()))
    for ax, (model, grid) in zip(axes[0], grids.items()):
        image = ax.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit, aspect="auto")
        for (i, j), v in np.ndenumerate(grid):
            ax.text(j, i, f"{v:+.1f}", ha="center", va="center", fontsize=7,
                    color="white" if abs(v) > 0.6 * limit else "black")  # readable on dark cells
        ax.set_xticks(range(len(cols)), cols, rotation=45, ha="right", fontsize=8)
        ax.set_yticks(range(len(rows)), rows, fontsize=8)
        ax.set_title(model, fontsize=9)
        ax.tick_params(axis="y", labelleft=ax is axes[0][0])
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="ΔF1 (points)")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path)


def ablation_blocks(metrics: Path, models: list[str], figures: Path) -> list[str]:
    runs = _loaded(metrics, "ablation", models)
    if not runs:
        return ["The attention-zone ablation has not run."]
    first = next(iter(runs.values()))
    blocks = [f"Each model is fine-tuned on `{first['task']}` (seed {first['seed']}, the first seed of the "
              f"fine-tuning stage) and evaluated on {first['split']} with attention from a set of positions to "
              "another blocked (-10000 on the scaled logits) in every layer; EM / F1 (official CMRC 2018 metric, "
              "%), ΔF1 against the baseline in parentheses (Cui et al. 2022; zones in `tasks/interpretability/ablation.py`)."]
    rows = [["Baseline"] + [f"{fmt(r['baseline']['em'], 1)} / {fmt(r['baseline']['f1'], 1)}" for r in runs.values()]]
    delta = {z: {m: r["all_layers"][z]["f1"] - r["baseline"]["f1"] for m, r in runs.items()} for z in ZONES}
    for zone in ZONES:
        rows.append([ZONE_LABELS[zone]] + [f"{fmt(r['all_layers'][zone]['em'], 1)} / {fmt(r['all_layers'][zone]['f1'], 1)} "
                                           f"({delta[zone][m]:+.1f})" for m, r in runs.items()])
    blocks.append(table(["zone (all layers)", *runs], rows))
    mean = {z: float(np.mean(list(d.values()))) for z, d in delta.items()}
    ranked = sorted(ZONES, key=lambda z: mean[z])
    special = max(abs(mean[z]) for z in ("cls", "sep_mid", "sep_end"))
    costliest = "; ".join(f"{m} {ZONE_LABELS[z][3:]} ({delta[z][m]:+.1f})" if delta[z][m] < 0 else
                          f"{m} none (every zone within {max(abs(delta[x][m]) for x in ZONES):.1f})"
                          for m in runs for z in [min(ZONES, key=lambda x: delta[x][m])])
    agree = [("the two costliest zones are P2Q and P²" if set(ranked[:2]) == {"p2q", "p2p"} else
              f"the costliest zones are {ZONE_LABELS[ranked[0]][3:]} and {ZONE_LABELS[ranked[1]][3:]}, not both "
              "of P2Q and P²"),
             f"special tokens {'hardly matter' if special < 2 else 'matter'}",
             f"removing the diagonal {'helps' if mean['diagonal'] > 0 else 'does not help'}"]
    blocks.append(
        f"Averaged over the models, blocking {ZONE_LABELS[ranked[0]][3:]} costs the most ({mean[ranked[0]]:+.1f} F1), "
        f"then {ZONE_LABELS[ranked[1]][3:]} ({mean[ranked[1]]:+.1f}); [CLS] or one [SEP] moves F1 by at most "
        f"{special:.1f} points and the diagonal by {mean['diagonal']:+.1f}. The costliest zone per model: "
        f"{costliest}. Cui et al. found P2Q and P² the most important zones, special tokens nearly irrelevant and "
        f"the diagonal sometimes harmful; here {', '.join(agree)}. " + _baseline_check(metrics, runs))

    layers = first["layers"]
    grids = {m: np.array([[r["per_layer"][z][f"layer_{k}"]["f1"] - r["baseline"]["f1"] for z in ZONES]
                          for k in range(r["layers"])]) for m, r in runs.items()}
    _heatmaps(grids, [f"layer {k}" for k in range(layers)], [ZONE_LABELS[z][3:] for z in ZONES],
              "ΔF1 with a zone blocked in one layer", figures / "ablation_layers.png")
    blocks.append("![layer × zone ΔF1](figures/ablation_layers.png)")
    worst = {m: np.unravel_index(np.argmin(g), g.shape) for m, g in grids.items()}
    blocks.append("Per layer: " + "; ".join(
        f"{m} loses most with {ZONE_LABELS[ZONES[j]][3:]} blocked in layer {i} ({grids[m][i, j]:+.1f})"
        if grids[m][i, j] < 0 else f"{m} loses nothing from any zone in any single layer"
        for m, (i, j) in worst.items()) + ".")

    head_zones = [z for z in ("p2q", "p2p") if all(z in r["per_head"] for r in runs.values())]
    for zone in head_zones:
        heads = {m: np.array([[r["per_head"][zone][f"layer_{k}"][f"head_{h}"]["f1"] - r["baseline"]["f1"]
                               for h in range(r["heads"])] for k in range(r["layers"])]) for m, r in runs.items()}
        _heatmaps(heads, [f"layer {k}" for k in range(layers)], [f"head {h}" for h in range(first["heads"])],
                  f"ΔF1 with {ZONE_LABELS[zone][3:]} blocked in one head", figures / f"ablation_heads_{zone}.png")
        blocks.append(f"![layer × head ΔF1, {zone}](figures/ablation_heads_{zone}.png)")
        spread = {m: float(h.max() - h.min()) for m, h in heads.items()}
        blocks.append(f"{ZONE_LABELS[zone][3:]} head by head: the heads of a layer differ by up to "
                      + ", ".join(f"{s:.1f} ({m})" for m, s in spread.items())
                      + " F1 points; a head whose cell is near 0 does not use this zone.")
    return blocks


def _baseline_check(metrics: Path, runs: dict[str, dict]) -> str:
    """Whether each ablation baseline reproduces the fine-tuning stage's score for the same seed."""
    same, differ = [], []
    for model, r in runs.items():
        finetuned = load_metrics(metrics / "finetune" / f"{model}-{r['task']}.json") or {}
        run = next((x for x in finetuned.get("runs", []) if x["seed"] == r["seed"]), None)
        if run is not None:
            (same if abs(run[r["split"]]["f1"] - r["baseline"]["f1"]) < 1e-9 else differ).append(model)
    if differ:
        return f"The baselines of {', '.join(differ)} DIFFER from the fine-tuning stage's seed-{r['seed']} score."
    return (f"Each baseline ({', '.join(same)}) reproduces the fine-tuning stage's seed-{r['seed']} score exactly."
            if same else "")


def _plot_probes(runs: dict[str, dict], path: Path) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4), dpi=110)
    for model, r in runs.items():
        for ax, (probe, key) in zip(axes, (("pos", "accuracy"), ("ner", "accuracy"), ("ner", "entity_f1"))):
            ax.plot([x["layer"] for x in r[probe]["layers"]], [x[key] for x in r[probe]["layers"]], marker="o",
                    label=model)
    first = next(iter(runs.values()))
    for ax, title, base in zip(axes, ("POS accuracy", "NER tag accuracy", "NER entity F1"),
                               (first["pos"]["majority_baseline"], first["ner"]["majority_baseline"], None)):
        if base is not None:
            ax.axhline(base, color="grey", linestyle=":", label="majority tag")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("layer (0 = embeddings)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def probe_blocks(metrics: Path, models: list[str], figures: Path) -> list[str]:
    runs = _loaded(metrics, "probe", models)
    if not runs:
        return ["The probes have not run."]
    first = next(iter(runs.values()))
    blocks = [f"A linear probe (logistic regression) per layer on frozen hidden states at each word's first "
              f"character: gold POS tags of `{first['pos_source']}` ({first['pos']['labels']} tags, "
              f"{fmt(first['pos']['test_words'])} test words) and the BIO tags of `{first['ner_task']}` "
              f"({fmt(first['ner']['test_words'])} test characters; entity F1 = seqeval on the probe's tags).",
              "![probe accuracy per layer](figures/probes.png)"]
    _plot_probes(runs, figures / "probes.png")
    rows, lines = [], []
    for model, r in runs.items():
        pos = [x["accuracy"] for x in r["pos"]["layers"]]
        ner = [x["entity_f1"] for x in r["ner"]["layers"]]
        rows.append([model] + [f"{fmt(a, 1, True)} / {fmt(f, 1, True)}" for a, f in zip(pos, ner)])
        lines.append(f"{model}: POS peaks at layer {int(np.argmax(pos))} ({fmt(max(pos), 1, True)} %, embeddings "
                     f"{fmt(pos[0], 1, True)} %), NER entity F1 at layer {int(np.argmax(ner))} "
                     f"({fmt(max(ner), 1, True)} %)")
    blocks.append(table(["model", *[f"layer {k}: POS acc / NER F1 %" for k in range(len(first['pos']['layers']))]],
                        rows))
    blocks.append("; ".join(lines) + ". The gain of the contextual layers over layer 0 is what the encoder adds "
                  "beyond the character identity (the first character of a word alone decides much of its POS); "
                  "a pretrained model whose curve is no higher than random init's carries no more syntactic or "
                  "entity information in that layer than an untrained network does.")
    return blocks


def scalar_mix_blocks(metrics: Path, models: list[str], figures: Path) -> list[str]:
    runs = _loaded(metrics, "scalar_mix", models)
    if not runs:
        return ["The feature-based runs have not run."]
    tasks = list(next(iter(runs.values()))["tasks"])
    rows, gaps = [], []
    for model, r in runs.items():
        for task in tasks:
            t = r["tasks"][task]
            finetuned = load_metrics(metrics / "finetune" / f"{model}-{task}.json")
            seed = next((run for run in (finetuned or {}).get("runs", []) if run["seed"] == t["seed"]), None)
            head = t["headline"]
            feat = as_fractions({"family": t["family"], "dev": t["dev"]})["dev"][head]
            full = as_fractions({"family": t["family"], "dev": seed["dev"]})["dev"][head] if seed else None
            if full is not None:
                gaps.append(full - feat)
            rows.append([model, task, head, fmt(feat, 1, True), fmt(full, 1, True) if full is not None else "n/a",
                         " / ".join(f"{w:.2f}" for w in t["layer_weights"]), f"{t['gamma']:.2f}"])
    blocks = ["The encoder frozen, a task head on the ELMo scalar mix γ·Σ_j s_j·h_j of all its layers "
              "(s = softmax of learnt scalars; Peters et al. 2018), beside full fine-tuning of the same encoder with "
              "the same head, data, epochs and seed (dev, %; weights from layer 0 = embeddings to the top layer).",
              table(["model", "task", "metric", "feature-based", "fine-tuned", "weights s_j", "γ"], rows)]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 3.2), dpi=110, squeeze=False)
    for ax, task in zip(axes[0], tasks):
        width = 0.8 / len(runs)
        for j, (model, r) in enumerate(runs.items()):
            w = r["tasks"][task]["layer_weights"]
            ax.bar(np.arange(len(w)) + (j - (len(runs) - 1) / 2) * width, w, width * 0.9, label=model)
        ax.set_title(task, fontsize=9)
        ax.set_xticks(range(len(w)))
        ax.set_xlabel("layer (0 = embeddings)")
        ax.set_ylabel("weight s_j")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, figures / "scalar_mix.png")
    blocks.append("![scalar-mix layer weights](figures/scalar_mix.png)")
    top = {task: {m: int(np.argmax(r["tasks"][task]["layer_weights"])) for m, r in runs.items()} for task in tasks}
    blocks.append("Layers drawn on most: " + "; ".join(
        f"{task}: " + ", ".join(f"{m} layer {k}" for m, k in by_model.items()) for task, by_model in top.items())
        + (f". Fine-tuning beats the frozen features by {np.mean(gaps) * 100:.1f} points on average "
           f"(from {min(gaps) * 100:.1f} to {max(gaps) * 100:.1f}); BERT-base's feature-based NER came within 0.3 F1 "
           "of fine-tuning (Devlin et al. 2019, §5.3), " + ("and so do these models." if np.mean(gaps) < 0.02 else
                                                            "these small encoders' features are much further from "
                                                            "what the tasks need.") if gaps else "."))
    return blocks


def attribution_blocks(metrics: Path, models: list[str], results: Path, report_dir: Path) -> list[str]:
    runs = _loaded(metrics, "attributions", models)
    if not runs:
        return ["The attributions have not run."]
    blocks = []
    for model, r in runs.items():
        page = os.path.relpath(results / model / "attributions.html", report_dir)
        rows = []
        for e in r["examples"]:
            scores = np.array(e["attributions"])
            verdict = "correct" if e["label"] == e["prediction"] else "**wrong**"
            top = [e["tokens"][i] for i in np.argsort(-scores)[:3]]
            rows.append([e["id"], verdict, f"{e['label']} → {e['prediction']} ({e['probability']:.2f})",
                         " ".join(top), attribution_html(e["tokens"], scores)])
        blocks.append(f"**{model} on {r['task']}**: Integrated Gradients ({r['steps']} steps) towards the predicted "
                      f"class for the most confident correct and wrong dev predictions (green: evidence for it, red: "
                      f"against). The attention maps of every layer and head for example "
                      f"{r['examples'][r['attention_maps_of']]['id'] if r['examples'] else '-'} are in "
                      f"[{page}]({page}).")
        blocks.append(table(["example", "verdict", "gold → predicted (p)", "top tokens", "attributions"], rows))
        deltas = [abs(e["convergence_delta"]) for e in r["examples"]]
        wrong = [e for e in r["examples"] if e["label"] != e["prediction"]]
        blocks.append(f"Completeness holds to {max(deltas, default=0):.1e} (largest |sum of attributions − logit "
                      f"gap|). {len(wrong)} of the {len(r['examples'])} examples are confident errors; their top "
                      "tokens are the evidence the model over-trusted: " + "; ".join(
                          f"{e['id']}: {' '.join(e['tokens'][i] for i in np.argsort(-np.array(e['attributions']))[:3])}"
                          for e in wrong) + ".")
    return blocks


def interpretability_section(metrics: Path, params, figures: Path, results: Path, report_dir: Path) -> list[str]:
    """The whole section, subsection by subsection (Markdown blocks)."""
    return (["### Attention-zone ablation (MRC)", *ablation_blocks(metrics, params.ablation.models, figures),
             "### Layer-wise probing", *probe_blocks(metrics, params.probe.models, figures),
             "### Feature-based (ELMo scalar mix) vs fine-tuning",
             *scalar_mix_blocks(metrics, params.scalar_mix.models, figures),
             "### Attributions", *attribution_blocks(metrics, params.attributions.models, results, report_dir)])
