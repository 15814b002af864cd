"""The ``shards`` and ``executor`` sections of ``params.yaml``: how the data stages split
their input and where they run the pieces (:mod:`tasks.core.shards`).

``shards`` changes the output files (shard boundaries are row-group boundaries and
shard seeds), so the sharded stages list it as DVC params; ``executor`` never changes a
byte of output, so no stage lists it and switching executors reruns nothing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from tasks.core.params.base import INFRASTRUCTURE, _Strict

EXECUTOR_KINDS = ("processes", "local_cluster", "address")


class Shards(_Strict):
    """How the data stages split their input (:mod:`tasks.core.shards`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=INFRASTRUCTURE)

    rows: int = Field(ge=1, description="input rows per shard; also the row-group size of the stage's output")


class Executor(_Strict):
    """Where the data stages run their shards: never a byte of output (no stage lists it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=INFRASTRUCTURE)

    kind: Literal["processes", "local_cluster", "address"] = Field(
        description="processes: a process pool on this machine; local_cluster: a dask.distributed.LocalCluster; "
                    "address: the Dask scheduler at `address`")
    workers: int = Field(ge=1, description="processes or Dask workers (ignored for kind: address)")
    address: str | None = Field(default=None, description="tcp://host:8786 of a running Dask scheduler")

    @model_validator(mode="after")
    def _address_iff_kind_address(self) -> "Executor":
        if self.kind == "address" and not self.address:
            raise ValueError("executor.address: kind 'address' needs the address of a running Dask scheduler "
                             "(tcp://host:8786)")
        if self.kind != "address" and self.address is not None:
            raise ValueError(f"executor.address: kind {self.kind!r} starts its own workers; set address to null "
                             "or kind to 'address'")
        if self.address is not None and "://" not in self.address:
            raise ValueError(f"executor.address: {self.address!r} is not a scheduler address like tcp://host:8786")
        return self
