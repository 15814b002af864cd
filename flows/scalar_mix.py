"""Stage ``scalar_mix@<model>``: the feature-based approach (ELMo scalar mix over the frozen
encoder's layers, :mod:`tasks.interpretability.scalar_mix`) on each task of ``scalar_mix.tasks``, trained with
the task's fine-tuning knobs and the first finetune seed, except the learning rate. The
report sets these scores beside full fine-tuning of the same encoder (``finetune`` stage)."""

import sys

import torch
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.errors import ParamsError
from tasks.core.io import atomic_outputs, write_json
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage, stage_task
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import fit
from tasks.interpretability.scalar_mix import ScalarMixClassifier, ScalarMixTagger
from tasks.training.device import resolve_device

HEADS = {"classification": ScalarMixClassifier, "ner": ScalarMixTagger}


@stage_task(task_run_name="{task_name}")
def feature_based(task_name: str, model_dir, params, device) -> dict:
    spec = params.task(task_name)
    family, training = FAMILIES[spec.family], params.finetune.for_task(spec)
    tokenizer = load_tokenizer(model_dir)
    tables, labels, data = load_task_data(task_name, family, ("train", "dev", "test"), tokenizer, training)
    if labels is None:
        raise ParamsError(f"scalar_mix.tasks: {task_name} is a regression task; the scalar-mix heads classify")
    seed = params.finetune.seeds[0]
    torch.manual_seed(seed)
    model = load_model(model_dir, lambda path: HEADS[spec.family].from_pretrained(path, len(labels), training.dropout))
    train = fit(model, data["train"], epochs=training.epochs, batch_size=training.batch_size,
                lr=params.scalar_mix.learning_rate, warmup_fraction=training.warmup_fraction,
                weight_decay=training.weight_decay, max_grad_norm=training.max_grad_norm, seed=seed, device=device,
                log=get_run_logger().info)
    result = {"family": spec.family, "headline": spec.metrics[0], "seed": seed, "train": train,
              "layer_weights": model.mix.layer_weights, "gamma": float(model.mix.gamma)}
    for split in ("dev", "test"):
        result[split], _ = family.evaluate(model, data[split], tables[split], training, labels, spec.metrics, device)
    get_run_logger().info(f"{task_name}: dev {result['dev']}, layer weights {result['layer_weights']}")
    return result


@flow(name="scalar_mix")
def scalar_mix(model_name: str) -> None:
    params = load_params()
    device = resolve_device(params.finetune.device)
    metrics = {"model": model_name, "learning_rate": params.scalar_mix.learning_rate,
               "tasks": {t: feature_based(t, paths.MODELS / model_name, params, device)
                         for t in params.scalar_mix.tasks}}
    with atomic_outputs(paths.stage_metrics("scalar_mix", model_name)) as (out,):
        write_json(out, metrics)


if __name__ == "__main__":
    run_stage(scalar_mix, *sys.argv[1:])
