"""The base every section of ``params.yaml`` is validated with.

Each section model (see the sibling modules, one per pipeline section of
``params.yaml``) derives from :class:`_Strict`: unknown keys are rejected and the
parsed values are immutable.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


INFRASTRUCTURE = {"infrastructure": True}
"""``Field(json_schema_extra=INFRASTRUCTURE)``: a knob of how a result is computed (processes, devices,
shards, logging), not of what it is; the params reference lists these apart (docs/params.md)."""


def _device(value: str) -> str:
    if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", value):
        raise ValueError(f"{value!r} is no device: auto (CUDA when present, else CPU), cpu, cuda, cuda:<n> or mps")
    return value


Device = Annotated[str, AfterValidator(_device)]
"""A torch device name, or ``auto``; whether it exists here is checked when a stage starts
(:func:`tasks.training.device.resolve_device`)."""
