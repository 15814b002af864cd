"""Stage ``ablation@<model>``: attention-zone ablation of a span-extraction model
(Cui et al. 2022, iScience; :mod:`tasks.interpretability.ablation`).

The model is the one ``finetune`` saved for ``ablation.task`` and its first seed (reused,
not trained again; fine-tuned here the same way when finetune does not cover the model or
task: :func:`tasks.interpretability.finetuned.analysed_model`), evaluated on ``ablation.split``
with each zone blocked in all layers at once, in each layer alone, and (for
``ablation.per_head_zones``) in each head of each layer alone. Scores are the official CMRC 2018 EM/F1 (percentages).
"""

import sys

from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.interpretability import AblationMetrics
from tasks.core.model_dir import load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.interpretability.finetuned import analysed_model
from tasks.interpretability.ablation import ablation_grid
from tasks.training.device import resolve_device


@flow(name="ablation")
def ablation(model_name: str) -> None:
    params = load_params()
    cfg = params.ablation
    spec = params.task(cfg.task)
    training, family = params.finetune.for_task(spec), FAMILIES["mrc"]
    model_dir = paths.MODELS / model_name
    tokenizer = load_tokenizer(model_dir)
    tables, _, data = load_task_data(cfg.task, family, ("train", cfg.split), tokenizer, training)
    device = resolve_device(params.finetune.device)
    seed = params.finetune.seeds[0]
    model, train = analysed_model(params, model_name, cfg.task, family, None, data["train"], training, device)

    def score() -> dict:
        return family.evaluate(model, data[cfg.split], tables[cfg.split], training, None, spec.metrics, device)[0]

    grid = ablation_grid(model, tokenizer.sep_token_id, score, list(cfg.per_head_zones))
    metrics = {"model": model_name, "task": cfg.task, "split": cfg.split, "seed": seed, "layers": grid.pop("layers"),
               "heads": grid.pop("heads"), "training": training.model_dump(), **grid}
    if train is not None:
        metrics["train"] = train
    metrics["evaluation"]["features"] = len(data[cfg.split])
    get_run_logger().info(f"{model_name}: baseline {metrics['baseline']}, {metrics['evaluation']}")
    with atomic_outputs(paths.stage_metrics("ablation", model_name)) as (out,):
        write_metrics(out, AblationMetrics(**metrics))


if __name__ == "__main__":
    run_stage(ablation, *sys.argv[1:])
