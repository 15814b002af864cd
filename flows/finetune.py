"""Stage ``finetune@<model>``: fine-tune one model (``models/<model>``) on the sentiment task
with several seeds; write per-seed metrics, their aggregate and the predictions."""

import sys

import numpy as np
import pyarrow.parquet as pq
import torch
from prefect import flow, get_run_logger
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from tasks import paths
from tasks.classification import EncodedClassification, classification_metrics
from tasks.finetune import fit, predict, summarize
from tasks.errors import ParamsError
from tasks.io import atomic_outputs, write_json, write_jsonl
from tasks.modeling import resolve_device
from tasks.params import load_params
from tasks.stage import run_stage, stage_task

TASK = "sentiment"


@stage_task
def run_seed(model_dir, splits, cfg, seed: int, device):
    logger = get_run_logger()
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2)
    train = fit(model, splits["train"], epochs=cfg.epochs, batch_size=cfg.batch_size, lr=cfg.learning_rate,
                warmup_fraction=cfg.warmup_fraction, weight_decay=cfg.weight_decay,
                max_grad_norm=cfg.max_grad_norm, seed=seed, device=device, log=logger.info)
    result = {"seed": seed, "train": train}
    predictions = {}
    for split in ("dev", "test"):
        logits = np.concatenate(predict(model, splits[split], batch_size=128, device=device)["logits"])
        predictions[split] = logits.argmax(-1)
        result[split] = classification_metrics(splits[split].labels, predictions[split])
    logger.info(f"seed {seed}: dev {result['dev']} test {result['test']}")
    return result, predictions


@flow(name="finetune")
def finetune(model_name: str) -> None:
    params = load_params()
    cfg = params.finetune
    if model_name not in cfg.models:
        raise ParamsError(f"model {model_name!r} is not in finetune.models ({', '.join(cfg.models)})")
    model_dir = paths.MODELS / model_name
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tables = {s: pq.read_table(paths.downstream_split(TASK, s)) for s in ("train", "dev", "test")}
    splits = {s: EncodedClassification.encode(t, tokenizer, cfg.max_seq_length) for s, t in tables.items()}
    device = resolve_device(cfg.device)
    runs, predictions = [], {}
    for seed in cfg.seeds:
        result, predictions[seed] = run_seed(model_dir, splits, cfg, seed, device)
        runs.append(result)
    metrics = {"model": model_name, "task": TASK, "seeds": cfg.seeds, "runs": runs,
               **{split: {m: summarize([r[split][m] for r in runs]) for m in runs[0][split]}
                  for split in ("dev", "test")}}
    with atomic_outputs(paths.PREDICTIONS / model_name,
                        paths.stage_metrics("finetune", model_name)) as (out, metrics_file):
        (out / TASK).mkdir(parents=True)
        for seed, preds in predictions.items():
            for split, pred in preds.items():
                rows = [{"id": i, "label": int(g), "prediction": int(p)} for i, g, p in
                        zip(tables[split].column("id").to_pylist(), splits[split].labels, pred)]
                write_jsonl(out / TASK / f"{split}-seed{seed}.jsonl", rows)
        write_json(metrics_file, metrics)


if __name__ == "__main__":
    run_stage(finetune, *sys.argv[1:])
