"""The ``compression`` section of ``params.yaml``: knowledge distillation (stages
``distill@<student>-<task>``, :mod:`tasks.compression.distill`) and structured pruning (stages
``prune@<model>-<task>``, :mod:`tasks.compression.prune`) of fine-tuned task models.

Teachers and pruned models are the models ``finetune@<model>-<task>`` saved, one per
``finetune.seeds`` entry. A bad student (heads not dividing hidden, a layer map or a match out of
range) fails here, at the start of the stage, in one message.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from tasks.core.params.base import INFRASTRUCTURE, _Strict


class IntermediateMatch(_Strict):
    """``kind`` between student state (or attention) ``student`` and teacher's ``teacher``:
    state 0 = embeddings' output, state/attention i = transformer layer i's."""

    kind: Literal["hidden_mse", "attention_mse", "cos"] = Field(
        description="MSE of the states (through a learned projection when the widths differ), MSE of the "
                    "attention distributions, or the cosine distance of the states")
    student: int = Field(ge=0, description="the student's state or attention")
    teacher: int = Field(ge=0, description="the teacher's state or attention it is matched to")
    weight: float = Field(1.0, gt=0, description="weight of this term in the loss")


class Student(_Strict):
    """A student's size and initialisation (TextBrewer's T3/T6 take teacher layers)."""

    num_hidden_layers: PositiveInt = Field(description="L: Transformer layers")
    hidden_size: PositiveInt = Field(description="H: width of the token states")
    num_attention_heads: PositiveInt = Field(description="A: attention heads per layer")
    intermediate_size: PositiveInt = Field(description="FFN inner width")
    init: Literal["teacher", "random"] = Field(
        description="teacher: embeddings and layers layer_map of the teacher's pretrained model "
                    "(same widths); random: seeded random init")
    layer_map: list[int] | None = Field(None, description="init teacher: 0-based teacher layer of each student "
                                                          "layer; default evenly spread, ending at the last")
    matches: list[IntermediateMatch] = Field(default_factory=list,
                                             description="intermediate matches of the kd_intermediate variant")

    @model_validator(mode="after")
    def _consistent(self) -> "Student":
        problems = []
        if self.hidden_size % self.num_attention_heads:
            problems.append(f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads "
                            f"{self.num_attention_heads}")
        if self.layer_map is not None and self.init != "teacher":
            problems.append("layer_map needs init: teacher")
        if self.layer_map is not None and len(self.layer_map) != self.num_hidden_layers:
            problems.append(f"layer_map has {len(self.layer_map)} entries for {self.num_hidden_layers} layers")
        for i, m in enumerate(self.matches):
            if m.student > self.num_hidden_layers:
                problems.append(f"matches[{i}].student = {m.student} is beyond the student's "
                                f"{self.num_hidden_layers} layers")
            if m.kind == "attention_mse" and (m.student == 0 or m.teacher == 0):
                problems.append(f"matches[{i}]: attentions are numbered from layer 1")
        if problems:
            raise ValueError("; ".join(problems))
        return self


class Distill(_Strict):
    """Soft-label KD (Hinton et al. 2015) mixed with the hard labels, plus intermediate matches."""

    teacher: str = Field(description="a fine-tuned model: <objective>-<seed>, random-<seed> or a baseline")
    temperature: float = Field(gt=0, description="τ of the softened distributions")
    temperature_schedule: Literal["constant", "anneal"] = Field(
        description="anneal: τ falls linearly to 1 over training (Jafari et al. 2021)")
    scale_by_t2: bool = Field(description="multiply the KD term by τ² (Hinton et al.; TextBrewer does not)")
    kd_weight: float = Field(gt=0, description="weight of the soft-label term")
    hard_weight: float = Field(ge=0, description="weight of the label loss in the distilled variants")
    epochs: float | None = Field(None, gt=0, description="student epochs; default the task's fine-tuning epochs")
    learning_rate: float | None = Field(None, gt=0, description="default the task's fine-tuning learning rate")


class Prune(_Strict):
    """Transformer pruning by importance (TextPruner); every variant is also measured after
    vocabulary pruning to the task's tokens, which leaves its predictions unchanged."""

    models: list[str] = Field(min_length=1, description="fine-tuned models to prune: <objective>-<seed>, "
                                                        "random-<seed>, baselines")
    heads: PositiveInt = Field(description="attention heads kept per layer, on average")
    ffn: PositiveInt = Field(description="FFN neurons kept per layer, on average")
    n_iters: PositiveInt = Field(description="iterations of the iterative variants (IS recomputed each time)")
    importance_examples: PositiveInt = Field(description="training examples IS is averaged over")
    importance_batch_size: PositiveInt = Field(description="examples per forward pass when computing IS",
                                               json_schema_extra=INFRASTRUCTURE)


class Compression(_Strict):
    """Compression of fine-tuned task models (TextBrewer, TextPruner): stages ``distill@<student>-<task>``
    and ``prune@<model>-<task>``."""

    tasks: list[str] = Field(min_length=1, description="tasks of finetune.tasks to compress on")
    students: dict[str, Student] = Field(min_length=1, description="name -> a student distilled on each task")
    distill: Distill
    prune: Prune
    latency_repeats: PositiveInt = Field(description="forward passes timed for latency and throughput",
                                         json_schema_extra=INFRASTRUCTURE)
