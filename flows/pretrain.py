"""Stage ``pretrain@<objective>``: pretrain a BERT encoder from scratch (or from the checkpoint
``pretrain.init_from``) on the objective's data (static or dynamic masking; MLM or PerLM head,
plus NSP/SOP); resumable; saves a Hugging Face model + tokenizer to ``models/<objective>`` and
the other heads beside it."""

import sys

import torch
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.pretraining import PretrainMetrics
from tasks.core.params import load_params
from tasks.pretraining.modeling import prepare_model, pretraining_model, resolve_init_from, save_pretrained
from tasks.pretraining.checkpoint import pretrain_checkpoint
from tasks.pretraining.examples import PretrainingExamples, objective_masker
from tasks.pretraining.pretrain import train, write_log
from tasks.pretraining.masking import masking_config
from tasks.pretraining.pretraining_data import read_shards
from tasks.training.distributed import join_process_group, run_training_stage


@flow(name="pretrain")
def pretrain(objective: str) -> None:
    params = load_params()
    spec = params.objective(objective)
    masking = masking_config(spec, params.pretraining_data)
    logger = get_run_logger()
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    masker = objective_masker(objective, spec, masking, params.seed, tokenizer, paths.LEXICON)
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / objective), masker)
    init_folder = resolve_init_from(params.pretrain.init_from, params)  # None: random init
    model = pretraining_model(params, spec, masking, tokenizer, init_folder)
    ranks, device = join_process_group(params.pretrain.device, "pretrain.device")  # a DDP rank under torchrun
    prepare_model(model, params.pretrain, device)  # TF32, activation checkpointing, compile
    checkpoint, fingerprint = pretrain_checkpoint(objective, params, spec, masking, init_folder)
    if init_folder is not None:
        logger.info(f"starting from {init_folder} (pretrain.init_from {params.pretrain.init_from}, "
                    f"{model.mlm.config.num_hidden_layers} layers x {model.mlm.config.hidden_size})")
    n_params = sum(p.numel() for p in model.mlm.parameters())
    logger.info(f"{objective}: {len(data)} examples ({'dynamic' if spec.dynamic else 'static'} masking), "
                f"{n_params:,} encoder+MLM parameters, device {device}, {torch.get_num_threads()} threads")
    summary = train(model, data, params.pretrain, seed=params.seed, device=device, checkpoint=checkpoint,
                    fingerprint=fingerprint, log=logger.info, ranks=ranks)
    if not ranks.is_main:  # rank 0 writes the outputs
        return
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
    run_training_stage(pretrain, *sys.argv[1:], device="pretrain.device")
