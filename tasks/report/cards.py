"""Model cards in the Hugging Face format (YAML metadata, then Markdown: ``huggingface_hub.ModelCard``) for the
models the pipeline leaves: each pretrained model (``models/<name>/README.md``, stage pretrain) and each
fine-tuned one (``results/finetune/<model>-<task>/seed<k>/README.md``, stage finetune).

A card holds what its own stage knows, and nothing that differs between two runs of the same code and params
(no timings, no git commit), so that the folder stays byte-identical and DVC sees no change where there is
none: the commit is the one whose ``dvc.lock`` lists the folder's md5. What needs other stages (the classic
baseline, the comparisons between procedures, the data's licence) is in the pipeline's report.
"""

from __future__ import annotations

import json

import numpy as np
from huggingface_hub import EvalResult, ModelCard, ModelCardData

REPRODUCE = ("Reproduce: `dvc repro {stage}` in a checkout of zhplm at the commit whose "
             "`dvc.lock` lists this folder's md5; the report of that run (`reports/report.md`) compares it with "
             "the other procedures and with the task's classic baseline, each with its 95% interval.")
LICENCE = ("Licence: `other`, the licences of the data it was trained on, which `params.yaml` (`sources`, "
           "`tasks`) and the report's data table list.")


def _card(data: ModelCardData, title: str, sections: list[str]) -> str:
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n\n# {title}\n\n" + "\n\n".join(sections) + "\n"))


def _json_block(values: dict) -> str:
    return "```json\n" + json.dumps(values, indent=2, ensure_ascii=False, sort_keys=True) + "\n```"


def _points(value: float, percent: float) -> str:
    return f"{value * percent:.2f}"


def usage(family, folder, training: dict) -> str:
    """``family``'s code that loads the fine-tuned model ``folder`` with transformers alone, at ``training``'s
    lengths (:attr:`~tasks.downstream.families.base.Family.usage`)."""
    return family.usage.format(folder=folder, **{k: training.get(k) for k in ("max_seq_length", "n_best",
                                                                            "max_answer_length")})


def finetuned_card(model: str, task: str, family, seed: int, seeds: list[int], runs: list[dict],
                   training: dict, labels: list[str] | None, counts: dict[int, np.ndarray], headline: str) -> str:
    """The card of ``model`` fine-tuned on ``task`` under fine-tuning seed ``seed`` (one of ``seeds``).

    Args:
        family: the task's :class:`~tasks.downstream.families.base.Family` (its usage, scale, reductions).
        runs: every seed's ``{"seed", "dev", "test"}`` scores (:class:`tasks.core.metrics.FinetuneRun` fields).
        training: the recipe it was fine-tuned with (``Training.model_dump()``).
        counts: per seed, the headline metric's per-example test counts ``float64 [N, k]``
            (:mod:`tasks.downstream.outcomes`); empty when the metric has none (no interval then).
    """
    from tasks.report.statistics import Outcomes, interval  # SciPy: imported by finetune, not by pretrain

    run = next(r for r in runs if r["seed"] == seed)
    test = {m: v for m, v in run["test"].items() if isinstance(v, float)}  # NER's per_type breakdown left out
    name = f"{model}-{task}-seed{seed}"
    data = ModelCardData(language="zh", license="other", library_name="transformers", tags=["zhplm", task],
                         pipeline_tag=family.pipeline_tag, model_name=name, eval_results=[
                             EvalResult(task_type=family.pipeline_tag, dataset_type=task, dataset_name=task,
                                        dataset_split="test", metric_type=m, metric_value=round(v * family.percent, 4))
                             for m, v in test.items()])
    rows = ["| metric | this model | mean of the fine-tuning seeds |", "|---|---|---|"]
    for metric, value in test.items():
        mean = np.mean([r["test"][metric] for r in runs])
        mine, theirs = _points(value, family.percent), _points(mean, family.percent)
        if metric == headline and counts:
            one = interval(Outcomes(counts[seed][None, None], family.counted[metric]))
            every = interval(Outcomes(np.stack([counts[s] for s in seeds])[None], family.counted[metric],
                                      finetune_seeds=tuple(seeds)))
            mine += f" [{_points(one.low, family.percent)}, {_points(one.high, family.percent)}]"
            theirs += f" [{_points(every.low, family.percent)}, {_points(every.high, family.percent)}]"
        rows.append(f"| {metric} | {mine} | {theirs} |")
    scores = "\n".join(rows)
    dev = ", ".join(f"{m} {_points(v, family.percent)}" for m, v in run["dev"].items() if isinstance(v, float))
    return _card(data, f"{model} fine-tuned on {task} (seed {seed})", [
        f"`{model}` (its own card: `models/{model}/README.md`) with a {family.name} head, fine-tuned on the zhplm "
        f"task `{task}` under fine-tuning seed {seed} of {seeds}, keeping the weights of its best dev epoch."
        + (f" Labels (index order): {', '.join(f'`{label}`' for label in labels)}." if labels else ""),
        "## Use\n\n```python\n" + usage(family, "path/to/this/folder", training) + "\n```",
        f"## Test scores\n\nIn points; the headline metric ({headline}) with its 95% interval: this model's over "
        f"test examples, the mean's over the {len(seeds)} fine-tuning seeds and test examples "
        f"(`tasks/report/statistics.py: interval`).\n\n{scores}\n\nDev (where the epoch was chosen): {dev}.",
        "## Recipe\n\n" + _json_block(training),
        LICENCE, REPRODUCE.format(stage=f"finetune@{model}-{task}"),
    ])


