"""Stage ``prune@<model>-<task>``: training-free structured pruning (TextPruner) of the models
``finetune@<model>-<task>`` saved, one per seed.

Rows (:func:`tasks.compression.variants.prune_rows`): the unpruned models, then every variant of
importance (supervised, self-supervised) x allocation (homogeneous, uneven) x schedule (one shot,
``n_iters`` iterations), each also measured after vocabulary pruning to the task's tokens. The
first seed's pruned model of each variant is saved under ``results/prune/<model>-<task>/<variant>``
(:func:`tasks.compression.prune.save_pruned`).
"""

import sys
import time

from prefect import flow
from transformers import AutoConfig

from tasks.compression.prune import check_targets
from tasks.compression.variants import prune_rows
from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.compression import PruneMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.finetuned import task_run


@flow(name="prune")
def prune(model_name: str, task_name: str) -> None:
    t0 = time.perf_counter()
    params = load_params()
    cfg, seeds = params.compression, params.finetune.seeds
    run = task_run(params, model_name, task_name)
    check_targets(cfg.prune.heads, cfg.prune.ffn, AutoConfig.from_pretrained(run.model_dir), str(run.model_dir))
    name = paths.finetune_name(model_name, task_name)
    with atomic_outputs(paths.PRUNED / name, paths.stage_metrics("prune", name)) as (out, metrics_file):
        rows = prune_rows(run, model_name, cfg.prune, seeds, params.finetune.seed_workers, cfg.latency_repeats, out)
        settings = {"heads": cfg.prune.heads, "ffn": cfg.prune.ffn, "n_iters": cfg.prune.n_iters,
                    "importance_examples": cfg.prune.importance_examples}
        write_metrics(metrics_file, PruneMetrics(
            task=task_name, family=run.spec.family, headline=run.spec.metrics[0], model=model_name, seeds=seeds,
            settings=settings, variants=rows, wall_sec=round(time.perf_counter() - t0, 2)))


if __name__ == "__main__":
    run_stage(prune, *sys.argv[1:])
