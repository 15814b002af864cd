"""What ``finetune@<model>-<task>`` leaves behind, and the stages that study it.

Per seed, finetune saves the whole task model as a Hugging Face model folder (``seed<k>/``: config naming the
labels, weights of encoder and head, tokenizer, model card; :func:`save_finetuned`), its dev and test
predictions (``<split>-seed<k>.json[l]``), and every seed's scores (``scores.json``, no timings, so
byte-identical whenever the models are), all in ``results/finetune/<model>-<task>/``. The compression and
interpretability stages study those models instead of training them again; :func:`task_run` is their common
start (the task's params, its splits encoded for the model, the device) and :class:`TaskRun` reads the models
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import torch
from transformers import AutoConfig, PreTrainedModel

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.io import read_json, read_jsonl, write_json, write_jsonl
from tasks.core.model_dir import load_model, load_tokenizer, save_model_folder
from tasks.core.params import DownstreamTask, Params, Training
from tasks.downstream.families import FAMILIES, Family, load_task_data
from tasks.training.device import resolve_device


def model_folder(folder: Path, seed: int) -> Path:
    """Where ``finetune`` keeps the model fine-tuned under ``seed``: the model folder ``<folder>/seed<seed>``."""
    return folder / f"seed{seed}"


def save_finetuned(model: PreTrainedModel, tokenizer, folder: Path, card: str) -> None:
    """The whole task model (encoder and head) with ``tokenizer`` as a Hugging Face model folder
    (:func:`tasks.core.model_dir.save_model_folder`) and its model card ``card`` as ``README.md``: what
    ``model.push_to_hub`` or ``huggingface_hub.upload_folder`` publishes. The config names the labels; a head of
    this repository's (:mod:`tasks.downstream.mean_pool`) is saved as code beside the weights."""
    save_model_folder(model, tokenizer, folder)
    (folder / "README.md").write_text(card, encoding="utf-8")


def write_scores(folder: Path, runs: list[dict]) -> None:
    """Each seed's dev and test scores (``runs``: :class:`tasks.core.metrics.FinetuneRun` fields)
    as ``<folder>/scores.json``, beside the models: unlike the stage's metrics it holds no
    timings, so it is byte-identical whenever the models are, and stages that reuse the scores
    can depend on it without rerunning each time finetune does."""
    write_json(folder / "scores.json", {"runs": [{k: run[k] for k in ("seed", "dev", "test")} for run in runs]})


def read_scores(folder: Path, seeds: list[int], metrics: list[str]) -> list[dict]:
    """The ``metrics`` that :func:`write_scores` recorded for ``seeds``, in that order:
    ``[{"seed": s, "dev": {metric: score}, "test": {...}}]``.

    Raises:
        SourceError: the file is missing or unreadable, or lacks a seed or a metric (params
            changed since finetune ran: rerun it).
    """
    file = folder / "scores.json"
    try:
        by_seed = {run["seed"]: run for run in read_json(file)["runs"]}
        return [{"seed": s, **{split: {m: by_seed[s][split][m] for m in metrics} for split in ("dev", "test")}}
                for s in seeds]
    except FileNotFoundError:
        raise SourceError(f"{file} is missing: stage finetune writes it (dvc repro finetune)") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"{file}: no {exc} among finetune's scores for seeds {seeds} and metrics {metrics}; "
                          "rerun finetune (dvc repro finetune)") from None


def load_finetuned(family, training, folder: Path) -> torch.nn.Module:
    """A model folder :func:`save_finetuned` wrote, with ``family``'s head class for ``training``
    (:meth:`~tasks.downstream.families.base.Family.head`), every weight required, in eval mode.

    Raises:
        SourceError: ``folder`` is missing, its weights are truncated, or they do not fit the head (names it
            and the stage that writes it).
    """
    if not (folder / "config.json").is_file():
        raise SourceError(f"{folder} is not a model folder (no config.json): stage finetune writes it "
                          "(dvc repro finetune)")
    head = family.head(training)
    model, info = load_model(folder, lambda path: head.from_pretrained(path, config=AutoConfig.from_pretrained(path),
                                                                       output_loading_info=True))
    if bad := {k: sorted(v)[:3] for k, v in info.items() if k != "error_msgs" and v}:
        raise SourceError(f"{folder}: not a fine-tuned {head.__name__} ({bad})")
    return model.eval()


