"""Stage ``sweep@<objective>``: the objective trained for ``sweep.fraction`` of its budget once per ``sweep.settings``
entry, each measured on the held-out task's dev text (:mod:`tasks.pretraining.sweep`); the best of the settings that
learned (no divergence, every gate passed) is the recipe its pretrainings train with (``data/recipes/<objective>.json``; each setting's result: ``metrics/sweep/<objective>.json``)."""

import sys
import time
from functools import partial

from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.pretraining import SweepMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.pretraining.checkpoint import sweep_checkpoint
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.heldout import corpus_unigram
from tasks.pretraining.init_from import resolve_init_from
from tasks.pretraining.objectives import build
from tasks.pretraining.pretraining_data import read_shards
from tasks.pretraining.recipe import write_choice
from tasks.pretraining.sweep import choose, run_setting
from tasks.training.device import resolve_device


@flow(name="sweep")
def sweep(objective: str) -> None:
    params, logger, t0 = load_params(), get_run_logger(), time.perf_counter()
    pretraining, seed, cfg = build(params, objective), params.sweep.seed, params.sweep
    if not cfg.settings:  # no search: the recipe is params' own (objectives.<name>.pretrain over pretrain)
        logger.info(f"sweep {objective}: no sweep.settings, pretrain trains with params' own recipe")
        return _write(objective, params, "params", {}, {}, t0)
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / paths.seeded(objective, seed)),
                                          pretraining.masker(seed, tokenizer, paths.LEXICON))
    init_folder = resolve_init_from(params.pretrain.init_from, params)  # as pretrain starts: None is random init
    device = resolve_device(params.pretrain.device, "pretrain.device")
    ids, offsets, masks = pretraining.heldout_inputs(params, tokenizer, device, split="dev")
    unigram, results = corpus_unigram(paths.TOKENS, len(tokenizer)), {}
    for setting, overrides in cfg.settings.items():
        recipe = params.pretrain_for(objective, overrides)
        checkpoint, fingerprint = sweep_checkpoint(objective, setting, params, recipe, pretraining.spec, init_folder)
        results[setting] = run_setting(
            pretraining, partial(pretraining.model, params, tokenizer, seed, init_folder), data, recipe, cfg.fraction,
            seed=seed, device=device, checkpoint=checkpoint, fingerprint=fingerprint, heldout=(ids, offsets),
            masks=masks, unigram=unigram, log=logger.info)
        logger.info(f"sweep {objective}, {setting} {overrides}: {results[setting]}")
    chosen = choose(objective, results, cfg.learned_only)
    logger.info(f"sweep {objective}: {chosen} chosen")
    _write(objective, params, chosen, cfg.settings[chosen], results, t0)


def _write(objective: str, params, chosen: str, overrides: dict, results: dict, t0: float) -> None:
    """The choice pretrain reads (``data/recipes/<objective>.json``) and every setting's result."""
    cfg = params.sweep
    with atomic_outputs(paths.RECIPES / f"{objective}.json", paths.stage_metrics("sweep", objective)) as (made, out):
        write_choice(made, chosen, overrides)
        write_metrics(out, SweepMetrics(
            objective=objective, seed=cfg.seed, fraction=cfg.fraction, heldout_task=params.curves.heldout_task,
            split="dev", chosen=chosen, wall_sec=round(time.perf_counter() - t0, 2),
            settings=[{"name": s, "overrides": cfg.settings[s], **r} for s, r in results.items()]))


if __name__ == "__main__":
    run_stage(sweep, *sys.argv[1:])
