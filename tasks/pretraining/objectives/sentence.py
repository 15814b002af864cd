"""The sentence tasks on [CLS]: NSP (BERT, Devlin et al. 2019, §3.1: is segment B the text after A?) and
SOP (ALBERT, Lan et al. 2020, §4.2: are A and B in order?); the data pairs segments
(:mod:`tasks.pretraining.pairing`) and :class:`tasks.pretraining.modeling.SentenceHead` adds its loss.
Gate: accuracy above chance (50%) at the end of the training log."""

from __future__ import annotations

from pathlib import Path

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind, Logged


class SentenceTask(Kind):
    name = "sentence"
    logged = (Logged("sentence_loss", "sentence_loss", "step", "sentence"),
              Logged("sentence_accuracy", "sentence_correct", "sequence", "sentence"))

    def applies(self, spec: Objective) -> bool:
        return spec.sentence_task is not None

    reserve = 1  # the [SEP] between segment A and segment B

    def describe(self, spec: Objective) -> list[str]:
        return [f"+ {spec.sentence_task.upper()}"]

    def rows(self, packed, spec: Objective, *, seed: int, name: str, tokenizer, scratch: Path) -> tuple:
        from tasks.core.rng import named_rng
        from tasks.pretraining.pairing import sentence_pairs

        packed, stats = sentence_pairs(packed, spec.sentence_task, named_rng(seed, f"{name}/pairs"),
                                       tokenizer.cls_token_id, tokenizer.sep_token_id, out=scratch / "pairs")
        return packed, {"sentence_task": spec.sentence_task, **stats}

    def model_options(self, spec: Objective) -> dict:
        return {"sentence_task": True}

    def log_gates(self, rows: list[dict], data, cfg, model, spec: Objective) -> list:
        from tasks.pretraining.gates import training_log_gate

        return [training_log_gate(rows, "sentence_accuracy", cfg.batch_size * cfg.log_every,
                                  f"{spec.sentence_task.upper()} accuracy above chance", 0.5)]
