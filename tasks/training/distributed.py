"""Distributed data parallel training: PyTorch DDP under ``torchrun``.

A training stage runs as one process per device. ``torchrun`` (``torch.distributed.run``)
starts them and sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``; :func:`relaunch` re-executes a
stage's command under ``torchrun`` when ``params.yaml``'s ``distributed`` block asks for more
than one process, so the DVC stage command stays ``python -m flows.<stage> ...``. gloo is the
backend on CPU, NCCL on CUDA. Rank 0 (:attr:`Ranks.is_main`) writes logs, checkpoints and the
model; every rank computes the same log rows (their sums are all-reduced).

Reference: PyTorch DDP (Li et al. 2020, "PyTorch Distributed", VLDB) and the ``torchrun`` docs.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from tasks.core.errors import ParamsError
from tasks.core.lifetime import die_with_parent
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.training.device import resolve_device


@dataclass(frozen=True)
class Ranks:
    """This process's place among the training processes (1 process: rank 0 of 1)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_sum(self, values: list[float]) -> list[float]:
        """``values`` summed over all ranks (float64; one all-reduce); unchanged with 1 process."""
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()

    def all_gather(self, obj):
        """``[obj of rank 0, obj of rank 1, ...]`` (``[obj]`` with 1 process)."""
        if self.world == 1:
            return [obj]
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out


def split_batch(index: np.ndarray, ranks: Ranks, accumulation_steps: int, key: str) -> list[np.ndarray]:
    """This rank's micro-batches of the global batch ``index`` (``[G]``): ``G`` is cut into
    ``world x accumulation_steps`` equal consecutive pieces; rank ``r`` takes pieces
    ``r * accumulation_steps ...``, so each example is read by exactly one rank.

    Raises:
        ParamsError: ``G`` is not a multiple of ``world x accumulation_steps`` (``key`` names the batch size).
    """
    pieces = ranks.world * accumulation_steps
    if len(index) % pieces:
        raise ParamsError(f"{key} {len(index)} (the global batch) is not a multiple of {ranks.world} processes "
                          f"x {accumulation_steps} accumulation_steps")
    first = ranks.rank * accumulation_steps
    return np.split(np.asarray(index), pieces)[first:first + accumulation_steps]


def wrap(model: torch.nn.Module, ranks: Ranks, device: torch.device, find_unused_parameters: bool = False):
    """``model`` in :class:`DistributedDataParallel` with several ranks, else ``model`` itself."""
    if ranks.world == 1:
        return model
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                   find_unused_parameters=find_unused_parameters)


def ranks_from_env() -> Ranks:
    """The ranks ``torchrun`` set in the environment (rank 0 of 1 outside ``torchrun``)."""
    env = os.environ
    return Ranks(int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0)))


def join_process_group(device: str = "auto", key: str = "device") -> tuple[Ranks, torch.device]:
    """Join the process group ``torchrun`` set up (nothing to join with 1 process); the group is
    destroyed when the process exits.

    Returns:
        ``(ranks, device)``: the device is ``cuda:<local rank>`` on CUDA, else :func:`resolve_device`'s.
    """
    ranks = ranks_from_env()
    if "LOCAL_RANK" in os.environ:  # a rank torchrun started, in a session of its own: die with the agent
        die_with_parent()
    resolved = resolve_device(device, key)
    if resolved.type == "cuda":
        resolved = torch.device("cuda", ranks.local_rank)
        torch.cuda.set_device(resolved)
    if ranks.world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if resolved.type == "cuda" else "gloo")
        atexit.register(dist.destroy_process_group)
    return ranks, resolved


def torchrun_command(module: str, args: list[str], cfg) -> list[str]:
    """The ``torchrun`` command line that runs ``python -m module args`` as ``cfg`` asks
    (``cfg``: :class:`tasks.core.params.Distributed`)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={cfg.nproc_per_node}",
           f"--nnodes={cfg.nnodes}"]
    if cfg.nnodes == 1:
        cmd.append("--standalone")
    else:
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={cfg.rdzv_endpoint}", f"--rdzv_id={cfg.rdzv_id}"]
    return cmd + ["-m", module, *args]


def _local_addresses() -> set[str]:
    names = {"localhost", socket.gethostname(), socket.getfqdn()}
    found = set()
    for name in names:
        try:
            found |= {info[4][0] for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    return found


def check_rendezvous(cfg, wait: float = 30.0) -> None:
    """On a node of a several-node run (``cfg``: :class:`tasks.core.params.Distributed`) that does not
    host the rendezvous, wait up to ``wait`` seconds for ``rdzv_endpoint`` to answer before starting
    ``torchrun``, which would otherwise wait minutes and end in a traceback per rank.

    Raises:
        ParamsError: nothing answers there (one line: the endpoint, what to start first).
    """
    if cfg.nnodes == 1 or "LOCAL_RANK" in os.environ:
        return
    host, _, port = cfg.rdzv_endpoint.rpartition(":")
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        raise ParamsError(f"distributed.rdzv_endpoint: host {host!r} is not known here") from None
    if addresses & (_local_addresses() | {"127.0.0.1", "::1"}):
        return  # this node hosts the rendezvous: torchrun starts it
    deadline = time.monotonic() + wait
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise ParamsError(f"distributed.rdzv_endpoint: nothing answers at {cfg.rdzv_endpoint} after "
                                  f"{wait:.0f} s: start the stage on that node first") from None
            time.sleep(1)


def relaunch(cfg, args: list[str]) -> None:
    """Replace this process by ``torchrun`` running the same stage module when ``cfg`` asks for
    more than one process and this process was not started by ``torchrun``; else return.

    Raises:
        ParamsError: the running program is not a ``python -m`` module.
    """
    if cfg.nproc_per_node * cfg.nnodes == 1 or "LOCAL_RANK" in os.environ:
        return
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is None:
        raise ParamsError("distributed: run the stage as `python -m flows.<stage>` to start several processes")
    cmd = torchrun_command(spec.name, args, cfg)
    sys.stdout.flush()
    os.execv(cmd[0], cmd)


PRETRAIN_MEMORY = ("pretrain.batch_size (raise pretrain.accumulation_steps to keep the global batch) or the "
                   "model (model.preset)")


def run_training_stage(flow: Callable, *args: str, device: str = "pretrain.device",
                       memory: str = PRETRAIN_MEMORY) -> None:
    """:func:`tasks.core.stage.run_stage` for a training stage: under ``torchrun`` when
    ``params.yaml``'s ``distributed`` block asks for more than one process (:func:`relaunch`).
    ``device``, the stage's device param, and the rendezvous are checked first, in this one
    process: a bad one is one line, not one traceback per rank. ``memory``: the params an
    out-of-memory line tells to lower."""
    def prepare(stage_args: list[str]) -> None:
        params = load_params()
        value = params
        for part in device.split("."):
            value = getattr(value, part)
        resolve_device(value, device)
        check_rendezvous(params.distributed)
        relaunch(params.distributed, stage_args)

    run_stage(flow, *args, memory=memory, prepare=prepare)
