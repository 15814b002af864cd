"""The rows of the compression tables (TextBrewer's distillation, TextPruner's pruning): every
variant of a fine-tuned task model, made under each finetune seed, scored on dev and test as
``finetune`` scores, and measured for size and speed (:mod:`tasks.compression.measure`).

``distill@<student>-<task>``: the teachers (finetune's models), their ensemble, and the student
trained four ways (:data:`DISTILL_VARIANTS`). ``prune@<model>-<task>``: the unpruned models, then
every :func:`tasks.compression.prune.variants` row, each also after vocabulary pruning.
"""

from __future__ import annotations

import copy
from pathlib import Path

from prefect import get_run_logger
from torch import nn

from tasks.compression.distill import Ensemble, KdConfig, Match, SoftLabels, train_student
from tasks.compression.measure import size_of
from tasks.compression.prune import (IMPORTANCE, Renumbered, importance, prune_copy, prune_vocabulary, save_pruned,
                                     used_ids, variants)
from tasks.core.params import Distill, Prune, Student
from tasks.core.stage import stage_task
from tasks.downstream.finetune import summarize
from tasks.downstream.finetuned import TaskRun
from tasks.training.seeds import map_seeds

DISTILL_VARIANTS = {
    "labels": "student on the labels only",
    "kd": "distilled: soft labels of the same seed's teacher + labels",
    "kd_intermediate": "distilled + intermediate matches",
    "multi_teacher": "distilled from every seed's teacher (logits averaged) + labels",
}


@stage_task(task_run_name="evaluate-{name}")
def evaluate_variant(name: str, description: str, models: list[nn.Module], runs: list[dict], run: TaskRun,
                     repeats: int) -> dict:
    """One row of a compression table: each seed's model (``models``, in the order of ``runs``,
    which hold ``seed`` and any extra per-seed fields) scored on dev and test, the summary over
    seeds, and the size and speed of the first model on dev examples (``repeats`` timed passes).
    A run that already holds its ``dev`` and ``test`` scores (finetune's own models, read with
    :meth:`tasks.downstream.finetuned.TaskRun.scores`) is not scored again.

    Returns:
        the fields of :class:`tasks.core.metrics.compression.Variant`.
    """
    metrics, rows = run.spec.metrics, []
    for model, seed_run in zip(models, runs):
        if "dev" not in seed_run:
            seed_run = {**seed_run, **{split: {m: s[m] for m in metrics} for split, s in
                                       ((split, run.evaluate(model, split)) for split in ("dev", "test"))}}
        rows.append(seed_run)
    summary = {split: {m: summarize([r[split][m] for r in rows]) for m in metrics} for split in ("dev", "test")}
    get_run_logger().info(f"{name}: dev {summary['dev'][metrics[0]]} test {summary['test'][metrics[0]]}")
    return {"name": name, "description": description, "runs": rows, **summary,
            "size": size_of(models[0], run.data["dev"], run.device, repeats)}


