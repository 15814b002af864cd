"""Stage ``curves@<objective>-<seed>``: the held-out measure (:mod:`tasks.pretraining.heldout`: MLM,
or its objective's own) of a pretrained model at each of its snapshots and at the
end of its budget, on text it never saw (the evaluation text of ``curves.heldout_task``), with the
masked positions the same for every model. The report plots it against pretraining tokens,
seconds and FLOPs, beside the snapshots' fine-tuned scores (``finetune_snapshot``), as the
score-for-compute curves."""

import sys

from prefect import flow, get_run_logger
from transformers import BertTokenizerFast

from tasks.core import paths
from tasks.core.io import atomic_outputs, read_json
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.pretraining import CurvesMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.pretraining.heldout import corpus_unigram, heldout_point
from tasks.pretraining.objectives import build
from tasks.pretraining.saving import HEADS_INFO, SNAPSHOT_FILE
from tasks.training.device import resolve_device


@flow(name="curves")
def curves(objective: str, seed: str) -> None:
    params, seed = load_params(), int(seed)
    name, cfg = paths.seeded(objective, seed), params.curves
    model_dir = paths.model_dir(name)
    tokenizer = BertTokenizerFast.from_pretrained(model_dir)
    pretraining = build(params, objective)
    ids, offsets, masks = pretraining.heldout_inputs(params, tokenizer,
                                                     resolve_device(params.pretrain.device, "pretrain.device"))
    unigram = corpus_unigram(paths.TOKENS, len(tokenizer))
    # MLM ([MASK] or its objective's corruption: Mac, sound-alike) or a kind's own; none for PerLM predicting
    # positions only (its MLM head is untrained)
    measure = pretraining.measure(read_json(model_dir / HEADS_INFO)["heldout"], masks)
    points, predictions = [], None
    for folder in sorted((model_dir / "snapshots").glob("*"), key=lambda p: float(p.name)) + [model_dir]:
        at = read_json(folder / SNAPSHOT_FILE) if folder != model_dir else {"fraction": 1.0}
        point = heldout_point(folder, measure, ids, offsets, unigram, masks)
        predictions = point.pop("predictions")
        points.append({"fraction": at["fraction"], **point})
        failed = [g["name"] for g in points[-1]["gates"] if not g["passed"]]
        loss = f"{measure.label} loss {points[-1][measure.loss_field]}" if measure else "no measure"
        get_run_logger().info(f"{name} at {at['fraction']:g} of its budget: {loss}; gates failed: {failed or 'none'}")
    with atomic_outputs(paths.stage_metrics("curves", name)) as (out,):
        write_metrics(out, CurvesMetrics(objective=objective, seed=seed, heldout_task=cfg.heldout_task,
                                         sequences=len(offsets) - 1, measure=measure.name if measure else None,
                                         predictions=predictions, points=points))


if __name__ == "__main__":
    run_stage(curves, *sys.argv[1:])
