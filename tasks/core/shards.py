"""Sharded steps: resumable, out-of-core processing of one Parquet file into another.

A data stage's input is read as a stream of shards, fixed row ranges of ``shards.rows``
rows (shard ``i`` is rows ``[i * rows, (i + 1) * rows)``), never as a whole table. Each
shard is processed by a pure function of (shard rows, shard index, params) and written to
a work folder; at the end the parts are concatenated, in shard order and streaming, into
the stage's one output file. The layout and the resume rule are datatrove's
(``datatrove.executor.base.PipelineExecutor``: folders by role, a completion marker per
task written after its output, a rerun skips the tasks that have one)::

    <output dir>/.<output name>.shards-<fingerprint>/
        parts/part-00007.parquet     shard 7's rows (one row group)
        completions/00007            {"rows": n, "sha256": ...}, renamed into place after the part

- **Resume.** A shard counts as done when its marker is readable and its part has the sha256
  and rows the marker records (as MosaicML streaming checks its shards); a run killed at any
  point (even ``kill -9``) leaves only complete parts behind a marker (both are renamed into
  place), so the rerun redoes just the other shards, and a marker or part damaged or replaced
  since (an unreadable marker, a truncated or swapped part) is redone too, with a warning.
- **Never stale.** The work folder's name is a fingerprint of the step (name, function,
  the source file of its module, its params key), the shard size and the input file's
  identity (path, size, mtime, inode: any rewrite of the input, atomic or in place,
  changes one of them; O(1), unlike hashing a corpus of 100 GB). A work folder of other
  params or another input is never read (and is removed when the stage succeeds).
- **Deterministic.** A shard's output depends only on its rows, its index and the params
  (a step needing randomness draws from ``named_rng(seed, stage, shard_index)``), and
  each shard becomes exactly one row group of the output, so the output's bytes are the
  same whatever the executor and the number of workers.
- **Bounded memory.** Workers hold one shard; the concatenation holds one part
  (``pyarrow.parquet.ParquetWriter``, one row group per part).

Executors (``executor`` params): ``processes`` runs the shards in this process (1 worker)
or on spawned workers that die with the stage, and whose death fails the stage at once
(:func:`tasks.core.pool.map_processes`);
``local_cluster`` and ``address`` run each shard as a Prefect task, with retries, through
``prefect_dask.DaskTaskRunner`` on a ``dask.distributed.LocalCluster`` or an existing
scheduler (whose workers must see the same file system), so every shard shows in the
Prefect UI. :func:`map_tasks` is that executor for any list of jobs (pretraining data's
masking runs its shards on it too).
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.errors import ParamsError, PipelineError, SourceError
from tasks.core.io import (PARQUET_OPTIONS, atomic_outputs, parquet_table, read_json, sha256_file, stream_parquet,
                           write_json, write_parquet)
from tasks.core.pool import map_processes
from tasks.core.stage import run_logger, stage_task

FORMAT = 2  # of the work folder; part of the fingerprint, so a layout change never reads an old folder

ShardFn = Callable[[pa.Table, int, Any], pa.Table]


@dataclass(frozen=True)
class ShardedStep:
    """One stage's sharded step.

    Attributes:
        name: the stage (Prefect task names, messages, the work folder's fingerprint).
        fn: ``fn(rows, shard_index, params) -> table``, a module-level (picklable) pure
            function; its output must have ``schema``.
        params: ``fn``'s third argument (picklable).
        key: text that identifies ``params`` (and any file they name) for the fingerprint.
        schema: the output schema (parts are cast to it: Parquet does not keep e.g. the
            item name of a list type, which the output's Arrow schema records).
        columns: the input columns ``fn`` reads (``None``: all).
    """

    name: str
    fn: ShardFn
    params: Any
    key: str
    schema: pa.Schema
    columns: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ShardRun:
    """The state of a step's shards after :func:`run_shards`."""

    work: Path
    shards: int
    processed: int
    """Shards this run processed; ``shards - processed`` were done by a killed earlier run."""


# --------------------------------------------------------------------------- reading


def read_shard(source: Path, index: int, rows: int, columns: tuple[str, ...] | None = None) -> pa.Table:
    """Rows ``[index * rows, (index + 1) * rows)`` of a Parquet file, reading only the row
    groups that hold them, batch by batch.

    Raises:
        SourceError: the file is unreadable, lacks a column, or has no such shard.
    """
    try:
        pf = stream_parquet(source)
        total = pf.metadata.num_rows
        start, stop = index * rows, min((index + 1) * rows, total)
        if start >= stop:
            raise SourceError(f"{source}: shard {index} (rows {start}-) is past the end ({total} rows)")
        groups, offset, first = [], 0, None
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if offset < stop and offset + n > start:
                groups.append(g)
                first = offset if first is None else first
            offset += n
        batches, pos = [], first
        for batch in pf.iter_batches(batch_size=min(rows, 1 << 16), row_groups=groups,
                                     columns=list(columns) if columns else None, use_threads=False):
            lo, hi = max(start - pos, 0), min(stop - pos, batch.num_rows)
            if lo < hi:
                batches.append(batch.slice(lo, hi - lo))
            pos += batch.num_rows
            if pos >= stop:
                break
        return pa.Table.from_batches(batches)
    except (OSError, pa.ArrowException) as exc:  # ArrowInvalid, a missing column (KeyError-like ArrowException)
        raise SourceError(f"{source}: cannot read shard {index}: {exc}") from None


def iter_column(path: Path, column: str, batch_rows: int = 1 << 14) -> Iterator[Any]:
    """The values of one column of a Parquet file, as Python objects, streaming."""
    for batch in stream_parquet(path).iter_batches(batch_size=batch_rows, columns=[column]):
        yield from batch.column(0).to_pylist()


# --------------------------------------------------------------------------- one shard


def _name(index: int) -> str:
    return f"{index:05d}"


def _part(work: Path, index: int) -> Path:
    return work / "parts" / f"part-{_name(index)}.parquet"


def _marker(work: Path, index: int) -> Path:
    return work / "completions" / _name(index)


def check_part(work: Path, index: int) -> str | None:
    """Why shard ``index`` of ``work`` must be (re)done, or None when its part is the one its
    marker records (same sha256 and rows). An unreadable marker counts as no marker."""
    try:
        marker = read_json(_marker(work, index))
        expected, digest = int(marker["rows"]), str(marker["sha256"])
    except FileNotFoundError:
        return "no completion marker"
    except (ValueError, KeyError, TypeError):
        return "its completion marker is unreadable"
    part = _part(work, index)
    if not part.is_file():
        return "its part is missing"
    if sha256_file(part) != digest:
        return "its part is not the one its marker records (sha256 differs: corrupt, truncated or replaced)"
    try:
        rows = pq.ParquetFile(part).metadata.num_rows
    except (OSError, pa.ArrowException):
        return "its part is unreadable"
    return None if rows == expected else f"its part has {rows} rows, its marker {expected}"


def process_shard(step: ShardedStep, source: Path, rows: int, index: int, work: Path) -> int:
    """Process shard ``index`` of ``source``: write its part, then its completion marker.

    Returns:
        The part's number of rows.
    Raises:
        PipelineError: the step's output does not have ``step.schema`` (names the shard).
    """
    out = step.fn(read_shard(source, index, rows, step.columns), index, step.params)
    if not isinstance(out, pa.Table) or not out.schema.equals(step.schema):
        got = out.schema if isinstance(out, pa.Table) else type(out).__name__
        raise PipelineError(f"{step.name}: shard {index} of {source} gave {got}, not the declared schema "
                            f"{step.schema}")
    # part first, marker second, each renamed into place: a marker always means a complete part,
    # and it records the part's sha256 so that a part damaged or swapped since is noticed.
    with atomic_outputs(_part(work, index)) as (part,):
        write_parquet(part, out)
        digest = sha256_file(part)
    with atomic_outputs(_marker(work, index)) as (marker,):
        write_json(marker, {"rows": out.num_rows, "sha256": digest})
    return out.num_rows


def _process_shard_args(args: tuple) -> int:
    return process_shard(*args)


def _run_job(fn: Callable[[Any], Any], job: Any, index: int) -> Any:
    """One job as a Prefect task (``index`` names the task run)."""
    return fn(job)


def _task_runner(executor):
    from prefect_dask import DaskTaskRunner

    if executor.kind == "address":
        return DaskTaskRunner(address=executor.address)
    # one single-threaded process per worker: jieba and the tokenizers hold the GIL
    return DaskTaskRunner(cluster_class="distributed.LocalCluster",
                          cluster_kwargs={"n_workers": executor.workers, "threads_per_worker": 1,
                                          "processes": True})


def check_executor(executor, timeout: float = 10.0) -> None:
    """Fail fast when ``executor`` names no Dask scheduler that answers: Dask's own client does its
    handshake with it, so a port that accepts connections but is no scheduler (its dashboard, any
    other server) is refused too, instead of a stage that hangs on it (Dask would otherwise try for
    30 s, or forever, and end in a long traceback).

    Raises:
        ParamsError: no Dask scheduler completes the handshake at ``executor.address`` within
            ``timeout`` seconds.
    """
    if executor.kind != "address":
        return
    try:
        reply = asyncio.run(asyncio.wait_for(_identity(executor.address, timeout), timeout))
        if isinstance(reply, dict) and reply.get("type") == "Scheduler":
            return
        why = f"it answers as {reply.get('type') if isinstance(reply, dict) else type(reply).__name__}"
    except Exception as exc:  # OSError, TimeoutError, CommClosedError, ValueError (a bad address): all mean "none"
        why = (str(exc).strip().splitlines() or [f"no handshake within {timeout:g} s"])[0][:160]
    raise ParamsError(f"executor.address: no Dask scheduler answers at {executor.address} ({why}); start one with "
                      "`dask scheduler`, or set executor.kind: processes")


async def _identity(address: str, timeout: float):
    """The ``identity`` reply of whatever Dask comm answers at ``address`` (Dask's own handshake:
    its client hangs on a port that accepts connections but speaks another protocol)."""
    from distributed.comm import connect

    comm = await connect(address, timeout=timeout)
    try:
        await comm.write({"op": "identity"})
        return await comm.read()
    finally:
        comm.abort()


def map_tasks(name: str, fn: Callable[[Any], Any], jobs: list, executor, indices: list[int] | None = None) -> list:
    """``[fn(job) for job in jobs]`` on the executor (module docstring), results in job order.

    Args:
        name: the step, for Prefect's names: a flow ``<name>-shards`` of tasks
            ``<name>-shard-NNNNN`` (``NNNNN``: the job's shard index, from ``indices``, by
            default its position), each retried once (Dask executors).
        fn: a module-level (picklable) function; ``jobs`` must be picklable too.
        executor: the ``executor`` params (:class:`tasks.core.params.Executor`).
    Raises:
        ParamsError: ``executor.address`` names no Dask scheduler that answers.
        PipelineError: a worker process died (one line: the shard, the signal; :func:`tasks.core.pool.map_processes`).
        whatever ``fn`` raises for a failing job (after its retry on Dask).
    """
    if executor.kind == "processes":
        if executor.workers == 1 or len(jobs) <= 1:
            return [fn(job) for job in jobs]
        shard = indices or list(range(len(jobs)))
        return map_processes(fn, jobs, executor.workers, name, lambda i: f"shard {shard[i]}")

    check_executor(executor)
    from prefect import flow

    task = stage_task(_run_job, name=f"{name}-shard", retries=1, task_run_name=f"{name}-shard-{{index:05d}}")

    def run_all() -> list:
        futures = [task.submit(fn, job, i) for i, job in zip(indices or range(len(jobs)), jobs)]
        return [future.result() for future in futures]  # re-raises a job's error after its retry

    return flow(run_all, name=f"{name}-shards", task_runner=_task_runner(executor))()


# --------------------------------------------------------------------------- the step


def _fingerprint(step: ShardedStep, source: Path, rows: int) -> str:
    st = os.stat(source)
    code = Path(inspect.getsourcefile(step.fn)).read_bytes()
    text = json.dumps([FORMAT, step.name, f"{step.fn.__module__}.{step.fn.__qualname__}",
                       hashlib.sha256(code).hexdigest(), step.key, rows,
                       str(Path(source).resolve()), st.st_size, st.st_mtime_ns, st.st_ino])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def work_folder(step: ShardedStep, source: Path, output: Path, rows: int) -> Path:
    """The work folder of ``step`` on ``source`` for ``output`` (module docstring)."""
    return output.parent / f".{output.name}.shards-{_fingerprint(step, source, rows)}"


def run_shards(step: ShardedStep, source: str | os.PathLike, output: str | os.PathLike, rows: int,
               executor) -> ShardRun:
    """Process every shard of ``source`` that has no completion marker yet.

    Args:
        step: what to do to each shard.
        source: the input Parquet file.
        output: the stage's output file (the work folder is its hidden sibling).
        rows: rows per shard (``shards.rows``).
        executor: the ``executor`` params (:class:`tasks.core.params.Executor`).
    Returns:
        The work folder and the shard counts; then :func:`write_output` and :func:`remove_work`.
    Raises:
        SourceError: ``source`` is missing or unreadable.
        PipelineError: a shard's step failed (names the shard).
    """
    # absolute: Dask workers may run elsewhere (a shared file system) or in another directory
    source, output = Path(source).resolve(), Path(output).resolve()
    if not source.is_file():
        raise SourceError(f"{source}: input of stage {step.name} not found (run the stage that writes it)")
    try:
        total = pq.ParquetFile(source).metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"{source}: not a readable Parquet file: {exc}") from None
    check_executor(executor)  # before the work folder: a refused run leaves nothing behind
    work = work_folder(step, source, output, rows)
    for role in ("parts", "completions"):
        (work / role).mkdir(parents=True, exist_ok=True)
    shards = math.ceil(total / rows)
    problems = {i: check_part(work, i) for i in range(shards)}
    pending = [i for i, problem in problems.items() if problem]
    for i, problem in problems.items():
        if problem and problem != "no completion marker":  # a damaged leftover: say so, then heal it
            run_logger().warning(f"{step.name}: redoing shard {i}: {problem}")
    run_logger().info(f"{step.name}: {shards} shards of {rows} rows, {shards - len(pending)} done by an earlier run, "
                      f"{len(pending)} to run on {executor.address or f'{executor.kind} x{executor.workers}'} ({work})")
    map_tasks(step.name, _process_shard_args, [(step, source, rows, index, work) for index in pending], executor,
              indices=pending)
    return ShardRun(work=work, shards=shards, processed=len(pending))


def write_output(run: ShardRun, schema: pa.Schema, path: str | os.PathLike) -> int:
    """Concatenate the parts of ``run`` in shard order into ``path``, one row group per part,
    holding one part in memory at a time (write to a temporary: wrap in
    :func:`tasks.core.io.atomic_outputs`). Settings are :func:`tasks.core.io.write_parquet`'s,
    so a one-shard output has exactly the bytes ``write_parquet`` gives the whole table.

    Returns:
        The number of rows written.
    Raises:
        PipelineError: a part is missing or does not have the rows its marker records.
    """
    schema = parquet_table(schema.empty_table()).schema
    rows = 0
    with pq.ParquetWriter(path, schema, **PARQUET_OPTIONS) as writer:
        for index in range(run.shards):
            problem = check_part(run.work, index)
            if problem:
                raise PipelineError(f"{run.work}: shard {index}: {problem}; rerun the stage")
            part = pq.read_table(_part(run.work, index))
            # one chunk per column: the bytes of a row group depend on how its columns are chunked
            writer.write_table(part.cast(schema).combine_chunks())
            rows += part.num_rows
        if run.shards == 0:
            writer.write_table(schema.empty_table())
    return rows


def remove_left_work(root: str | os.PathLike = "data") -> list[Path]:
    """Remove every shard work folder under ``root`` (what it removed): call it only once every stage is up
    to date, when no folder can be resumed into an output any more. A killed sharded stage leaves its folder
    for its rerun; when that rerun is served by DVC's run cache instead, no code of the stage runs to remove it."""
    left = sorted(p for p in Path(root).glob("**/.*.shards-*") if p.is_dir())
    for folder in left:
        shutil.rmtree(folder, ignore_errors=True)
    return left


def remove_work(run: ShardRun) -> None:
    """Remove the work folder of ``run`` and any stale sibling (other params or input) of the
    same output: once the output is written, none of them can be resumed into it."""
    for folder in run.work.parent.glob(run.work.name.rsplit("-", 1)[0] + "-*"):
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
