"""Stage ``attributions@<model>``: Integrated Gradients token attributions and per-layer
attention maps of the most confident correct and wrong dev predictions of a classification
model (the one ``finetune`` saved for its first seed, reused:
:func:`tasks.interpretability.finetuned.analysed_model`), written as one self-contained HTML page
plus a JSON summary (:mod:`tasks.interpretability.attributions`)."""

import sys

from prefect import flow

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.interpretability import AttributionsMetrics
from tasks.core.model_dir import load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.interpretability.finetuned import analysed_model
from tasks.interpretability.attributions import attributions_page, explain_predictions
from tasks.training.device import resolve_device


@flow(name="attributions")
def attributions(model_name: str) -> None:
    params = load_params()
    cfg = params.attributions
    spec = params.task(cfg.task)
    family, training = FAMILIES[spec.family], params.finetune.for_task(spec)
    model_dir = paths.MODELS / model_name
    tokenizer = load_tokenizer(model_dir)
    tables, labels, data = load_task_data(cfg.task, family, ("train", "dev"), tokenizer, training)
    device = resolve_device(params.finetune.device)
    model, _ = analysed_model(params, model_name, cfg.task, family, labels, data["train"], training, device)
    examples, mapped = explain_predictions(model, data["dev"], tables["dev"], labels, tokenizer, cfg,
                                           training.eval_batch_size, device)
    summary = {"model": model_name, "task": cfg.task, "steps": cfg.steps, "attention_maps_of": mapped,
               "examples": [{k: v for k, v in e.items() if k != "attention"} for e in examples]}
    out_dir = paths.ATTRIBUTIONS / model_name
    with atomic_outputs(out_dir, paths.stage_metrics("attributions", model_name)) as (out, metrics_file):
        out.mkdir(parents=True)
        (out / "attributions.html").write_text(attributions_page(model_name, cfg.task, examples, mapped),
                                               encoding="utf-8")
        write_metrics(metrics_file, AttributionsMetrics(**summary))


if __name__ == "__main__":
    run_stage(attributions, *sys.argv[1:])
