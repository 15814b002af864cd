"""Stage ``attributions@<model>``: Integrated Gradients token attributions and per-layer
attention maps of the most confident correct and wrong dev predictions of a classification
model (the one ``finetune`` saved for ``attributions.task`` and its first seed), written as one
self-contained HTML page plus a JSON summary (:mod:`tasks.interpretability.attributions`)."""

import sys

from prefect import flow

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.interpretability import AttributionsMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.finetuned import task_run
from tasks.interpretability.attributions import explain_predictions
from tasks.report.attributions import attributions_page


@flow(name="attributions")
def attributions(model_name: str) -> None:
    params = load_params()
    cfg = params.attributions
    run = task_run(params, model_name, cfg.task)
    examples, mapped = explain_predictions(run.finetuned(params.finetune.seeds[0]), run.data["dev"],
                                           run.tables["dev"], run.labels, run.tokenizer, cfg,
                                           run.training.eval_batch_size, run.device)
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
