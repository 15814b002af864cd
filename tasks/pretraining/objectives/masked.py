"""The base of every objective: a token selection (MLM single tokens, WWM whole words, N-gram spans of
whole words as MacBERT and PERT, SpanBERT's geometric spans: :mod:`tasks.pretraining.selection`) and
the replacement shares of the chosen units (BERT's [MASK] 80 / random 10 / keep 10, Devlin et al.
2019, §3.1: :mod:`tasks.pretraining.masking`), predicted over the vocabulary by the MLM head and
measured on held-out text with [MASK] (:mod:`tasks.pretraining.heldout`)."""

from __future__ import annotations

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind

# The replacement a chosen token gets first, then the random noise, then keep (as params.yaml writes them).
SHARES = ("mask", "similar", "sound", "permute", "random", "keep")


class Masked(Kind):
    name = "masked"
    token_target = "token"

    def applies(self, spec: Objective) -> bool:
        return True

    def describe(self, spec: Objective) -> list[str]:
        shares = [(k, getattr(spec.replacement, k)) for k in SHARES]
        return [spec.masking, " / ".join(f"{k} {100 * v:g}" for k, v in shares if v)]
