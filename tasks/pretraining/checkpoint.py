"""Checkpoints of a training run: a rolling ``last.pt`` from which a killed run resumes, reused
only by a run with the same fingerprint (params and input data).

Checkpoints hold only tensors and plain values and are read with
``torch.load(weights_only=True)``: a crafted file runs no code.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator

import torch
from pydantic import BaseModel

from tasks.core import paths
from tasks.core.errors import PipelineError
from tasks.core.io import sha256_tree
from tasks.pretraining.masking import MaskingConfig


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


def pretrain_checkpoint(objective: str, seed: int, params, cfg, spec, masking: MaskingConfig,
                        init_folder: Path | None = None) -> tuple[Path, str]:
    """The rolling checkpoint file of ``pretrain@<objective>-<seed>`` and its fingerprint: a
    checkpoint is reused only by a run with the same params and inputs (the other pretraining seeds
    aside; the masking params, ``pretraining_data``, act at batch time under dynamic masking; the
    processes and accumulation steps change the float rounding; ``init_folder``, the
    ``pretrain.init_from`` checkpoint, is hashed file by file, since DVC does not track it; ``cfg``:
    the objective's recipe, :func:`tasks.pretraining.sweep.recipe`)."""
    lexicon = [paths.LEXICON] if spec.dynamic and masking.similar else []
    init = [init_folder] if init_folder is not None else []
    name = paths.seeded(objective, seed)
    fingerprint = checkpoint_fingerprint(
        "pretrain", objective, params.model, cfg.model_dump(mode="json", exclude={"seeds"}), spec,
        params.pretraining_data, seed, world_size(params.distributed),
        data=[paths.PRETRAINING / name, paths.TOKENIZER] + lexicon + init)
    return paths.CHECKPOINTS / "pretrain" / name / "last.pt", fingerprint


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


def save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


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
