"""Stage ``distill@<student>-<task>``: knowledge distillation of the fine-tuned teacher
(``compression.distill.teacher``, as ``finetune`` saved it for each seed) into the student
``compression.students.<student>``, on one task.

Rows (:func:`tasks.compression.variants.distill_rows`): the teachers, their ensemble (logits
averaged), and the student trained under each seed on the labels only, distilled from the teacher
of the same seed, distilled with the student's intermediate matches, and distilled from all
teachers at once (multi-teacher).
"""

import sys
import time

from prefect import flow

from tasks.compression.distill import check_student, student_layer_map
from tasks.compression.variants import distill_rows
from tasks.core import paths
from tasks.core.errors import ParamsError
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.compression import DistillMetrics
from tasks.core.model_dir import load_model
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.finetuned import task_run


@flow(name="distill")
def distill(student_name: str, task_name: str) -> None:
    t0 = time.perf_counter()
    params = load_params()
    cfg, seeds = params.compression, params.finetune.seeds
    if student_name not in cfg.students:
        raise ParamsError(f"unknown student {student_name!r}; compression.students: {', '.join(cfg.students)}")
    size, kd = cfg.students[student_name], cfg.distill
    base = load_model(paths.MODELS / kd.teacher)  # the teacher's pretrained encoder: students start from its layers
    layers = base.config.num_hidden_layers
    layer_map = student_layer_map(size, layers)
    check_student(size.num_hidden_layers, layers, layer_map, size.matches, f"compression.students.{student_name}")
    run = task_run(params, kd.teacher, task_name)
    rows, training = distill_rows(run, kd.teacher, base, size, layer_map, kd, seeds, params.finetune.seed_workers,
                                  cfg.latency_repeats)
    settings = {**size.model_dump(exclude={"matches", "layer_map", "init"}), "init": size.init,
                "layer_map": layer_map or [], **training}
    with atomic_outputs(paths.stage_metrics("distill", f"{student_name}-{task_name}")) as (metrics_file,):
        write_metrics(metrics_file, DistillMetrics(
            task=task_name, family=run.spec.family, headline=run.spec.metrics[0], teacher=kd.teacher,
            student=student_name, seeds=seeds, settings=settings, variants=rows,
            wall_sec=round(time.perf_counter() - t0, 2)))


if __name__ == "__main__":
    run_stage(distill, *sys.argv[1:])
