"""Fine-tuning, shared by every downstream task family, on the one training loop (:mod:`tasks.training.loop`).

A task supplies a dataset object with ``__len__`` and ``batch(index) -> dict of
tensors`` whose keys are the keyword arguments of a Hugging Face task head
(``input_ids``, ``attention_mask``, ``token_type_ids``, ``labels``, ...); the
head computes its own loss. The optimiser, seeding and DDP weighting are here, the schedule,
clipping, mixed precision and device in the loop; :func:`run_seed` is one seed of
``finetune`` over its whole search (run in turn or side by side by :func:`tasks.training.seeds.map_seeds`), and
:func:`score_test` scores the chosen setting's runs on test. What the
stage leaves behind (models, scores, predictions) is :mod:`tasks.downstream.finetuned`.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

import numpy as np
import torch

from tasks.core.model_dir import load_model
from tasks.training.batching import IGNORE_INDEX, BatchSchedule
from tasks.training.device import autocast
from tasks.training.distributed import Ranks, split_batch
from tasks.training.loop import History, run
from tasks.training.optim import optimizer_for


class Batches(Protocol):
    lengths: np.ndarray  # [N] tokens per example

    def __len__(self) -> int: ...

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]: ...


def fit(model: torch.nn.Module, data: Batches, *, epochs: float, batch_size: int, lr: float, warmup_fraction: float,
        weight_decay: float, max_grad_norm: float, seed: int, device: torch.device,
        log: Callable[[str], None] = print, ranks: Ranks = Ranks(),
        dev_score: Callable[[torch.nn.Module], float] | None = None) -> dict:
    """Fine-tune ``model`` on ``data`` for ``epochs`` passes (fractional allowed), in the training loop
    (:func:`tasks.training.loop.run`: AdamW, linear warm-up then linear decay to 0, clipping).

    With ``dev_score`` (the headline metric of the model on dev, higher is better), the model is scored at
    the end of every epoch and of training, and ends with the weights of its best point (the first best):
    the dev curve and the chosen epoch are in the summary, as Hugging Face's Trainer does with
    ``load_best_model_at_end`` (the choice is made on dev, never test).

    Batches come from :class:`tasks.training.batching.BatchSchedule` (seeded, length-grouped).
    Under DDP each rank takes its share of the global batch (``batch_size``,
    :func:`tasks.training.distributed.split_batch`) and weights its mean loss by its share of the
    batch's loss units (labelled tokens for token labels, else examples), so the summed gradient
    is the global batch's.

    Returns:
        ``steps``, ``examples``, ``train_loss`` (mean over the last 10% of steps),
        ``wall_sec`` (dev scoring included), ``examples_per_sec`` and ``threads`` (this process's intra-op
        threads); with ``dev_score`` also ``dev_curve`` (``[{"epoch", "step", "dev"}]``) and ``best_step``.
    Raises:
        ParamsError: ``batch_size`` is not a multiple of the number of processes.
        DivergedError: the logged loss is NaN or infinite (:func:`tasks.training.loop.check_finite`).
    """
    torch.manual_seed(seed + ranks.rank)
    model.to(device).train()
    schedule = BatchSchedule(data.lengths, batch_size, seed)
    total = max(1, round(epochs * schedule.per_epoch))
    opt = optimizer_for(model, lr, weight_decay)
    history = History(total, log, ranks, f"fine-tuning lr {lr:g}, warm-up {warmup_fraction:g}, batch {batch_size}, "
                                         f"max_grad_norm {max_grad_norm:g}")

    class Task:
        def batches(self, step: int) -> list[dict[str, torch.Tensor]]:
            (part,) = split_batch(schedule(step), ranks, 1, "finetune.training.batch_size")
            return [data.batch(part)]

        def loss(self, net, batch, step):
            loss = net(**batch).loss
            if ranks.world > 1:  # DDP averages gradients over ranks: weight = world x this rank's share
                units = _loss_units(batch)
                share = units / ranks.all_sum([float(units)])[0]
                loss = loss * (ranks.world * share)
            return loss, {}

    curve, best = [], None  # best: (dev score, step, weights on the host)

    def after_step(s) -> None:
        nonlocal best
        history.add(s.done, loss=s.losses[0])
        if dev_score is None or (s.done % schedule.per_epoch and s.done != total):
            return
        score = float(dev_score(model))
        model.train()
        curve.append({"epoch": round(s.done / schedule.per_epoch, 3), "step": s.done, "dev": score})
        log(f"step {s.done}/{total} (epoch {curve[-1]['epoch']:g}): dev {score:.4f}")
        if best is None or score > best[0]:
            best = (score, s.done, {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})

    t0 = time.perf_counter()
    # a head may leave parameters unused (mean pooling never touches BERT's pooler): DDP must not
    # wait for their gradients (find_unused_parameters, as Hugging Face's Trainer sets it by default)
    run(model, Task(), opt, steps=range(total), total=total, peak_lr=lr, warmup_fraction=warmup_fraction,
        max_grad_norm=max_grad_norm, device=device, ranks=ranks, find_unused_parameters=True, after_step=after_step)
    wall = time.perf_counter() - t0
    examples = total * batch_size  # every batch of the schedule is full
    summary = {"steps": total, "examples": examples, "train_loss": history.tail("loss"),
               "wall_sec": round(wall, 2), "examples_per_sec": round(examples / wall, 1),
               "threads": torch.get_num_threads()}
    if best is not None:
        model.load_state_dict(best[2])
        summary.update(dev_curve=curve, best_step=best[1])
    return summary


def _loss_units(batch: dict[str, torch.Tensor]) -> int:
    """What a head's mean loss averages over: labelled tokens (token labels, ``[B, L]``), else examples."""
    labels = batch.get("labels")
    if labels is not None and labels.ndim == 2:
        return int((labels != IGNORE_INDEX).sum())
    return len(batch["input_ids"])


