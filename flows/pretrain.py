"""Stage ``pretrain@<objective>-<seed>``: pretrain a BERT encoder from scratch (or from the
checkpoint ``pretrain.init_from``) on the objective's data made with pretraining seed ``seed``
(static or dynamic masking; MLM, PerLM or SBO heads, plus NSP/SOP; or ELECTRA's generator and
discriminator), initialised and ordered by that seed, for a token or an equal-FLOPs budget;
resumable; saves a Hugging Face model + tokenizer to ``models/<objective>-<seed>``, the other
heads beside it, and the model at ``pretrain.snapshots`` of the budget in ``snapshots/``."""

import shutil
import sys
from functools import partial

import torch
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs, read_json
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.pretraining import PretrainMetrics
from tasks.core.params import load_params
from tasks.pretraining.init_from import resolve_init_from
from tasks.pretraining.modeling import prepare_model, pretraining_model
from tasks.pretraining.saving import SNAPSHOT_FILE, save_pretrained, save_snapshot
from tasks.pretraining.checkpoint import clear_checkpoint, pretrain_checkpoint
from tasks.pretraining.examples import PretrainingExamples, objective_masker
from tasks.pretraining.gates import training_gates
from tasks.pretraining.pretrain import train, write_log
from tasks.pretraining.masking import masking_config
from tasks.pretraining.pretraining_data import read_shards
from tasks.pretraining.recipe import recipe
from tasks.training.distributed import join_process_group, run_training_stage


@flow(name="pretrain")
def pretrain(objective: str, seed: str) -> None:
    params, seed = load_params(), int(seed)
    spec, name = params.objective(objective), paths.seeded(objective, seed)
    cfg, chosen = recipe(params, objective, paths.RECIPES / f"{objective}.json")  # the sweep's choice
    masking = masking_config(spec, params.pretraining_data)
    logger = get_run_logger()
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    masker = objective_masker(objective, spec, masking, seed, tokenizer, paths.LEXICON)
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / name), masker)
    init_folder = resolve_init_from(params.pretrain.init_from, params)  # None: random init
    model = pretraining_model(params, spec, masking, tokenizer, seed, init_folder)
    ranks, device = join_process_group(cfg.device, "pretrain.device")  # a DDP rank under torchrun
    prepare_model(model, cfg, device)  # TF32, activation checkpointing, compile
    checkpoint, fingerprint = pretrain_checkpoint(objective, seed, params, cfg, spec, masking, init_folder)
    snapshots = checkpoint.parent / f"snapshots-{fingerprint[:16]}"  # a killed run's snapshots stay for its resume
    config = model.hf.config
    if init_folder is not None:
        logger.info(f"starting from {init_folder} (pretrain.init_from {params.pretrain.init_from}, "
                    f"{config.num_hidden_layers} layers x {config.hidden_size})")
    n_params = sum(p.numel() for p in model.hf.parameters())
    logger.info(f"{name}: {len(data)} examples ({'dynamic' if spec.dynamic else 'static'} masking), "
                f"{n_params:,} parameters in the saved {config.model_type} model, device {device}, "
                f"{torch.get_num_threads()} threads, budget {spec.budget}")
    summary = train(model, data, cfg, seed=seed, device=device, checkpoint=checkpoint,
                    fingerprint=fingerprint, log=logger.info, ranks=ranks, snapshots=tuple(cfg.snapshots),
                    snapshot=partial(save_snapshot, model, tokenizer, snapshots),
                    equal_flops=spec.budget == "mlm_flops")
    if not ranks.is_main:  # rank 0 writes the outputs
        return
    rows = summary.pop("rows")
    summary["gates"] = [g.record() for g in training_gates(rows, data, cfg.batch_size, cfg.log_every, spec.sentence_task,
                                                           masking.predicts_positions, model.full_targets)]
    summary.update(objective=objective, seed=seed, recipe=chosen, learning_rate=cfg.learning_rate,
                   batch_size=cfg.batch_size, parameters=n_params, device=str(device),
                   threads=torch.get_num_threads(),
                   dynamic=spec.dynamic, sentence_task=spec.sentence_task, budget=spec.budget,
                   token_target="replaced" if spec.rtd else "position" if masking.predicts_positions else "token")
    with atomic_outputs(paths.MODELS / name, paths.stage_metrics("pretrain", name),
                        paths.stage_metrics("pretrain", name, ".csv")) as (out, metrics, log_csv):
        save_pretrained(model, tokenizer, out)
        if cfg.snapshots:
            shutil.copytree(snapshots, out / "snapshots", ignore=shutil.ignore_patterns("*.timing.json"))
        summary["snapshots"] = [{**read_json(snapshots / f"{f:g}" / SNAPSHOT_FILE), **read_json(
            snapshots / f"{f:g}.timing.json")} for f in cfg.snapshots]
        write_metrics(metrics, PretrainMetrics(**summary))
        write_log(log_csv, rows)
    clear_checkpoint(checkpoint)


if __name__ == "__main__":
    run_training_stage(pretrain, *sys.argv[1:], device="pretrain.device")
