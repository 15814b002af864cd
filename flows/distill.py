"""Stage ``distill@<student>-<task>``: knowledge distillation of the fine-tuned teacher
(``compression.distill.teacher``, as ``finetune`` saved it for each seed) into the student
``compression.students.<student>``, on one task.

Rows: the teachers, their ensemble (logits averaged), and the student trained under each
seed on the labels only, distilled from the teacher of the same seed, distilled with the
student's intermediate matches, and distilled from all teachers at once (multi-teacher).
"""

import sys
import time

from prefect import flow

from tasks.compression.distill import (Ensemble, KdConfig, Match, SoftLabels, check_student, student_layer_map,
                                       train_student)
from tasks.compression.measure import evaluate_variant
from tasks.core import paths
from tasks.core.errors import ParamsError
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.compression import DistillMetrics
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import load_finetuned, model_file, read_scores
from tasks.training.device import resolve_device
from tasks.training.seeds import map_seeds

VARIANTS = {
    "labels": "student on the labels only",
    "kd": "distilled: soft labels of the same seed's teacher + labels",
    "kd_intermediate": "distilled + intermediate matches",
    "multi_teacher": "distilled from every seed's teacher (logits averaged) + labels",
}


@flow(name="distill")
def distill(student_name: str, task_name: str) -> None:
    t0 = time.perf_counter()
    params = load_params()
    cfg, seeds = params.compression, params.finetune.seeds
    if student_name not in cfg.students:
        raise ParamsError(f"unknown student {student_name!r}; compression.students: {', '.join(cfg.students)}")
    if task_name not in cfg.tasks:
        raise ParamsError(f"task {task_name!r} is not in compression.tasks ({', '.join(cfg.tasks)})")
    size, kd, spec = cfg.students[student_name], cfg.distill, params.task(task_name)
    training, family = params.finetune.for_task(spec), FAMILIES[spec.family]
    teacher_dir = paths.MODELS / kd.teacher
    base = load_model(teacher_dir)  # the teacher's pretrained encoder: students start from its layers
    layers = base.config.num_hidden_layers
    layer_map = student_layer_map(size, layers)
    matches = tuple(Match(m.kind, m.student, m.teacher, m.weight) for m in size.matches)
    check_student(size.num_hidden_layers, layers, layer_map, matches, f"compression.students.{student_name}")
    tables, labels, data = load_task_data(task_name, family, ("train", "dev", "test"), load_tokenizer(teacher_dir),
                                          training)
    device = resolve_device(params.finetune.device)
    folder = paths.PREDICTIONS / paths.finetune_name(kd.teacher, task_name)
    teachers = [load_finetuned(family, teacher_dir, labels, training, model_file(folder, s)) for s in seeds]
    common = dict(family=family, data=data, tables=tables, training=training, labels=labels, metrics=spec.metrics,
                  device=device, repeats=cfg.latency_repeats)
    rows = [evaluate_variant("teacher", f"{kd.teacher} fine-tuned (finetune)", teachers,
                             read_scores(folder, seeds, spec.metrics), **common)]
    rows.append(evaluate_variant("teacher_ensemble", "the teachers' logits averaged", [Ensemble(teachers)],
                                 [{"seed": seeds[0]}], **common))
    soft = dict(temperature=kd.temperature, temperature_schedule=kd.temperature_schedule,
                scale_by_t2=kd.scale_by_t2, kd_weight=kd.kd_weight, hard_weight=kd.hard_weight)
    configs = {"labels": KdConfig(), "kd": KdConfig(**soft), "kd_intermediate": KdConfig(**soft, matches=matches),
               "multi_teacher": KdConfig(**soft)}
    if not matches:
        del configs["kd_intermediate"]
    epochs, lr = kd.epochs or training.epochs, kd.learning_rate or training.learning_rate
    # each teacher's soft labels once, for every epoch and variant (one forward pass over train);
    # the intermediate matches still need the teacher's forward pass at every step
    per_teacher = [SoftLabels.of(t, data["train"], training.eval_batch_size, device) for t in teachers]
    ensemble = SoftLabels.mean(per_teacher)
    for name, config in configs.items():
        def student(seed: int, log):  # one seed's student of this variant
            i = seeds.index(seed)
            by, soft_labels = {"labels": ([], None), "kd": ([], per_teacher[i]),
                               "kd_intermediate": ([teachers[i]], None), "multi_teacher": ([], ensemble)}[name]
            return train_student(family, base, size, layer_map, by, data["train"], labels, training, config,
                                 epochs, lr, seed, device, soft_labels, log)

        # the seeds' students trained side by side (finetune.seed_workers), measured here after
        trained = map_seeds(student, seeds, params.finetune.seed_workers, device, name)
        rows.append(evaluate_variant(name, VARIANTS[name], [model for model, _ in trained],
                                     [{"seed": s, "train": summary} for s, (_, summary) in zip(seeds, trained)],
                                     **common))
    settings = {**size.model_dump(exclude={"matches", "layer_map", "init"}), "init": size.init,
                "layer_map": layer_map or [], **soft, "epochs": epochs, "learning_rate": lr}
    with atomic_outputs(paths.stage_metrics("distill", f"{student_name}-{task_name}")) as (metrics_file,):
        write_metrics(metrics_file, DistillMetrics(
            task=task_name, family=spec.family, headline=spec.metrics[0], teacher=kd.teacher, student=student_name,
            seeds=seeds, settings=settings, variants=rows, wall_sec=round(time.perf_counter() - t0, 2)))


if __name__ == "__main__":
    run_stage(distill, *sys.argv[1:])