def fit_seed(family, model_dir, labels, data: Batches, training, seed: int, device: torch.device,
             log: Callable[[str], None] = print, ranks: Ranks = Ranks(),
             dev_score: Callable[[torch.nn.Module], float] | None = None) -> tuple[torch.nn.Module, dict]:
    """One fine-tuning run as ``finetune@<model>-<task>`` does it for ``seed``: the head of
    ``family`` (a :class:`tasks.downstream.families.base.Family`) initialised under ``seed`` on the encoder in
    ``model_dir``, then :func:`fit` with the task's ``training`` knobs (and ``dev_score``: the best epoch kept).

    Returns:
        the fine-tuned model (in eval mode) and :func:`fit`'s summary.

    Raises:
        SourceError: ``model_dir`` lacks weights or holds truncated/corrupt ones
            (:func:`tasks.core.model_dir.load_model`).
    """
    torch.manual_seed(seed)
    model = load_model(model_dir, lambda path: family.model(path, labels, training))
    train = fit(model, data, epochs=training.epochs, batch_size=training.batch_size, lr=training.learning_rate,
                warmup_fraction=training.warmup_fraction, weight_decay=training.weight_decay,
                max_grad_norm=training.max_grad_norm, seed=seed, device=device, log=log, ranks=ranks,
                dev_score=dev_score)
    return model.eval(), train


def run_seed(family, model_dir, labels, data: dict, tables: dict, settings: list, metrics: list[str], seed: int,
             device: torch.device, log: Callable[[str], None] = print,
             ranks: Ranks = Ranks()) -> list[tuple[dict, dict, torch.nn.Module]] | None:
    """One seed of ``finetune`` over every setting of its search (``settings``: :class:`tasks.core.params.Training`
    each), so that :func:`tasks.training.seeds.map_seeds` starts one worker per seed for the whole search: for each,
    :func:`fit_seed` on ``data['train']``, keeping the weights of its best dev epoch, then its scores and predictions
    on dev. Test is scored once, at the setting chosen on dev (:func:`score_test`), never for each setting.

    Returns:
        per setting, in order, ``({"seed", "train", "dev"}, {"dev": predictions}, model)``; under DDP the
        other ranks return None (rank 0 evaluates).
    """
    runs = []
    for training in settings:
        kept = {}  # the dev scores and predictions of the epoch fit keeps: its first best, by fit's own rule

        def dev_score(model, training=training, kept=kept):
            dev, predictions = family.evaluate(model, data["dev"], tables["dev"], training, labels, metrics, device)
            if not kept or dev[metrics[0]] > kept["dev"][metrics[0]]:
                kept.update(dev=dev, predictions=predictions)
            return dev[metrics[0]]

        model, train = fit_seed(family, model_dir, labels, data["train"], training, seed, device, log, ranks, dev_score)
        if ranks.is_main:
            log(f"seed {seed}, lr {training.learning_rate:g}: dev {kept['dev']}")
            runs.append(({"seed": seed, "train": train, "dev": kept["dev"]}, {"dev": kept["predictions"]}, model))
    return runs if ranks.is_main else None


def score_test(family, run: tuple[dict, dict, torch.nn.Module], data: dict, tables: dict, training, labels,
               metrics: list[str], device: torch.device) -> tuple[dict, dict, torch.nn.Module]:
    """A run of :func:`run_seed` with its test scores and predictions added (``run`` is returned, completed)."""
    result, predictions, model = run
    result["test"], predictions["test"] = family.evaluate(model, data["test"], tables["test"], training, labels,
                                                         metrics, device)
    return run


@torch.no_grad()
def predict(model: torch.nn.Module, data: Batches, *, batch_size: int, device: torch.device,
            outputs: tuple[str, ...] = ("logits",)) -> dict[str, list[np.ndarray]]:
    """Run ``model`` over ``data`` in order; return the named outputs, one array per batch.

    Labels are not passed to the model, so heads return raw outputs only.
    """
    model.to(device).eval()
    result: dict[str, list[np.ndarray]] = {name: [] for name in outputs}
    for start in range(0, len(data), batch_size):
        index = np.arange(start, min(start + batch_size, len(data)))
        batch = {k: v.to(device) for k, v in data.batch(index).items() if not k.endswith("labels")
                 and k not in ("start_positions", "end_positions")}
        with autocast(device):
            out = model(**batch)
        for name in outputs:
            result[name].append(out[name].float().cpu().numpy())
    return result


def learning_rate_grid(training, scales: list[float]) -> list:
    """``training`` once per learning rate of the search ``scales`` x its ``learning_rate`` (6 significant
    digits), in the order of ``scales``: the grid a model's fine-tuning learning rate is chosen from on dev, as
    BERT chose one of a few per task (Devlin et al. 2019, §4.1). ``training``: a
    :class:`tasks.core.params.Training`."""
    return [training.model_copy(update={"learning_rate": float(f"{training.learning_rate * s:.6g}")}) for s in scales]


def summarize(values: list[float]) -> dict[str, float]:
    """``mean``, ``std`` (sample, ddof=1; 0 for one run), ``max``, ``min`` and ``n`` of per-seed scores."""
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0,
            "max": float(arr.max()), "min": float(arr.min()), "n": int(len(arr))}