def write_predictions(folder: Path, predictions: dict) -> None:
    """``{seed: {split: predictions}}`` as ``<split>-seed<seed>.json`` (MRC: the official
    ``{id: answer}`` file) or ``.jsonl`` (one record a line) in ``folder``, created here."""
    folder.mkdir(parents=True)
    for seed, by_split in predictions.items():
        for split, preds in by_split.items():
            if isinstance(preds, dict):
                write_json(folder / f"{split}-seed{seed}.json", preds)
            else:
                write_jsonl(folder / f"{split}-seed{seed}.jsonl", preds)


def read_predictions(folder: Path, split: str, seed: int) -> dict | list[dict]:
    """What :func:`write_predictions` wrote for ``split`` and ``seed`` in ``folder``.

    Raises:
        FileNotFoundError: neither file is there."""
    json_file = folder / f"{split}-seed{seed}.json"
    return read_json(json_file) if json_file.is_file() else read_jsonl(folder / f"{split}-seed{seed}.jsonl")


def write_finetuned(folder: Path, seeds: list[int], results: list[tuple[dict, dict, torch.nn.Module]], tokenizer,
                    cards: list[str]) -> None:
    """Every seed's fine-tuning in ``folder`` (created here): ``results`` holds per seed its scores, its
    predictions (:func:`write_predictions`) and its model (:func:`save_finetuned`, with ``tokenizer`` and the
    seed's model card of ``cards``), as :func:`tasks.downstream.finetune.run_seed` returns them; the scores go
    to ``scores.json`` (:func:`write_scores`)."""
    write_predictions(folder, {seed: predictions for seed, (_, predictions, _) in zip(seeds, results)})
    for seed, (_, _, model), card in zip(seeds, results, cards):
        save_finetuned(model, tokenizer, model_folder(folder, seed), card)
    write_scores(folder, [scores for scores, _, _ in results])


@dataclass
class TaskRun:
    """A model's view of one task: the task's params, its splits encoded for the model's tokenizer,
    and the models finetune saved for it (:meth:`finetuned`)."""

    task: str
    spec: DownstreamTask
    family: Family
    training: Training
    model_dir: Path
    tokenizer: Any
    tables: dict[str, pa.Table]
    labels: list[str] | None
    data: dict[str, Any]
    device: torch.device
    folder: Path
    """``results/finetune/<model>-<task>``."""

    def finetuned(self, seed: int) -> torch.nn.Module:
        """The model finetune fine-tuned under ``seed`` (:func:`load_finetuned`), on :attr:`device`.

        Raises:
            SourceError: its folder is missing or does not fit the head.
        """
        model = load_finetuned(self.family, self.training, model_folder(self.folder, seed))
        return model.to(self.device)

    def scores(self, seeds: list[int]) -> list[dict]:
        """finetune's recorded dev and test scores of ``seeds`` (:func:`read_scores`)."""
        return read_scores(self.folder, seeds, self.spec.metrics)

    def evaluate(self, model: torch.nn.Module, split: str) -> dict[str, float]:
        """The task's metrics of ``model`` on ``split``."""
        return self.family.evaluate(model, self.data[split], self.tables[split], self.training, self.labels,
                                    self.spec.metrics, self.device)[0]


def task_run(params: Params, model_name: str, task_name: str) -> TaskRun:
    """:class:`TaskRun` of ``models/<model_name>`` on ``task_name``: its train, dev and test splits
    encoded as finetune encodes them (so the labels are the same), on ``finetune.device``.

    Raises:
        ParamsError: an unknown task.
        SourceError: the model's tokenizer or a split is missing.
    """
    spec = params.task(task_name)
    family, training, model_dir = (FAMILIES[spec.family], params.finetune_training(model_name, task_name),
                                paths.model_dir(model_name))
    tokenizer = load_tokenizer(model_dir)
    tables, labels, data = load_task_data(task_name, family, ("train", "dev", "test"), tokenizer, training)
    return TaskRun(task_name, spec, family, training, model_dir, tokenizer, tables, labels, data,
                   resolve_device(params.finetune.device, "finetune.device"),
                   paths.PREDICTIONS / paths.finetune_name(model_name, task_name))
