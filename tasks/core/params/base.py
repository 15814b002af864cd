"""The base every section of ``params.yaml`` is validated with.

Each section model (see the sibling modules, one per pipeline section of
``params.yaml``) derives from :class:`_Strict`: unknown keys are rejected and the
parsed values are immutable.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
