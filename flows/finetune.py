"""Stages ``finetune@<objective>-<seed>-<task>``, ``finetune_random@<seed>-<task>``,
``finetune_baseline@<model>-<task>`` and ``finetune_snapshot@...``: fine-tune one model
(:func:`tasks.core.paths.model_dir`) on one downstream task with every fine-tuning seed (side by side on CPU:
``finetune.seed_workers``); per-seed scores, their summary, predictions and models
(:mod:`tasks.downstream.finetuned`) in ``results/finetune/<model>-<task>``, the per-example test outcomes in
``metrics/outcomes/<model>-<task>.parquet`` (:mod:`tasks.downstream.outcomes`). With ``finetune.learning_rate_scales``
of more than one value, each learning rate of that grid is fine-tuned with every seed (one worker per seed for the whole
grid) and the one with the best mean dev score is kept (its scores, predictions and models; every setting's dev score in
the metrics); test is scored once per seed, at that setting. Each run keeps the weights of its best dev epoch."""

import sys
import time
from functools import partial

from prefect import flow

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.core.model_dir import check_weights, load_tokenizer
from tasks.core.params import load_params
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import learning_rate_grid, run_seed, score_test, summarize
from tasks.downstream.finetuned import write_finetuned
from tasks.downstream.outcomes import write_outcomes
from tasks.report.cards import finetuned_card
from tasks.training.distributed import join_process_group, run_training_stage
from tasks.training.seeds import map_seeds


@flow(name="finetune")
def finetune(model_name: str, task_name: str) -> None:
    params = load_params()
    cfg, spec = params.finetune, params.task(task_name)
    training, family = params.finetune_training(model_name, task_name), FAMILIES[spec.family]
    model_dir = paths.model_dir(model_name)
    tokenizer = load_tokenizer(model_dir)
    check_weights(model_dir)  # fail before encoding the task, not at the first seed
    tables, labels, data = load_task_data(task_name, family, ("train", "dev", "test"), tokenizer, training)
    # truncation (NER) and answers no window holds (MRC): counted, never silently lost
    encoding = {s: d.stats for s, d in data.items() if getattr(d, "stats", None)}
    ranks, device = join_process_group(cfg.device, "finetune.device")  # one DDP rank per process under torchrun
    t0 = time.perf_counter()
    grid = learning_rate_grid(training, cfg.learning_rate_scales)
    seed_run = partial(run_seed, family, model_dir, labels, data, tables, grid, spec.metrics, device=device, ranks=ranks)
    by_seed = map_seeds(seed_run, cfg.seeds, cfg.seed_workers, device, "finetune", ranks)  # [seed][setting]
    if not ranks.is_main:  # rank 0 evaluates and writes the outputs
        return
    headline = spec.metrics[0]
    dev = [summarize([runs[i][0]["dev"][headline] for runs in by_seed])["mean"] for i in range(len(grid))]
    best = dev.index(max(dev))  # the first of the best on dev (never test)
    training = grid[best]
    results = [score_test(family, runs[best], data, tables, training, labels, spec.metrics, device) for runs in by_seed]
    wall = round(time.perf_counter() - t0, 2)
    runs = [result for result, _, _ in results]
    summary = {split: {m: summarize([r[split][m] for r in runs]) for m in spec.metrics} for split in ("dev", "test")}
    metrics = {"model": model_name, "task": task_name, "family": spec.family, "headline": headline,
               "seeds": cfg.seeds, "seed_workers": cfg.seed_workers, "wall_sec": wall, "encoding": encoding,
               "training": training.model_dump(), "runs": runs, **summary,
               **({"search": [{"learning_rate": g.learning_rate, "dev": d} for g, d in zip(grid, dev)]}
                  if len(grid) > 1 else {})}
    outcomes = {seed: family.counts(headline, tables["test"], predictions["test"])  # none: Matthews, Pearson
                for seed, (_, predictions, _) in zip(cfg.seeds, results) if headline in family.counted}
    name = paths.finetune_name(model_name, task_name)
    with atomic_outputs(paths.PREDICTIONS / name, paths.stage_metrics("finetune", name),
                        paths.stage_metrics("outcomes", name, ".parquet")) as (out, metrics_file, outcomes_file):
        cards = [finetuned_card(model_name, task_name, family, seed, cfg.seeds, runs, metrics["training"], labels,
                                outcomes, headline) for seed in cfg.seeds]
        write_finetuned(out, cfg.seeds, results, tokenizer, cards)
        write_metrics(metrics_file, FinetuneMetrics(**metrics))
        write_outcomes(outcomes_file, spec.family, headline, outcomes)

if __name__ == "__main__":
    run_training_stage(finetune, *sys.argv[1:], device="finetune.device",
                       memory="finetune.training.batch_size and eval_batch_size, or finetune.seed_workers")
