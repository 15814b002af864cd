"""The sentence tasks on [CLS]: NSP (BERT, Devlin et al. 2019, §3.1: is segment B the text after A?) and
SOP (ALBERT, Lan et al. 2020, §4.2: are A and B in order?); the data pairs segments
(:mod:`tasks.pretraining.pairing`) and :class:`tasks.pretraining.modeling.SentenceHead` adds its loss.
Gate: accuracy above chance (50%) at the end of the training log."""

from __future__ import annotations

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind


class SentenceTask(Kind):
    name = "sentence"

    def applies(self, spec: Objective) -> bool:
        return spec.sentence_task is not None

    def describe(self, spec: Objective) -> list[str]:
        return [f"+ {spec.sentence_task.upper()}"]

    def model_options(self, spec: Objective) -> dict:
        return {"sentence_task": True}

    def log_gates(self, rows: list[dict], data, cfg, model, spec: Objective) -> list:
        from tasks.pretraining.gates import training_log_gate

        return [training_log_gate(rows, "sentence_accuracy", cfg.batch_size * cfg.log_every,
                                  f"{spec.sentence_task.upper()} accuracy above chance", 0.5)]
