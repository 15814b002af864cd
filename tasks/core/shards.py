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
        completions/00007            {"rows": n}, renamed into place after the part

- **Resume.** A shard counts as done when its marker and part exist; a run killed at any
  point (even ``kill -9``) leaves only complete parts behind a marker (both are renamed
  into place), so the rerun redoes just the other shards.
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
or a ``multiprocessing.Pool`` whose workers die with the stage (``PR_SET_PDEATHSIG``);
``local_cluster`` and ``address`` run each shard as a Prefect task, with retries, through
``prefect_dask.DaskTaskRunner`` on a ``dask.distributed.LocalCluster`` or an existing
scheduler (whose workers must see the same file system), so every shard shows in the
Prefect UI. :func:`map_tasks` is that executor for any list of jobs (pretraining data's
masking runs its shards on it too).
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect
import json
import math
import multiprocessing
import os
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.errors import PipelineError, SourceError
from tasks.core.io import (PARQUET_OPTIONS, atomic_outputs, parquet_table, read_json, stream_parquet, write_json,
                           write_parquet)
from tasks.core.stage import run_logger, stage_task

FORMAT = 1  # of the work folder; part of the fingerprint, so a layout change never reads an old folder

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


def _done(work: Path, index: int) -> bool:
    return (work / "completions" / _name(index)).is_file() and (work / "parts" / f"part-{_name(index)}.parquet").is_file()


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
    # part first, marker second, each renamed into place: a marker always means a complete part.
    with atomic_outputs(work / "parts" / f"part-{_name(index)}.parquet") as (part,):
        write_parquet(part, out)
    with atomic_outputs(work / "completions" / _name(index)) as (marker,):
        write_json(marker, {"rows": out.num_rows})
    return out.num_rows


def die_with_parent(parent: int) -> None:
    """Make this (forked worker) process die with its parent. Forked workers inherit the
    parent's SIGTERM handler (Prefect's raises an exception, which a pool worker reports
    and survives), so restore the default; ask Linux to send SIGTERM when the parent dies
    (even by SIGKILL); leave Ctrl-C to the parent, which then terminates the pool."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's pool.terminate() still applies
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _process_shard_args(args: tuple) -> int:
    return process_shard(*args)


def _call(fn_job: tuple[Callable, Any]) -> Any:
    fn, job = fn_job
    return fn(job)


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


def map_tasks(name: str, fn: Callable[[Any], Any], jobs: list, executor, indices: list[int] | None = None) -> list:
    """``[fn(job) for job in jobs]`` on the executor (module docstring), results in job order.

    Args:
        name: the step, for Prefect's names: a flow ``<name>-shards`` of tasks
            ``<name>-shard-NNNNN`` (``NNNNN``: the job's shard index, from ``indices``, by
            default its position), each retried once (Dask executors).
        fn: a module-level (picklable) function; ``jobs`` must be picklable too.
        executor: the ``executor`` params (:class:`tasks.core.params.Executor`).
    Raises:
        whatever ``fn`` raises for the first failing job (after its retry on Dask).
    """
    if executor.kind == "processes":
        if executor.workers == 1 or len(jobs) <= 1:
            return [fn(job) for job in jobs]
        # multiprocessing.Pool, unlike ProcessPoolExecutor, terminates its workers when the block
        # exits on an exception (a job's error, Prefect's TerminationSignal on SIGTERM, Ctrl-C).
        with multiprocessing.Pool(min(executor.workers, len(jobs)), initializer=die_with_parent,
                                  initargs=(os.getpid(),)) as pool:
            return pool.map(_call, [(fn, job) for job in jobs], chunksize=1)

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
    work = work_folder(step, source, output, rows)
    for role in ("parts", "completions"):
        (work / role).mkdir(parents=True, exist_ok=True)
    shards = math.ceil(total / rows)
    pending = [i for i in range(shards) if not _done(work, i)]
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
            if not _done(run.work, index):
                raise PipelineError(f"shard {index} has no completed part in {run.work}")
            part = pq.read_table(run.work / "parts" / f"part-{_name(index)}.parquet")
            expected = read_json(run.work / "completions" / _name(index))["rows"]
            if part.num_rows != expected:
                raise PipelineError(f"{run.work}: part {index} has {part.num_rows} rows, its marker says {expected}")
            # one chunk per column: the bytes of a row group depend on how its columns are chunked
            writer.write_table(part.cast(schema).combine_chunks())
            rows += part.num_rows
        if run.shards == 0:
            writer.write_table(schema.empty_table())
    return rows


def remove_work(run: ShardRun) -> None:
    """Remove the work folder of ``run`` and any stale sibling (other params or input) of the
    same output: once the output is written, none of them can be resumed into it."""
    for folder in run.work.parent.glob(run.work.name.rsplit("-", 1)[0] + "-*"):
        if folder.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
