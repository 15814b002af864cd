"""PerLM, the permuted language model (PERT, Cui et al. 2022, §3.2): the chosen tokens are shuffled
among themselves and each is labelled with the position its original token now stands at; predicted
over the input's positions (``local``), the vocabulary (``global``) or both, at the chosen tokens or
at every one (``targets: full``), shuffled within the row or a word, N-gram or sentence (§6's
ablations). Gate: position accuracy above its trivial rate (every token staying where it is), read
from the training log (static data only: the rate needs the stored labels)."""

from __future__ import annotations

import numpy as np

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind


class PerLM(Kind):
    name = "perlm"
    token_target = "position"

    def applies(self, spec: Objective) -> bool:
        return spec.replacement.permute > 0

    def describe(self, spec: Objective) -> list[str]:
        p = spec.permutation
        options = [f"within {p.granularity}" if p.granularity != "none" else "",
                   f"{p.space} space" if p.space != "local" else "", "full targets" if p.targets == "full" else ""]
        return [o for o in options if o]

    def model_options(self, spec: Objective) -> dict:
        return dict(predicts_positions=True, space=spec.permutation.space,
                    full_targets=spec.permutation.targets == "full")

    def log_gates(self, rows: list[dict], data, cfg, model, spec: Objective) -> list:
        from tasks.pretraining.gates import perlm_trivial_rate, training_log_gate

        if data.masker is not None:  # dynamic: no stored labels to count the trivial rate on
            return []
        trivial = perlm_trivial_rate(np.concatenate(data.positions), np.concatenate(data.labels),
                                     int(data.lengths.sum()), model.full_targets)
        per_sequence = float(data.lengths.mean()) if model.full_targets else float(data.predictions.mean())
        return [training_log_gate(rows, "token_accuracy", cfg.batch_size * cfg.log_every * per_sequence,
                                  "PerLM accuracy above its trivial rate", trivial)]
