"""Malformed input records: one policy, counted, never silently dropped.

Loaders of labelled data call :meth:`Issues.found` for every malformed record
(a row with the wrong number of columns, an ``answer_start`` that does not match
its context, an ``I-`` tag that does not continue an entity, a label outside the
label set). The policy (a param, ``malformed:`` in ``params.yaml``) decides:

* ``fail``: stop the stage with a :class:`~tasks.core.errors.SourceError` naming the
  file and line (or record id) and what is wrong;
* ``skip``: drop the record;
* ``repair``: apply the documented repair when the kind of problem has one,
  otherwise drop the record.

Every decision is counted per kind and action, and the first messages are kept,
so the stage's stats say exactly what happened to the input.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from tasks.core.errors import SourceError

Policy = Literal["fail", "skip", "repair"]
POLICIES = ("fail", "skip", "repair")
MAX_MESSAGES = 20


@dataclass
class Issues:
    """Problems found while loading one dataset, and what was done about each."""

    policy: Policy = "fail"
    counts: Counter = field(default_factory=Counter)
    messages: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown malformed-record policy {self.policy!r}; known: {', '.join(POLICIES)}")

    def found(self, where: str, kind: str, detail: str, repairable: bool = False) -> bool:
        """Record one problem; return True if the caller should repair it, False to drop the record.

        Args:
            where: ``file:line`` or ``file#record-id``.
            kind: a short category, e.g. ``"columns"``, ``"answer_start"``, ``"bio"``, ``"label"``.
            detail: what is wrong, for people.
            repairable: the caller knows a repair for this problem.
        Raises:
            SourceError: the policy is ``fail``.
        """
        if self.policy == "fail":
            raise SourceError(f"{where}: {detail} (set malformed: skip or repair to continue)")
        repair = self.policy == "repair" and repairable
        action = "repaired" if repair else "skipped"
        self.counts[f"{kind}_{action}"] += 1
        if len(self.messages) < MAX_MESSAGES:
            self.messages.append(f"{where}: {detail} -> {action}")
        return repair

    def to_dict(self) -> dict:
        """Counts per ``<kind>_<action>`` and the first messages, for the stage stats."""
        return {"policy": self.policy, "counts": dict(sorted(self.counts.items())), "examples": self.messages}
