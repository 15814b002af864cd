"""Checkpoints of a training run: a rolling ``last.pt`` from which a killed run resumes, reused
only by a run with the same fingerprint (params and input data).

Checkpoints hold only tensors and plain values and are read with
``torch.load(weights_only=True)``: a crafted file runs no code.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import pickle
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from pydantic import BaseModel

from tasks.core import paths
from tasks.core.errors import PipelineError, disk_full
from tasks.core.io import sha256_tree


def checkpoint_fingerprint(*parts, data: Iterable[Path] = ()) -> str:
    """Hex SHA-256 identifying a training run, for :func:`train`'s rolling checkpoint.

    Args:
        parts: everything that changes the result: params objects (pydantic
            models, hashed as their JSON ``model_dump``) and plain JSON values.
        data: files or folders the run reads, hashed with :func:`tasks.core.io.sha256_tree`.
    Returns:
        The SHA-256 of the canonical JSON (sorted keys) of the parts and data hashes.
    """
    dumped = [p.model_dump(mode="json") if isinstance(p, BaseModel) else p for p in parts]
    hashes = [sha256_tree(d) for d in data]
    return hashlib.sha256(json.dumps([dumped, hashes], sort_keys=True).encode()).hexdigest()


def world_size(distributed) -> int:
    """The DDP processes of a run (:class:`tasks.core.params.Distributed`): part of every fingerprint,
    since the float rounding of the summed gradients depends on it."""
    return distributed.nproc_per_node * distributed.nnodes


def pretrain_checkpoint(objective, seed: int, params, cfg, init_folder: Path | None = None) -> tuple[Path, str]:
    """The rolling checkpoint file of ``pretrain@<objective>-<seed>`` and its fingerprint: a
    checkpoint is reused only by a run with the same params and inputs (the other pretraining seeds
    aside; the masking params, ``pretraining_data``, act at batch time under dynamic masking; the
    processes and accumulation steps change the float rounding; ``init_folder``, the
    ``pretrain.init_from`` checkpoint, is hashed file by file, since DVC does not track it; ``cfg``:
    the objective's recipe, :func:`tasks.pretraining.recipe.recipe`; ``objective``: the built
    :class:`tasks.pretraining.objectives.PretrainingObjective`)."""
    lexicon = [paths.LEXICON] if objective.spec.dynamic and objective.needs_lexicon else []
    init = [init_folder] if init_folder is not None else []
    name = paths.seeded(objective.name, seed)
    fingerprint = checkpoint_fingerprint(
        "pretrain", objective.name, params.model, cfg.model_dump(mode="json", exclude={"seeds"}), objective.spec,
        params.pretraining_data, seed, world_size(params.distributed),
        data=[paths.PRETRAINING / name, paths.TOKENIZER] + lexicon + init)
    return paths.CHECKPOINTS / "pretrain" / name / "last.pt", fingerprint


def sweep_checkpoint(objective: str, setting: str, params, cfg, spec, init_folder: Path | None = None
                     ) -> tuple[Path, str]:
    """The checkpoint file of setting ``setting`` of stage ``sweep@<objective>`` and its fingerprint, as
    :func:`pretrain_checkpoint` (``cfg``: the setting's recipe; the data: ``sweep.seed``'s)."""
    init = [init_folder] if init_folder is not None else []
    fingerprint = checkpoint_fingerprint(
        "sweep", objective, setting, params.model, cfg.model_dump(mode="json", exclude={"seeds", "snapshots"}),
        spec, params.pretraining_data, params.sweep.fraction,
        data=[paths.PRETRAINING / paths.seeded(objective, params.sweep.seed), paths.TOKENIZER] + init)
    return paths.CHECKPOINTS / "sweep" / objective / f"{setting}.pt", fingerprint


@contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold ``<path>.lock`` for the duration of a run that writes checkpoint ``path``: a second
    run of the same stage (a retry started while the first still runs) is refused instead of
    training on the same checkpoint. The lock is the kernel's (``flock``), so it is released
    whenever its holder dies, ``kill -9`` included.

    Raises:
        PipelineError: another process holds it (names the process and the file).
    """
    lock = path.with_name(path.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "?"
            raise PipelineError(f"another run (pid {holder}) is training on {path}: wait for it to end or stop it "
                                "first") from None
        f.seek(0)
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def clear_checkpoint(path: Path) -> None:
    """Everything a finished run of checkpoint ``path`` leaves behind, gone: the checkpoint, its lock
    (:func:`exclusive`), and every ``snapshots-<fingerprint>`` folder beside it (its own run's, and
    those of runs whose params changed since: full models at real size), then the folder if empty.
    Call it once the run's outputs are saved."""
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".lock").unlink(missing_ok=True)
    for stale in path.parent.glob("snapshots-*"):
        shutil.rmtree(stale, ignore_errors=True)
    if path.parent.is_dir() and not any(path.parent.iterdir()):
        path.parent.rmdir()


def save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` to ``path`` atomically (a temporary renamed into place).

    Raises:
        DiskFullError: the disk filled up (torch's writer reports it as an unexpected position in its
            zip stream, not as a full disk): the temporary is removed, the previous checkpoint kept.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        torch.save(state, tmp)
    except (RuntimeError, OSError) as exc:
        tmp.unlink(missing_ok=True)
        needed = sum(t.numel() * t.element_size() for t in _tensors(state))
        full = disk_full(exc, tmp, needed) or (disk_full(OSError(errno.ENOSPC, "No space left on device"), tmp, needed)
                                               if shutil.disk_usage(path.parent).free < needed else None)
        if full is not None:
            raise full from None
        raise
    os.replace(tmp, path)


def _tensors(value):
    """Every tensor in a nest of dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)


def load_checkpoint(path: Path, fingerprint: str, log: Callable[[str], None]) -> dict | None:
    """The state saved at ``path`` if it is readable and has ``fingerprint``, else None (logged)."""
    if not path.is_file():
        return None
    try:  # weights_only: tensors and plain values only; unpickling a crafted file runs no code
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        log(f"warning: ignoring checkpoint {path}: it holds objects other than tensors and plain values "
            "(corrupt, or not written by this pipeline); training from scratch")
        return None
    except Exception as e:  # truncated or corrupt (zip or storage errors): any means a restart
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        log(f"warning: ignoring unreadable checkpoint {path} ({reason}); training from scratch")
        return None
    if not isinstance(state, dict) or state.get("fingerprint") != fingerprint:
        log(f"ignoring stale checkpoint {path} (params or data changed); training from scratch")
        return None
    return state
