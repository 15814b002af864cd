"""What ``pretrain@<objective>-<seed>`` trains with: the objective's recipe with the overrides of the
setting its sweep chose (:mod:`tasks.pretraining.sweep`), kept in ``data/recipes/<objective>.json``.

A module of its own so that stage ``pretrain`` imports the choice, not the sweep's measures: an edit
to how a setting is measured reruns the sweep, and pretraining only when the choice changes.
"""

from __future__ import annotations

from pathlib import Path

from tasks.core.errors import SourceError
from tasks.core.io import read_json, write_json
from tasks.core.params import Pretrain


def write_choice(path: Path, chosen: str, overrides: dict) -> None:
    """The sweep's choice for :func:`recipe`: the setting's name and its overrides, nothing that varies
    from run to run (no timing), so that a rerun sweep that chooses the same reruns no pretraining."""
    write_json(path, {"chosen": chosen, "overrides": overrides})


def recipe(params, objective: str, choice: Path) -> tuple[Pretrain, str]:
    """The objective's recipe (``params.pretrain_for``) with the overrides of the setting the sweep
    chose (``choice``: ``data/recipes/<objective>.json``, ``{"chosen", "overrides"}``), and that
    setting's name.

    Raises:
        SourceError: the choice is missing (run stage ``sweep@<objective>``).
    """
    if not choice.is_file():
        raise SourceError(f"{choice} is missing: run `dvc repro sweep@{objective}` first")
    made = read_json(choice)
    return params.pretrain_for(objective, made["overrides"]), made["chosen"]
