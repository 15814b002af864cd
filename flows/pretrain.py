"""Stage ``pretrain@<objective>``: pretrain a BERT encoder from scratch on the objective's
data (static or dynamic masking; MLM or PerLM head, plus NSP/SOP); resumable; saves a
Hugging Face model + tokenizer to ``models/<objective>`` and the other heads beside it."""

import sys

import torch
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics import PretrainMetrics, write_metrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.pretraining.modeling import pretraining_model, save_pretrained
from tasks.pretraining.pretrain import PretrainingExamples, objective_masker, pretrain_checkpoint, train, write_log
from tasks.pretraining.pretraining_data import masking_config, read_shards
from tasks.training.device import resolve_device


@flow(name="pretrain")
def pretrain(objective: str) -> None:
    params = load_params()
    spec = params.objective(objective)
    masking = masking_config(spec, params.pretraining_data)
    logger = get_run_logger()
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    masker = objective_masker(objective, spec, masking, params.seed, tokenizer, paths.LEXICON)
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / objective), masker)
    model = pretraining_model(params, spec, masking, tokenizer)
    device = resolve_device(params.pretrain.device)
    checkpoint, fingerprint = pretrain_checkpoint(objective, params, spec, masking)
    n_params = sum(p.numel() for p in model.mlm.parameters())
    logger.info(f"{objective}: {len(data)} examples ({'dynamic' if spec.dynamic else 'static'} masking), "
                f"{n_params:,} encoder+MLM parameters, device {device}, {torch.get_num_threads()} threads")
    summary = train(model, data, params.pretrain, seed=params.seed, device=device, checkpoint=checkpoint,
                    fingerprint=fingerprint, log=logger.info)
    rows = summary.pop("rows")
    summary.update(objective=objective, parameters=n_params, device=str(device), threads=torch.get_num_threads(),
                   dynamic=spec.dynamic, sentence_task=spec.sentence_task,
                   token_target="position" if masking.predicts_positions else "token")
    with atomic_outputs(paths.MODELS / objective, paths.stage_metrics("pretrain", objective),
                        paths.stage_metrics("pretrain", objective, ".csv")) as (out, metrics, log_csv):
        save_pretrained(model, tokenizer, out)
        write_metrics(metrics, PretrainMetrics(**summary))
        write_log(log_csv, rows)
    checkpoint.unlink(missing_ok=True)


if __name__ == "__main__":
    run_stage(pretrain, *sys.argv[1:])
