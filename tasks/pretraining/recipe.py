"""What ``pretrain@<objective>-<seed>`` trains with: the objective's recipe with the overrides of the
setting its sweep chose (:mod:`tasks.pretraining.sweep`), kept in ``data/recipes/<objective>.json``.

A module of its own so that stage ``pretrain`` imports the choice, not the sweep's measures: an edit
to how a setting is measured reruns the sweep, and pretraining only when the choice changes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import TypeAdapter, ValidationError

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
        SourceError: the choice is missing, not JSON, not ``{"chosen": str, "overrides": {...}}``, or its
            overrides are not valid pretraining knobs (each names the file; rerun stage ``sweep@<objective>``).
    """
    rerun = f"rerun `dvc repro --force sweep@{objective}`"
    if not choice.is_file():
        raise SourceError(f"{choice} is missing: run `dvc repro sweep@{objective}` first")
    try:
        made = read_json(choice)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SourceError(f"{choice} is not JSON ({exc}); {rerun}") from None
    if not (isinstance(made, dict) and isinstance(made.get("chosen"), str) and isinstance(made.get("overrides"), dict)):
        raise SourceError(f'{choice} is not a sweep\'s choice {{"chosen": name, "overrides": {{knob: value}}}}; {rerun}')
    if problems := _invalid(made["overrides"]):
        raise SourceError(f"{choice}: overrides are not valid pretraining knobs ({problems}); {rerun}")
    return params.pretrain_for(objective, made["overrides"]), made["chosen"]


def _invalid(overrides: dict) -> str:
    """What is wrong with ``overrides`` as :class:`Pretrain` knobs ('' if nothing): each value checked against
    its field alone, so that no other knob is read (the stage declares only the ones it reads)."""
    problems = []
    for key, value in overrides.items():
        field = Pretrain.model_fields.get(key)
        if field is None:
            problems.append(f"{key}: Extra inputs are not permitted")
            continue
        try:
            TypeAdapter(Annotated[field.annotation, field]).validate_python(value)
        except ValidationError as exc:
            problems += [f"{key}: {e['msg']}" for e in exc.errors()]
    return "; ".join(problems)
