"""Stage ``pretrain@<objective>-<seed>``: pretrain the objective's encoder on its data of pretraining seed ``seed``
with the recipe its sweep chose (a token or equal-FLOPs budget; resumable) into ``models/<objective>-<seed>``."""

import sys
from functools import partial

from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.pretraining import PretrainMetrics
from tasks.core.params import load_params
from tasks.pretraining.checkpoint import clear_checkpoint, pretrain_checkpoint
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.init_from import resolve_init_from
from tasks.pretraining.modeling import prepare_model
from tasks.pretraining.objectives import build
from tasks.pretraining.pretrain import train, write_log
from tasks.pretraining.pretraining_data import read_shards
from tasks.pretraining.recipe import recipe
from tasks.pretraining.saving import save_run, save_snapshot
from tasks.report.cards import pretrained_card
from tasks.training.distributed import join_process_group, run_training_stage


@flow(name="pretrain")
def pretrain(objective: str, seed: str) -> None:
    params, seed = load_params(), int(seed)
    pretraining, name, logger = build(params, objective), paths.seeded(objective, seed), get_run_logger()
    cfg, chosen = recipe(params, objective, paths.RECIPES / f"{objective}.json")  # the sweep's choice
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / name),
                                          pretraining.masker(seed, tokenizer, paths.LEXICON))
    init_folder = resolve_init_from(params.pretrain.init_from, params)  # None: random init
    ranks, device = join_process_group(cfg.device, "pretrain.device")  # a DDP rank under torchrun
    model = prepare_model(pretraining.model(params, tokenizer, seed, init_folder), cfg, device)
    checkpoint, fingerprint = pretrain_checkpoint(pretraining, seed, params, cfg, init_folder)
    snapshots = checkpoint.parent / f"snapshots-{fingerprint[:16]}"  # a killed run's snapshots stay for its resume
    facts = pretraining.facts(model, cfg, device)
    logger.info(f"{name}: {len(data)} examples, {facts}, starting from {init_folder or 'random weights'}")
    summary = train(model, data, cfg, seed=seed, device=device, checkpoint=checkpoint, fingerprint=fingerprint,
                    log=logger.info, ranks=ranks, snapshot=partial(save_snapshot, model, tokenizer, snapshots),
                    snapshots=tuple(cfg.snapshots), equal_flops=pretraining.equal_flops, logged=pretraining.logged)
    if not ranks.is_main:  # rank 0 writes the outputs
        return
    gates = pretraining.gates(summary["rows"], data, cfg, model)
    summary.update(objective=objective, seed=seed, recipe=chosen, gates=[g.record() for g in gates], **facts)
    with atomic_outputs(paths.MODELS / name, paths.stage_metrics("pretrain", name),
                        paths.stage_metrics("pretrain", name, ".csv")) as (out, metrics, log_csv):
        summary["snapshots"] = save_run(model, tokenizer, out, snapshots, cfg.snapshots)
        (out / "README.md").write_text(pretrained_card(name, summary), encoding="utf-8")
        write_log(log_csv, summary.pop("rows"))
        write_metrics(metrics, PretrainMetrics(**summary))
    clear_checkpoint(checkpoint)


if __name__ == "__main__":
    run_training_stage(pretrain, *sys.argv[1:], device="pretrain.device")
