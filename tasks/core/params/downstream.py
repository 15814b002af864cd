"""The downstream sections of ``params.yaml``: ``tasks``, ``hub_models`` and ``finetune``.

A task names its data (source, loader, files), its family (classification, MRC, NER)
and its metrics; ``finetune`` holds the fine-tuning knobs every task shares (a task
may override them) and the models fine-tuned beside the compared objectives;
``hub_models`` are the pretrained models those baselines name. The values live in
``params.yaml``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from tasks.core.params.base import INFRASTRUCTURE, Device, _Strict

TaskFamily = Literal["classification", "mrc", "ner"]  # tasks.downstream.families.FAMILIES
FAMILY_LOADERS = {
    "classification": ("polarity_lines", "glue", "clue_jsonl", "table"),
    "mrc": ("squad", "ner_as_mrc"),
    "ner": ("conll",),
}
FAMILY_METRICS = {
    "classification": ("accuracy", "f1", "macro_f1", "matthews", "pearson", "spearman"),
    "mrc": ("em", "f1", "average"),
    "ner": ("f1", "precision", "recall"),
}
SPLITS = ("train", "dev", "test")


def _check_knobs(overrides: dict) -> None:
    """Raises ValueError: a key of ``overrides`` that is no :class:`Training` knob."""
    bad = set(overrides) - set(Training.model_fields)
    if bad:
        raise ValueError(f"training: unknown knob(s) {', '.join(sorted(bad))}")


class Training(_Strict):
    """Fine-tuning knobs; ``finetune`` sets them for every task, ``tasks.<name>.training`` overrides."""

    max_seq_length: int = Field(ge=8, le=512, description="tokens per example (MRC: per window)")
    epochs: float = Field(gt=0, description="passes over the training split")
    batch_size: int = Field(ge=1, description="examples per optimizer step")
    learning_rate: float = Field(gt=0, description="peak learning rate (AdamW, linear warm-up then decay to 0)")
    warmup_fraction: float = Field(ge=0, lt=1, description="share of the steps of linear warm-up")
    weight_decay: float = Field(ge=0, description="AdamW's decoupled weight decay")
    max_grad_norm: float = Field(gt=0, description="the global gradient norm is clipped to this")
    dropout: float = Field(ge=0, lt=1, description="hidden and attention dropout while fine-tuning")
    eval_batch_size: int = Field(ge=1, description="examples per forward pass when predicting dev/test",
                                 json_schema_extra=INFRASTRUCTURE)
    pooling: Literal["mean", "cls"] = Field(description="classification: sentence vector, the mean of the "
                                            "token states (tasks.downstream.mean_pool) or BERT's [CLS] pooler")
    doc_stride: int = Field(ge=1, description="MRC: tokens shared by consecutive windows")
    max_query_length: int = Field(ge=1, description="MRC: question tokens kept (BERT's run_squad: 64)")
    max_answer_length: int = Field(ge=1, description="MRC: longest answer, in tokens")
    n_best: int = Field(ge=1, description="MRC: start/end candidates per window")


class TaskSplit(_Strict):
    """Fractions carved (seeded) out of train for splits the data does not provide; each split
    the task's files lack must be given here (no hidden default)."""

    dev: float | None = Field(None, gt=0, lt=1, description="share of train carved out as dev")
    test: float | None = Field(None, gt=0, lt=1, description="share of train carved out as test")


class TaskData(_Strict):
    """Where a task's data comes from and how it is read, split and capped: what stage
    ``downstream@<task>`` reads (and nothing else does)."""

    loader: str = Field(description="how the files are read; see FAMILY_LOADERS")
    source: str = Field(description="a name under sources")
    files: dict[str, str] = Field(min_length=1, description="role (train/dev/test/all, positive/negative) -> file")
    split: TaskSplit = Field(TaskSplit(), description="the splits carved out of train")
    limit: dict[str, PositiveInt] = Field(default_factory=dict, description="split -> max examples (seeded subset)")
    malformed: Literal["fail", "skip", "repair"] = Field(description="records that break the format")
    glue_task: str | None = Field(None, description="loader glue: the GLUE task's name (e.g. SST-2)")
    columns: dict[str, str | None] = Field(default_factory=dict, description="text_a, text_b, label")
    labels: list[str] | None = Field(None, description="the label names in order (default: as the data has them)")
    scheme: Literal["bio", "bioes", "bmes"] = Field("bio", description="NER: the tagging scheme of the files "
                                                                       "(read into BIO)")
    queries: dict[str, str] | None = Field(None, description="NER as MRC: entity type -> its question "
                                                            "(default: the loader's)")

    @model_validator(mode="after")
    def _consistent(self) -> "TaskData":
        bad = [k for k in self.limit if k not in SPLITS]
        if bad:
            raise ValueError(f"limit: unknown split(s) {', '.join(bad)}; known: {', '.join(SPLITS)}")
        for split in ("dev", "test"):
            if self.limit.get(split, 2) < 2:
                raise ValueError(f"limit.{split}: {self.limit[split]} example cannot be scored with an interval (the "
                                 "statistics need at least 2); raise it or drop the limit")
        carved = [s for s in ("dev", "test") if s not in self.files and getattr(self.split, s) is None]
        if carved:
            raise ValueError(f"split: the files give no {' or '.join(carved)} split; set split.{carved[0]} "
                             f"(the fraction of train carved out for it)")
        if self.loader == "glue" and not self.glue_task:
            raise ValueError("loader glue needs glue_task (e.g. SST-2)")
        return self


