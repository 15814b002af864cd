"""SpanBERT's span boundary objective (Joshi et al. 2020, §3.2): each token of a masked span is also
predicted from the span's two boundary tokens and its position in the span
(:class:`tasks.pretraining.modeling.SpanBoundaryHead`), its loss added to MLM's."""

from __future__ import annotations

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind


class Sbo(Kind):
    name = "sbo"

    def applies(self, spec: Objective) -> bool:
        return spec.sbo

    def describe(self, spec: Objective) -> list[str]:
        return ["+ SBO"]

    def model_options(self, spec: Objective) -> dict:
        return {"sbo": True}
