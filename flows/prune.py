"""Stage ``prune@<model>-<task>``: training-free structured pruning (TextPruner) of the models
``finetune@<model>-<task>`` saved, one per seed.

Rows: the unpruned models, then every variant of importance (supervised, self-supervised) x
allocation (homogeneous, uneven) x schedule (one shot, ``n_iters`` iterations), each also
measured after vocabulary pruning to the task's tokens. The first seed's pruned model of each
variant is saved under ``results/prune/<model>-<task>/<variant>`` (:func:`tasks.compression.prune.save_pruned`).
"""

import copy
import sys
import time

from prefect import flow

from tasks.compression.measure import evaluate_variant, size_of
from tasks.compression.prune import (IMPORTANCE, Renumbered, importance, prune_copy, prune_vocabulary, save_pruned,
                                     used_ids, variants)
from tasks.core import paths
from tasks.core.errors import ParamsError
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.compression import PruneMetrics
from tasks.core.model_dir import load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import load_finetuned, model_file, read_scores
from tasks.training.device import resolve_device
from tasks.training.seeds import map_seeds


@flow(name="prune")
def prune(model_name: str, task_name: str) -> None:
    t0 = time.perf_counter()
    params = load_params()
    cfg, seeds = params.compression, params.finetune.seeds
    if model_name not in cfg.prune.models:
        raise ParamsError(f"model {model_name!r} is not in compression.prune.models ({', '.join(cfg.prune.models)})")
    if task_name not in cfg.tasks:
        raise ParamsError(f"task {task_name!r} is not in compression.tasks ({', '.join(cfg.tasks)})")
    spec = params.task(task_name)
    training, family, model_dir = params.finetune.for_task(spec), FAMILIES[spec.family], paths.MODELS / model_name
    tokenizer = load_tokenizer(model_dir)
    tables, labels, data = load_task_data(task_name, family, ("train", "dev", "test"), tokenizer, training)
    device = resolve_device(params.finetune.device)
    folder = paths.PREDICTIONS / paths.finetune_name(model_name, task_name)
    models = [load_finetuned(family, model_dir, labels, training, model_file(folder, s)) for s in seeds]
    by_seed = dict(zip(seeds, models))
    common = dict(family=family, data=data, tables=tables, training=training, labels=labels, metrics=spec.metrics,
                  device=device, repeats=cfg.latency_repeats)
    rows = [evaluate_variant("unpruned", f"{model_name} fine-tuned (finetune)", models,
                             read_scores(folder, seeds, spec.metrics), **common)]
    # vocabulary pruning keeps the tokens of the task's encoded splits: predictions unchanged
    keep = used_ids(list(data.values()), tokenizer.all_special_ids)
    knobs = dict(heads=cfg.prune.heads, ffn=cfg.prune.ffn, examples=cfg.prune.importance_examples,
                 batch_size=cfg.prune.importance_batch_size, device=device)
    # every variant of one importance kind starts from the IS of the unpruned model: computed once
    first = map_seeds(lambda seed, log: {kind: importance(by_seed[seed], data["train"], kind, examples=knobs["examples"],
                                                          batch_size=knobs["batch_size"], device=device)
                                         for kind in IMPORTANCE},
                      seeds, params.finetune.seed_workers, device, "importance")
    first = dict(zip(seeds, first))
    out_dir = paths.PRUNED / paths.finetune_name(model_name, task_name)
    with atomic_outputs(out_dir, paths.stage_metrics("prune", paths.finetune_name(model_name, task_name))) as (
            out, metrics_file):
        for variant in variants(cfg.prune.n_iters):
            # the seeds' fine-tuned models pruned side by side (finetune.seed_workers), measured here after
            pruned = map_seeds(lambda seed, log: prune_copy(by_seed[seed], data["train"], variant, **knobs,
                                                            first=first[seed][variant.importance]), seeds,
                               params.finetune.seed_workers, device, variant.name)
            row = evaluate_variant(variant.name, variant.description, [p for p, _ in pruned],
                                   [{"seed": s, **shape} for s, (_, shape) in zip(seeds, pruned)], **common)
            save_pruned(pruned[0][0], out / variant.name)
            small = copy.deepcopy(pruned[0][0])
            new_id = prune_vocabulary(small, keep)
            row.update(vocabulary_pruned=size_of(small, Renumbered(data["dev"], new_id), device, cfg.latency_repeats),
                       kept_tokens=len(keep))
            rows.append(row)
        settings = {"heads": cfg.prune.heads, "ffn": cfg.prune.ffn, "n_iters": cfg.prune.n_iters,
                    "importance_examples": cfg.prune.importance_examples}
        write_metrics(metrics_file, PruneMetrics(
            task=task_name, family=spec.family, headline=spec.metrics[0], model=model_name, seeds=seeds,
            settings=settings, variants=rows, wall_sec=round(time.perf_counter() - t0, 2)))


if __name__ == "__main__":
    run_stage(prune, *sys.argv[1:])