class DownstreamTask(_Strict):
    """A downstream task: its family, how it is scored, its data (``data``: what ``downstream``
    reads) and its fine-tuning knobs (``training``: what ``finetune`` reads, with ``family`` and
    ``metrics``). ``training`` is required, ``{}`` for finetune's defaults, so that DVC can track it."""

    family: TaskFamily = Field(description="classification, mrc or ner: its model head, training and metrics")
    metrics: list[str] = Field(min_length=1, description="the first one is the headline metric")
    data: TaskData = Field(description="what stage downstream@<task> reads")
    training: dict[str, float | int | str] = Field(description="overrides of finetune.training ({} for none)")

    @model_validator(mode="after")
    def _consistent(self) -> "DownstreamTask":
        if self.data.loader not in FAMILY_LOADERS[self.family]:
            raise ValueError(f"data.loader {self.data.loader!r} does not read {self.family} data; "
                             f"use one of {', '.join(FAMILY_LOADERS[self.family])}")
        unknown = [m for m in self.metrics if m not in FAMILY_METRICS[self.family]]
        if unknown:
            raise ValueError(f"unknown {self.family} metric(s) {', '.join(unknown)}; "
                             f"known: {', '.join(FAMILY_METRICS[self.family])}")
        _check_knobs(self.training)
        return self


class Finetune(_Strict):
    """Fine-tuning of every model on every task (stages ``finetune@``, ``finetune_random@``,
    ``finetune_baseline@``, ``finetune_snapshot@``), once per fine-tuning seed."""

    baselines: list[str] = Field(description="models fine-tuned beside the compared objectives: random, hub_models")
    tasks: list[str] = Field(min_length=1, description="the tasks every model is fine-tuned on (names under tasks)")
    baseline_tasks: list[str] = Field(
        description="the tasks the baselines are fine-tuned on (of tasks): a published model costs many times a "
                    "tiny one, so the default run's reference row is one task (docs/running.md)")
    seeds: list[NonNegativeInt] = Field(min_length=1, description="fine-tuning seeds (head init, dropout, data "
                                                                   "order): each model is fine-tuned once per seed")
    seed_workers: PositiveInt = Field(
        1, description="CPU processes that run the seeds of finetune, distill and prune side by side, one "
                       "intra-op thread each; 1: the seeds in turn in the stage's process, with all its threads",
        json_schema_extra=INFRASTRUCTURE)
    device: Device = Field(description="auto (CUDA when present, else CPU), cpu, cuda, cuda:<n> or mps",
                           json_schema_extra=INFRASTRUCTURE)
    training: Training = Field(description="the knobs of every task; tasks.<name>.training overrides them")
    learning_rate_scales: list[PositiveFloat] = Field(
        min_length=1, description="the grid each model's fine-tuning learning rate is chosen from on dev, as multiples "
        "of its recipe's (finetune.training, the task's, a hub model's own): every value is fine-tuned with every "
        "seed and the best mean dev headline score is kept (BERT, Devlin et al. 2019, §4.1); [1.0]: no search")

    @model_validator(mode="after")
    def _distinct_scales(self) -> "Finetune":
        if len(set(self.learning_rate_scales)) != len(self.learning_rate_scales):
            raise ValueError(f"learning_rate_scales: {self.learning_rate_scales} repeats a value")
        return self

    def for_task(self, task: DownstreamTask, model: HubModel | None = None) -> Training:
        """The knobs for ``task``: :attr:`training` with the task's overrides, then (a published
        ``model``) the model's own."""
        return Training(**{**self.training.model_dump(), **task.training, **(model.training if model else {})})


class HubModel(_Strict):
    """A pretrained Hugging Face model to fine-tune besides the pipeline's own: a folder
    inside an acquired source, a local folder, or (online) a hub id."""

    source: str | None = Field(None, description="a name under sources whose folder holds it (with path)")
    path: str | None = Field(None, description="its folder: inside the source, or a local folder")
    hub_id: str | None = Field(None, description="a hub id (online only: HF_HUB_OFFLINE=0)")
    licence: str = Field("see model card", description="the model's licence, as the report lists it")
    script: Literal["simplified", "traditional"] = Field(
        "simplified", description="the characters its pretraining text was written in; traditional: each simplified "
                                  "character's input embedding is set to its traditional form's when it is imported, "
                                  "so the packaged (simplified) tasks read as the model learned (tasks.core.script)")
    training: dict[str, float | int | str] = Field(
        description="overrides of finetune.training and tasks.<name>.training when this model is fine-tuned "
                    "(its authors' recipe, e.g. a learning rate for a pretrained model; {} for none)")

    @model_validator(mode="after")
    def _one_location(self) -> "HubModel":
        if sum(x is not None for x in (self.path, self.hub_id)) != 1:
            raise ValueError("give exactly one of path (with or without source) or hub_id")
        _check_knobs(self.training)
        return self
