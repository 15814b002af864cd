"""Stage ``ablation@<model>``: attention-zone ablation of a span-extraction model
(Cui et al. 2022, iScience; :mod:`tasks.interpretability.ablation`).

The model is the one ``finetune`` saved for ``ablation.task`` and its first seed, evaluated on
``ablation.split`` with each zone blocked in all layers at once, in each layer alone, and (for
``ablation.per_head_zones``) in each head of each layer alone. Scores are the official CMRC 2018
EM/F1 (percentages).
"""

import sys

from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.interpretability import AblationMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.finetuned import task_run
from tasks.interpretability.ablation import ablation_grid


@flow(name="ablation")
def ablation(model_name: str) -> None:
    params = load_params()
    cfg, seed = params.ablation, params.finetune.seeds[0]
    run = task_run(params, model_name, cfg.task)
    model = run.finetuned(seed)
    grid = ablation_grid(model, run.tokenizer.sep_token_id, lambda: run.evaluate(model, cfg.split),
                         list(cfg.per_head_zones))
    metrics = {"model": model_name, "task": cfg.task, "split": cfg.split, "seed": seed, "layers": grid.pop("layers"),
               "heads": grid.pop("heads"), "training": run.training.model_dump(), **grid}
    metrics["evaluation"]["features"] = len(run.data[cfg.split])
    get_run_logger().info(f"{model_name}: baseline {metrics['baseline']}, {metrics['evaluation']}")
    with atomic_outputs(paths.stage_metrics("ablation", model_name)) as (out,):
        write_metrics(out, AblationMetrics(**metrics))


if __name__ == "__main__":
    run_stage(ablation, *sys.argv[1:])
