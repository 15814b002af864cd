"""Stage ``attributions@<model>``: Integrated Gradients token attributions and per-layer
attention maps of the most confident correct and wrong dev predictions of a classification
model (fine-tuned as ``finetune`` does with its first seed), written as one self-contained
HTML page plus a JSON summary (:mod:`tasks.interpretability.attributions`)."""

import sys

import numpy as np
import torch
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.model_dir import load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage, stage_task
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import fit_seed, predict
from tasks.interpretability.attributions import attributions_page, integrated_gradients
from tasks.training.device import resolve_device


def _encoder(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "encoder", None) or model.base_model


@stage_task
def explain(model, data, table, labels, tokenizer, index: int, steps: int) -> dict:
    """IG attributions towards the predicted class and eager attention maps of example ``index``."""
    batch = {k: v for k, v in data.batch(np.array([index])).items() if k != "labels"}
    with torch.no_grad():
        probs = model(**batch).logits.float().softmax(-1)[0]
        attentions = _encoder(model)(**batch, output_attentions=True).attentions  # layers x [1, H, L, L]
    predicted = int(probs.argmax())
    scores, delta = integrated_gradients(model, batch, predicted, tokenizer.pad_token_id,
                                         set(tokenizer.all_special_ids), steps)
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    return {"id": table.column("id")[index].as_py(), "label": labels[table.column("label")[index].as_py()],
            "prediction": labels[predicted], "probability": float(probs[predicted]), "tokens": tokens,
            "attributions": [round(float(s), 5) for s in scores], "convergence_delta": delta,
            "attention": [a[0].numpy() for a in attentions]}


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
    model, _ = fit_seed(family, model_dir, labels, data["train"], training, params.finetune.seeds[0], device,
                        get_run_logger().info)
    logits = predict(model, data["dev"], batch_size=training.eval_batch_size, device=device)["logits"]
    probs = torch.from_numpy(np.concatenate(logits))
    model.cpu()  # a handful of examples: Integrated Gradients on the CPU
    _encoder(model).set_attn_implementation("eager")  # attention probabilities need eager attention
    probs = probs.softmax(-1).numpy()
    gold, pred = tables["dev"].column("label").to_numpy(), probs.argmax(-1)
    short = data["dev"].lengths <= cfg.max_tokens
    chosen = []
    for correct, count in ((True, cfg.correct), (False, cfg.wrong)):
        pool = np.flatnonzero(short & ((gold == pred) == correct))
        chosen += pool[np.argsort(-probs[pool].max(-1), kind="stable")][:count].tolist()
    n_correct = int(np.sum(gold[chosen] == pred[chosen])) if chosen else 0
    examples = [explain(model, data["dev"], tables["dev"], labels, tokenizer, i, cfg.steps) for i in chosen]
    mapped = min(n_correct, len(examples) - 1)  # the first wrong example (the correct ones come first)
    summary = {"model": model_name, "task": cfg.task, "steps": cfg.steps, "attention_maps_of": mapped,
               "examples": [{k: v for k, v in e.items() if k != "attention"} for e in examples]}
    out_dir = paths.ATTRIBUTIONS / model_name
    with atomic_outputs(out_dir, paths.stage_metrics("attributions", model_name)) as (out, metrics_file):
        out.mkdir(parents=True)
        (out / "attributions.html").write_text(attributions_page(model_name, cfg.task, examples, mapped),
                                               encoding="utf-8")
        write_json(metrics_file, summary)


if __name__ == "__main__":
    run_stage(attributions, *sys.argv[1:])
