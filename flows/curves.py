"""Stage ``curves@<objective>-<seed>``: the held-out measure (:mod:`tasks.pretraining.heldout`: MLM,
or ELECTRA's replaced-token detection) of a pretrained model at each of its snapshots and at the
end of its budget, on text it never saw (the evaluation text of ``curves.heldout_task``), with the
masked positions the same for every model. The report plots it against pretraining tokens,
seconds and FLOPs, beside the snapshots' fine-tuned scores (``finetune_snapshot``), as the
score-for-compute curves."""

import sys

from prefect import flow, get_run_logger
from transformers import BertForMaskedLM, BertTokenizerFast, ElectraForMaskedLM, ElectraForPreTraining

from tasks.core import paths
from tasks.core.io import atomic_outputs, read_json
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.pretraining import CurvesMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.pretraining.heldout import evaluate_mlm, evaluate_rtd, heldout_text
from tasks.pretraining.modeling import GENERATOR_DIR, HEADS_INFO, SNAPSHOT_FILE
from tasks.training.device import resolve_device


@flow(name="curves")
def curves(objective: str, seed: str) -> None:
    params, seed = load_params(), int(seed)
    name, cfg, data = paths.seeded(objective, seed), params.curves, params.pretraining_data
    model_dir = paths.model_dir(name)
    tokenizer = BertTokenizerFast.from_pretrained(model_dir)
    ids, offsets = heldout_text(cfg.heldout_task, tokenizer, data.max_seq_length, cfg.heldout_sequences)
    # MLM, or ELECTRA's replaced-token detection; none for PerLM predicting positions only (its MLM head is untrained)
    measure = read_json(model_dir / HEADS_INFO)["heldout"]
    device, points = resolve_device(params.pretrain.device, "pretrain.device"), []
    masks = dict(lang=cfg.heldout_task, seed=params.seed, mask_token_id=tokenizer.mask_token_id,
                 masked_lm_prob=data.masked_lm_prob, max_predictions=data.max_predictions_per_seq, device=device)
    for folder in sorted((model_dir / "snapshots").glob("*"), key=lambda p: float(p.name)) + [model_dir]:
        at = read_json(folder / SNAPSHOT_FILE) if folder != model_dir else {"fraction": 1.0}
        scores = {}
        if measure == "mlm":
            scores = evaluate_mlm(BertForMaskedLM.from_pretrained(folder), ids, offsets, **masks)
        elif measure == "rtd":
            scores = evaluate_rtd(ElectraForPreTraining.from_pretrained(folder),
                                  ElectraForMaskedLM.from_pretrained(folder / GENERATOR_DIR), ids, offsets, **masks)
        points.append({"fraction": at["fraction"], **{k: scores.get(k) for k in ("loss", "accuracy", "rtd_loss",
                                                                                   "rtd_accuracy")}})
        get_run_logger().info(f"{name} at {at['fraction']:g} of its budget: {scores}")
    with atomic_outputs(paths.stage_metrics("curves", name)) as (out,):
        write_metrics(out, CurvesMetrics(objective=objective, seed=seed, heldout_task=cfg.heldout_task,
                                         sequences=len(offsets) - 1, measure=measure,
                                         predictions=scores.get("predictions", scores.get("tokens")),
                                         points=points))


if __name__ == "__main__":
    run_stage(curves, *sys.argv[1:])
