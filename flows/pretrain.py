"""Stage ``pretrain@<objective>``: pretrain a BERT encoder from scratch on the objective's
masked data; resumable; saves a Hugging Face model + tokenizer to ``models/<objective>``."""

import hashlib
import json
import sys

import torch
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks import paths
from tasks.io import atomic_outputs, sha256_tree, write_json
from tasks.modeling import bert_config, new_masked_lm, resolve_device
from tasks.params import load_params
from tasks.pretrain import MaskedExamples, train, write_log
from tasks.pretraining_data import read_shards
from tasks.stage import run_stage, stage_task


@flow(name="pretrain")
def pretrain(objective: str) -> None:
    params = load_params()
    params.objective(objective)
    logger = get_run_logger()
    data_dir = paths.PRETRAINING / objective
    data = MaskedExamples.from_table(read_shards(data_dir))
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    config = bert_config(params.model, len(tokenizer), params.pretraining_data.max_seq_length,
                         tokenizer.pad_token_id)
    model = new_masked_lm(config, params.seed, params.model.sinusoidal_position_amplitude)
    device = resolve_device(params.pretrain.device)
    # A checkpoint is reused only by a run with the same params and data.
    fingerprint = hashlib.sha256(json.dumps(
        [params.model.model_dump(), params.pretrain.model_dump(), params.seed, sha256_tree(data_dir)],
        sort_keys=True).encode()).hexdigest()
    checkpoint = paths.CHECKPOINTS / "pretrain" / objective / "last.pt"
    logger.info(f"{objective}: {len(data)} examples, {sum(p.numel() for p in model.parameters()):,} parameters,"
                f" device {device}, {torch.get_num_threads()} threads")
    summary = stage_task(train)(model, data, params.pretrain, seed=params.seed, device=device,
                                checkpoint=checkpoint, fingerprint=fingerprint, log=logger.info)
    rows = summary.pop("rows")
    summary.update(objective=objective, parameters=sum(p.numel() for p in model.parameters()),
                   device=str(device), threads=torch.get_num_threads())
    with atomic_outputs(paths.MODELS / objective, paths.stage_metrics("pretrain", objective),
                        paths.stage_metrics("pretrain", objective, ".csv")) as (out, metrics, log_csv):
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        write_json(metrics, summary)
        write_log(log_csv, rows)
    checkpoint.unlink(missing_ok=True)


if __name__ == "__main__":
    run_stage(pretrain, *sys.argv[1:])