def pretrained_card(name: str, summary: dict) -> str:
    """The card of the model pretrained as ``name`` (``<objective>-<seed>``) from its stage's ``summary``
    (:class:`tasks.core.metrics.pretraining.PretrainMetrics` fields; its timings are left out)."""
    gates = summary.get("gates") or []
    data = ModelCardData(language="zh", license="other", library_name="transformers",
                         tags=["zhplm", summary["objective"]], pipeline_tag="feature-extraction")
    rows = ["| gate | value [95% interval] | threshold | passed |", "|---|---|---|---|"] + [
        f"| {g['name']} | {g['value']:.4g} [{g['low']:.4g}, {g['high']:.4g}] | {'>' if g['above'] else '<'} "
        f"{g['threshold']:.4g} | {'yes' if g['passed'] else '**no**'} |"
        for g in gates if g.get("value") is not None]
    setup = {k: summary[k] for k in ("objective", "seed", "recipe", "learning_rate", "batch_size", "parameters",
                                     "dynamic", "sentence_task", "token_target", "budget", "steps", "tokens",
                                     "flops", "precision", "final_loss", "final_token_accuracy") if k in summary}
    return _card(data, f"{name}: a tiny Chinese encoder pretrained with {summary['objective']}", [
        f"Pretrained from scratch by the zhplm stage `pretrain@{name}` on the pipeline's Chinese corpus. "
        "A Hugging Face model folder: `AutoModel.from_pretrained(folder)` gives the encoder, "
        "`AutoTokenizer.from_pretrained(folder)` its tokenizer; `snapshots/` holds the model at fractions of its "
        "budget, which a hub upload leaves out (`huggingface_hub.upload_folder(folder_path=folder, repo_id=..., "
        "ignore_patterns=[\"snapshots/*\"])`; `model.push_to_hub` uploads the model alone).",
        "## Did it learn its objective?\n\nIts held-out gates (`tasks/pretraining/gates.py`: the objective's loss "
        "and accuracy against its trivial solution, and no collapsed representations, each value's 95% interval "
        f"on the wanted side) are measured at each snapshot by stage `curves@{name}` and listed in the report, "
        "which compares only models that pass them. The gates read from its training log: "
        + ("\n\n" + "\n".join(rows) if gates else "none for this objective."),
        "## Setup and budget\n\n" + _json_block(setup),
        LICENCE, REPRODUCE.format(stage=f"pretrain@{name}"),
    ])
