"""ELECTRA's replaced-token detection (Clark et al. 2020, §2): a small MLM generator fills the masked
positions with its samples and the discriminator tells every token original or replaced
(:mod:`tasks.pretraining.electra`, a model of its own); measured on held-out text by the
discriminator's loss and AUC (:func:`tasks.pretraining.heldout.evaluate_rtd`), saved with
``heldout: rtd``."""

from __future__ import annotations

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind


class Rtd(Kind):
    name = "rtd"
    token_target = "replaced"

    def applies(self, spec: Objective) -> bool:
        return spec.rtd is not None

    def describe(self, spec: Objective) -> list[str]:
        return [f"+ RTD (generator {spec.rtd.generator_size:g}, λ {spec.rtd.weight:g})"]

    def model(self, params, spec: Objective, tokenizer, seed: int):
        from tasks.pretraining.electra import new_electra

        return new_electra(params.model, spec.rtd, len(tokenizer), params.pretraining_data.max_seq_length,
                           tokenizer.pad_token_id, seed)