def distill_rows(run: TaskRun, teacher: str, base: nn.Module, size: Student, layer_map: list[int] | None,
                 kd: Distill, seeds: list[int], seed_workers: int, repeats: int) -> tuple[list[dict], dict]:
    """The rows of ``distill@<student>-<task>``: the teachers finetune saved for ``run``, their
    ensemble, and the student of ``size`` (initialised from ``base``'s layers ``layer_map``)
    trained under each seed as each of :data:`DISTILL_VARIANTS` (``kd_intermediate`` only when the
    student has matches); the seeds side by side (``seed_workers``).

    Returns:
        the rows and the training settings of the students (``epochs``, ``learning_rate`` and the KD knobs).
    """
    teachers = [run.finetuned(s) for s in seeds]
    rows = [evaluate_variant("teacher", f"{teacher} fine-tuned (finetune)", teachers, run.scores(seeds), run, repeats),
            evaluate_variant("teacher_ensemble", "the teachers' logits averaged", [Ensemble(teachers)],
                             [{"seed": seeds[0]}], run, repeats)]
    matches = tuple(Match(m.kind, m.student, m.teacher, m.weight) for m in size.matches)
    soft = dict(temperature=kd.temperature, temperature_schedule=kd.temperature_schedule,
                scale_by_t2=kd.scale_by_t2, kd_weight=kd.kd_weight, hard_weight=kd.hard_weight)
    configs = {"labels": KdConfig(), "kd": KdConfig(**soft), "kd_intermediate": KdConfig(**soft, matches=matches),
               "multi_teacher": KdConfig(**soft)}
    if not matches:
        del configs["kd_intermediate"]
    epochs, lr = kd.epochs or run.training.epochs, kd.learning_rate or run.training.learning_rate
    # each teacher's soft labels once, for every epoch and variant (one forward pass over train);
    # the intermediate matches still need the teacher's forward pass at every step
    per_teacher = [SoftLabels.of(t, run.data["train"], run.training.eval_batch_size, run.device) for t in teachers]
    ensemble = SoftLabels.mean(per_teacher)

    def students(seed: int, log) -> dict:  # one seed's student of every variant, in one worker: one spawn a stage
        i = seeds.index(seed)
        by = {"labels": ([], None), "kd": ([], per_teacher[i]), "kd_intermediate": ([teachers[i]], None),
              "multi_teacher": ([], ensemble)}
        return {name: train_student(run.family, base, size, layer_map, by[name][0], run.data["train"], run.labels,
                                    run.training, config, epochs, lr, seed, run.device, by[name][1], log)
                for name, config in configs.items()}

    # the seeds side by side, their students measured here after
    trained = map_seeds(students, seeds, seed_workers, run.device, "students")
    for name in configs:
        rows.append(evaluate_variant(name, DISTILL_VARIANTS[name], [t[name][0] for t in trained],
                                     [{"seed": s, "train": t[name][1]} for s, t in zip(seeds, trained)], run, repeats))
    return rows, {**soft, "epochs": epochs, "learning_rate": lr}


def prune_rows(run: TaskRun, model_name: str, cfg: Prune, seeds: list[int], seed_workers: int, repeats: int,
               out: Path) -> list[dict]:
    """The rows of ``prune@<model>-<task>``: finetune's models of ``run`` unpruned, then each
    variant of :func:`tasks.compression.prune.variants` applied to each seed's model (side by side,
    ``seed_workers``), also measured after vocabulary pruning to the task's tokens; the first
    seed's pruned model of each variant is saved under ``out/<variant>``."""
    models = [run.finetuned(s) for s in seeds]
    by_seed = dict(zip(seeds, models))
    rows = [evaluate_variant("unpruned", f"{model_name} fine-tuned (finetune)", models, run.scores(seeds), run,
                             repeats)]
    # vocabulary pruning keeps the tokens of the task's encoded splits: predictions unchanged
    keep = used_ids(list(run.data.values()), run.tokenizer.all_special_ids)
    knobs = dict(heads=cfg.heads, ffn=cfg.ffn, examples=cfg.importance_examples,
                 batch_size=cfg.importance_batch_size, device=run.device)
    train = run.data["train"]
    every = variants(cfg.n_iters)

    def prune_seed(seed: int, log) -> list:  # every variant of one seed's model, in one worker: one spawn a stage
        # every variant of one importance kind starts from the IS of the unpruned model: computed once
        first = {kind: importance(by_seed[seed], train, kind, examples=knobs["examples"],
                                  batch_size=knobs["batch_size"], device=run.device) for kind in IMPORTANCE}
        return [prune_copy(by_seed[seed], train, v, **knobs, first=first[v.importance]) for v in every]

    # the seeds' fine-tuned models pruned side by side, measured here after: [variant][seed] -> (model, shape)
    for variant, pruned in zip(every, zip(*map_seeds(prune_seed, seeds, seed_workers, run.device, "prune"))):
        row = evaluate_variant(variant.name, variant.description, [p for p, _ in pruned],
                               [{"seed": s, **shape} for s, (_, shape) in zip(seeds, pruned)], run, repeats)
        save_pruned(pruned[0][0], out / variant.name)
        small = copy.deepcopy(pruned[0][0])
        new_id = prune_vocabulary(small, keep)
        row.update(vocabulary_pruned=size_of(small, Renumbered(run.data["dev"], new_id), run.device, repeats),
                   kept_tokens=len(keep))
        rows.append(row)
    return rows
