"""One run per seed, in turn or side by side: the seed loop of ``finetune``, ``distill`` and ``prune``.

On CPU a model this small keeps one core busier than two intra-op threads keep two (the
threads split matmuls of a few hundred rows and sync at every op), so ``finetune.seed_workers``
processes, forked from the stage and one intra-op thread each, run the seeds at once: a
``finetune`` stage of 3 seeds on 2 cores ends about 1.3x sooner than with the seeds in turn.
A seed's result then depends neither on the machine's core count nor on the number of
workers; it differs from the in-turn run's by float rounding (threads split reductions).
"""

from __future__ import annotations

import multiprocessing
import os
from typing import Callable, TypeVar

import torch

from tasks.core.shards import die_with_parent
from tasks.core.stage import run_logger, stage_task
from tasks.training.distributed import Ranks

T = TypeVar("T")
SeedRun = Callable[..., T]
"""``fn(seed, log=...)``: one seed's run, logging through ``log(str)``."""

_JOB: SeedRun | None = None  # the run of map_seeds' forked workers (inherited, never pickled)


@stage_task(task_run_name="{name}-seed-{seed}")
def _seed_task(fn: SeedRun, seed: int, name: str):
    return fn(seed, log=run_logger().info)


def _start_worker(parent: int) -> None:
    die_with_parent(parent)
    torch.set_num_threads(1)


def _in_worker(seed: int) -> tuple[object, list[str]]:
    lines: list[str] = []
    return _JOB(seed, log=lines.append), lines


def map_seeds(fn: SeedRun, seeds: list[int], workers: int, device: torch.device, name: str,
              ranks: Ranks = Ranks()) -> list:
    """``[fn(seed, log=...) for seed in seeds]``, results in seed order.

    Args:
        fn: one seed's run; any callable (a closure over the stage's data is fine: the workers
            inherit it by fork). Its result must pickle (models, dicts, arrays) when
            ``workers`` > 1.
        workers: ``finetune.seed_workers``. Above 1, on CPU and in a stage of one process, the
            seeds run side by side in that many forked processes of one intra-op thread each
            (module docstring), their log lines relayed here as ``<name>-seed-<seed>: ...``
            when the seed ends. Otherwise (1, a GPU, DDP) each seed runs in turn here, as a
            Prefect task run ``<name>-seed-<seed>``.
        name: what the seeds run, for the task runs and log lines.
    Raises:
        whatever ``fn`` raises for the first failing seed (the other workers are terminated).
    """
    if workers == 1 or device.type != "cpu" or ranks.world > 1:
        return [_seed_task(fn, seed, name) for seed in seeds]
    global _JOB
    logger = run_logger()
    _JOB, results = fn, []
    try:
        # fork (not spawn): workers start at once and share the stage's data; the Pool terminates
        # them when the block exits on an error, Prefect's SIGTERM or Ctrl-C
        with multiprocessing.get_context("fork").Pool(min(workers, len(seeds)), initializer=_start_worker,
                                                      initargs=(os.getpid(),)) as pool:
            for seed, (result, lines) in zip(seeds, pool.imap(_in_worker, seeds)):
                for line in lines:
                    logger.info(f"{name}-seed-{seed}: {line}")
                results.append(result)
    finally:
        _JOB = None
    return results
