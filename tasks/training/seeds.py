"""One run per seed, in turn or side by side: the seed loop of ``finetune``, ``distill`` and ``prune``.

On CPU a model this small keeps one core busier than two intra-op threads keep two (the
threads split matmuls of a few hundred rows and sync at every op), so ``finetune.seed_workers``
processes, spawned by the stage and one intra-op thread each, run the seeds at once: a
``finetune`` stage of 3 seeds on 2 cores ends about 1.3x sooner than with the seeds in turn.
A seed's result then depends neither on the machine's core count nor on the number of
workers; it differs from the in-turn run's by float rounding (threads split reductions).
"""

from __future__ import annotations

from typing import Callable, TypeVar

import torch

from tasks.core.pool import map_processes, relay
from tasks.core.stage import run_logger, stage_task
from tasks.training.distributed import Ranks

T = TypeVar("T")
SeedRun = Callable[..., T]
"""``fn(seed, log=...)``: one seed's run, logging through ``log(str)``."""


@stage_task(task_run_name="{name}-seed-{seed}")
def _seed_task(fn: SeedRun, seed: int, name: str):
    return fn(seed, log=run_logger().info)


def map_seeds(fn: SeedRun, seeds: list[int], workers: int, device: torch.device, name: str,
              ranks: Ranks = Ranks()) -> list:
    """``[fn(seed, log=...) for seed in seeds]``, results in seed order.

    Args:
        fn: one seed's run; any callable (a closure over the stage's data is fine: cloudpickle
            takes it to the workers). Its result must pickle (models, dicts, arrays) when
            ``workers`` > 1.
        workers: ``finetune.seed_workers``. Above 1, on CPU and in a stage of one process, the
            seeds run side by side in that many spawned processes of one intra-op thread each
            (module docstring; :func:`tasks.core.pool.map_processes`), their log lines relayed here as
            ``<name>-seed-<seed>: ...`` as they are written. Otherwise (1, a GPU, DDP) each seed runs
            in turn here, as a Prefect task run ``<name>-seed-<seed>``.
        name: what the seeds run, for the task runs and log lines.
    Raises:
        PipelineError: a worker died (one line: the seed and the signal).
        whatever ``fn`` raises for a failing seed (the other workers are killed).
    """
    if workers == 1 or device.type != "cpu" or ranks.world > 1:
        return [_seed_task(fn, seed, name) for seed in seeds]
    logger = run_logger()
    return map_processes(lambda seed: fn(seed, log=relay), seeds, workers, name, lambda i: f"seed {seeds[i]}",
                         initializer=lambda: torch.set_num_threads(1),
                         on_log=lambda i, line: logger.info(f"{name}-seed-{seeds[i]}: {line}"))
