"""Distillation time on this machine: soft labels computed once (:class:`tasks.compression.distill.SoftLabels`,
what stage ``distill`` does) next to a teacher forward pass at every step (TextBrewer's
``DistillationContext``, and this pipeline's loop before), in this process, alternated.

* Teachers and data: the models ``finetune`` saved for ``compression.distill.teacher`` on the
  task (default ``sentiment``), one per seed; the task's encoded train split and fine-tuning
  knobs; the student ``compression.students.<student>`` (default the first).
* ``kd``: one teacher (the first seed's); ``multi_teacher``: every seed's teacher, logits averaged.
* Each way is timed from the teachers loaded to the student trained; the soft labels' one
  forward pass over the train split is included. The students' final KD losses are printed
  side by side (they differ only by float rounding).

Writes ``benchmarks/results/distill_step.json``::

    python benchmarks/distill_step.py [--task sentiment] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from tasks.compression.distill import KdConfig, SoftLabels, build_student, distill, student_encoder, student_layer_map
from tasks.core import paths
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import load_params
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetuned import load_finetuned, model_folder

sys.path.insert(0, str(Path(__file__).parent))
from results import write_results  # noqa: E402  (benchmarks/results.py)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="sentiment", help="a task of compression.tasks")
    parser.add_argument("--rounds", type=int, default=2, help="runs per way, alternated (best counts)")
    args = parser.parse_args(argv)
    params = load_params()
    cfg, seeds = params.compression, params.finetune.seeds
    teacher_dir = paths.MODELS / cfg.distill.teacher
    folder = paths.PREDICTIONS / paths.finetune_name(cfg.distill.teacher, args.task)
    if not all(model_folder(folder, s).is_dir() for s in seeds):
        sys.exit(f"the fine-tuned teachers in {folder} are missing: run `dvc repro` (or `make repro`) first")
    spec = params.task(args.task)
    family, training = FAMILIES[spec.family], params.finetune.for_task(spec)
    _, labels, data = load_task_data(args.task, family, ("train",), load_tokenizer(teacher_dir), training)
    train, device, base = data["train"], torch.device("cpu"), load_model(teacher_dir)
    teachers = [load_finetuned(family, training, model_folder(folder, s)) for s in seeds]
    name, size = next(iter(cfg.students.items()))
    layer_map = student_layer_map(size, base.config.num_hidden_layers)
    kd = cfg.distill
    config = KdConfig(temperature=kd.temperature, temperature_schedule=kd.temperature_schedule,
                      scale_by_t2=kd.scale_by_t2, kd_weight=kd.kd_weight, hard_weight=kd.hard_weight)
    knobs = dict(epochs=kd.epochs or training.epochs, batch_size=training.batch_size,
                 lr=kd.learning_rate or training.learning_rate, warmup_fraction=training.warmup_fraction,
                 weight_decay=training.weight_decay, max_grad_norm=training.max_grad_norm, seed=seeds[0],
                 device=device, log=lambda _: None)

    def run(by: list, cached: bool) -> tuple[float, float]:
        encoder = student_encoder(base, size.num_hidden_layers, size.hidden_size, size.num_attention_heads,
                                  size.intermediate_size, layer_map, seeds[0])
        student = build_student(family, encoder, labels, training, seeds[0])
        t0 = time.perf_counter()
        soft = SoftLabels.mean([SoftLabels.of(t, train, training.eval_batch_size, device) for t in by]) \
            if cached else None
        summary = distill(student, [] if cached else by, train, config, soft_labels=soft, **knobs)
        return time.perf_counter() - t0, summary["kd_loss"]

    figures = {}
    for variant, by in (("kd", teachers[:1]), ("multi_teacher", teachers)):
        best = {"teacher_forward": (float("inf"), 0.0), "soft_labels": (float("inf"), 0.0)}
        for _ in range(args.rounds):
            for way in best:
                wall, loss = run(by, cached=way == "soft_labels")
                best[way] = min(best[way], (wall, loss))
        ratio = best["teacher_forward"][0] / best["soft_labels"][0]
        figures[variant] = {**{way: {"wall_sec": round(w, 2), "final_kd_loss": round(l, 5)}
                               for way, (w, l) in best.items()}, "speedup": round(ratio, 2)}
        print(f"{variant:>14}: teacher forward {best['teacher_forward'][0]:6.1f} s, soft labels "
              f"{best['soft_labels'][0]:6.1f} s, x{ratio:.2f}; final KD loss {best['teacher_forward'][1]:.5f} vs "
              f"{best['soft_labels'][1]:.5f}")
    print(f"distill_step: student {name} on {args.task} ({len(train):,} examples x {knobs['epochs']} epochs, "
          f"batch {training.batch_size}, {len(teachers)} teachers)")
    write_results("distill_step", {"task": args.task, "student": name, "teachers": len(teachers),
                                   "epochs": knobs["epochs"], "batch_size": training.batch_size,
                                   "examples": len(train), "rounds": args.rounds}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
