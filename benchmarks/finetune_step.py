"""Fine-tuning throughput on this machine: the pipeline's loop next to Hugging Face's
``Trainer`` on the same model, task data, epochs and batch, in this process, alternated.

* Model and data: a pipeline model (``models/<model>``, default ``mlm-42``) with the head of the
  task's family, the task's encoded train split (``data/downstream/<task>``, default
  ``sentiment``), its fine-tuning knobs (``params.finetune`` with the task's overrides).
* ``pipeline``: :func:`tasks.downstream.finetune.fit_seed`, as stage ``finetune`` runs each
  seed: length-grouped batches (:class:`tasks.training.batching.BatchSchedule`), AdamW,
  linear warm-up and decay, clipping.
* ``hf_trainer``: ``transformers.Trainer`` as its docs show it (the same model built the same
  way, ``TrainingArguments`` with the same epochs, batch, learning rate, warm-up, weight decay
  and clipping; its own random sampler and data loader on one process; no evaluation, no
  checkpoints, no reporting).
* Tokens/s: non-padding tokens of the examples trained on / wall seconds of training (model
  built beforehand, for both). Each side runs ``--rounds`` times, alternated; the best counts.
* The stage's seeds (``finetune.seeds``, each fine-tuned then scored on dev and test, as
  :func:`tasks.downstream.finetune.run_seed` does): ``seeds_in_turn`` in this process with all its
  threads (``finetune.seed_workers: 1``) next to ``seeds_side_by_side``, one spawned single-thread
  process per seed (:func:`tasks.training.seeds.map_seeds`); tokens/s over all seeds, model loading
  and evaluation included.
* ``profile``: each side's operators over one epoch (``profiling.op_profile``): their CPU time a
  step by group, next to the wall time a step; both run the same model, so the Trainer's extra
  time is outside the model (its loop, its sampler's longer padded batches) and bounds the ratio.

Writes ``benchmarks/results/finetune_step.json``::

    python benchmarks/finetune_step.py [--model mlm] [--task sentiment] [--rounds 2]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch

from tasks.core import paths
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import load_params
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import fit_seed, run_seed, score_test
from tasks.training.seeds import map_seeds

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import _Indices  # noqa: E402  (benchmarks/gpu_check.py)
from profiling import op_profile  # noqa: E402  (benchmarks/profiling.py)
from results import write_results  # noqa: E402  (benchmarks/results.py)


def run_pipeline(family, model_dir, labels, data, training, seed) -> float:
    """Wall seconds of one fine-tuning run of the pipeline (model loading excluded)."""
    _, summary = fit_seed(family, model_dir, labels, data, training, seed, torch.device("cpu"), log=lambda _: None)
    return summary["wall_sec"]


def run_trainer(family, model_dir, labels, data, training, seed) -> float:
    """Wall seconds of ``Trainer.train`` on the same model, data and knobs."""
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(seed)
    model = load_model(model_dir, lambda path: family.model(path, labels, training))
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(
            output_dir=tmp, num_train_epochs=training.epochs, per_device_train_batch_size=training.batch_size,
            learning_rate=training.learning_rate,
            warmup_steps=int(training.warmup_fraction * math.ceil(len(data) / training.batch_size) * training.epochs),
            weight_decay=training.weight_decay, max_grad_norm=training.max_grad_norm, use_cpu=True,
            save_strategy="no", report_to="none", disable_tqdm=True, logging_strategy="no",
            remove_unused_columns=False, seed=seed, dataloader_num_workers=0)
        trainer = Trainer(model=model, args=args, train_dataset=_Indices(len(data)),
                          data_collator=lambda items: data.batch(np.array([i for (i,) in items])))
        t0 = time.perf_counter()
        trainer.train()
        return time.perf_counter() - t0


def run_seeds(family, model_dir, labels, data, tables, training, metrics, seeds, workers) -> float:
    """Wall seconds of the stage's seeds: in turn here (``workers`` 1) or side by side."""
    cpu = torch.device("cpu")
    seed_run = partial(run_seed, family, model_dir, labels, data, tables, [training], metrics, device=cpu)
    t0 = time.perf_counter()
    if workers == 1:  # what map_seeds does in turn, without its Prefect task runs
        by_seed = [seed_run(seed, log=lambda _: None) for seed in seeds]
    else:
        by_seed = map_seeds(seed_run, seeds, workers, cpu, "finetune")
    for (run,) in by_seed:  # the stage scores test once per seed, in its own process
        score_test(family, run, data, tables, training, labels, metrics, cpu)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlm-42", help="a pipeline model, models/<model>")
    parser.add_argument("--task", default="sentiment", help="a task of params.yaml (classification or ner)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side, alternated (best counts)")
    args = parser.parse_args(argv)
    params = load_params()
    model_dir = paths.MODELS / args.model
    if not model_dir.is_dir() or not paths.downstream_split(args.task, "train").is_file():
        sys.exit(f"{model_dir} or the {args.task} data are missing: run `dvc repro finetune` (or `make repro`) first")
    spec = params.task(args.task)
    family, training = FAMILIES[spec.family], params.finetune.for_task(spec)
    tables, labels, data = load_task_data(args.task, family, ("train", "dev", "test"), load_tokenizer(model_dir),
                                          training)
    train, seeds = data["train"], params.finetune.seeds
    tokens = float(train.lengths.sum()) * training.epochs  # non-padding tokens trained on
    seed = seeds[0]
    best = dict.fromkeys(["pipeline", "hf_trainer", "seeds_in_turn", "seeds_side_by_side"], float("inf"))
    for _ in range(args.rounds):
        best["pipeline"] = min(best["pipeline"], run_pipeline(family, model_dir, labels, train, training, seed))
        best["hf_trainer"] = min(best["hf_trainer"], run_trainer(family, model_dir, labels, train, training, seed))
        for side, workers in (("seeds_in_turn", 1), ("seeds_side_by_side", len(seeds))):
            best[side] = min(best[side], run_seeds(family, model_dir, labels, data, tables, training, spec.metrics,
                                                   seeds, workers))
    runs = {side: len(seeds) if side.startswith("seeds") else 1 for side in best}
    figures = {side: {"wall_sec": round(s, 2), "tokens_per_sec": round(runs[side] * tokens / s, 1),
                      "examples_per_sec": round(runs[side] * len(train) * training.epochs / s, 1)}
               for side, s in best.items()}
    one_epoch = training.model_copy(update={"epochs": 1})
    steps = math.ceil(len(train) / training.batch_size)
    for side, run in (("pipeline", run_pipeline), ("hf_trainer", run_trainer)):
        wall = []
        profile = op_profile(lambda: wall.append(run(family, model_dir, labels, train, one_epoch, seed)),  # noqa: B023
                             steps)
        figures[side]["profile"] = {"wall_ms_per_step": round(wall[0] * 1e3 / steps, 2), **profile}
    ratio = best["hf_trainer"] / best["pipeline"]
    seeds_ratio = best["seeds_in_turn"] / best["seeds_side_by_side"]
    print(f"finetune_step: {args.model} on {args.task} ({len(train):,} examples x {training.epochs} epochs, "
          f"batch {training.batch_size}, {tokens:,.0f} tokens)")
    for side, f in figures.items():
        print(f"{side:>18} {f['tokens_per_sec']:>10,.0f} tokens/s {f['wall_sec']:>8.1f} s")
    print(f"pipeline / Trainer tokens/s: x{ratio:.2f}  (target >= 2)")
    for side in ("pipeline", "hf_trainer"):
        prof = figures[side]["profile"]
        print(f"profile, {side}: {prof['wall_ms_per_step']} ms a step (profiled), {prof['op_ms_per_step']} ms of it in "
              "operators: " + ", ".join(f"{k} {v:.0%}" for k, v in prof["shares"].items()))
    print(f"{len(seeds)} seeds side by side / in turn (with evaluation): x{seeds_ratio:.2f}")
    write_results("finetune_step", {"model": args.model, "task": args.task, "epochs": training.epochs,
                                    "batch_size": training.batch_size, "examples": len(train), "seeds": seeds,
                                    "rounds": args.rounds},
                  {**figures, "speedup_vs_hf_trainer": round(ratio, 2),
                   "seeds_side_by_side_vs_in_turn": round(seeds_ratio, 2)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
