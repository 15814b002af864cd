"""Stage ``scalar_mix@<model>-<task>``: the feature-based approach (ELMo scalar mix over the frozen
encoder's layers, :mod:`tasks.interpretability.scalar_mix`) on one task of ``scalar_mix.tasks``,
trained with the task's fine-tuning knobs and the first finetune seed, except the learning rate.
The report sets these scores beside full fine-tuning of the same encoder (``finetune`` stage)."""

import sys

from prefect import flow

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.interpretability import ScalarMixMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.interpretability.scalar_mix import feature_based
from tasks.training.device import resolve_device


@flow(name="scalar_mix")
def scalar_mix(model_name: str, task_name: str) -> None:
    params = load_params()
    device = resolve_device(params.finetune.device, "finetune.device")
    run = feature_based(task_name, paths.model_dir(model_name), params, device)
    name = paths.finetune_name(model_name, task_name)
    with atomic_outputs(paths.stage_metrics("scalar_mix", name)) as (out,):
        write_metrics(out, ScalarMixMetrics(model=model_name, task=task_name,
                                            learning_rate=params.scalar_mix.learning_rate, **run))


if __name__ == "__main__":
    run_stage(scalar_mix, *sys.argv[1:])
