"""Atomic, deterministic artifact I/O.

Every artifact is written to a temporary sibling and renamed into place only when
complete, so a killed run never leaves a half-written output for DVC to record.
JSON is written with sorted keys and Parquet with fixed settings, so the same
content always gives the same bytes.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.errors import SourceError, disk_full


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, ``/proc/<pid>/stat`` field 22), or None
    (no such process, or no ``/proc``)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_tag() -> str:
    """``<pid>s<start time>``: this process, told apart from a later one that reuses its pid; the
    owner's mark in every temporary's name (``.<name>.tmp-<tag>``), which :func:`remove_orphans`
    reads back."""
    pid = os.getpid()
    start = _start_time(pid)
    return f"{pid}s{start}" if start is not None else str(pid)


TAG = re.compile(r"(\d+)(?:s(\d+))?(?:-|$)")


def remove_orphans(folder: str | os.PathLike, prefix: str) -> list[Path]:
    """Remove the entries of ``folder`` named ``<prefix><tag>`` or ``<prefix><tag>-<anything>``
    (``tag``: :func:`process_tag`, or a bare pid) whose process is gone: the temporaries of a writer
    that was killed (``kill -9`` leaves them). A process that now holds the dead writer's pid does
    not keep them: its start time differs. A live writer's, this one's included, are left alone.
    Returns what was removed."""
    removed = []
    for path in Path(folder).glob(f"{glob.escape(prefix)}*") if Path(folder).is_dir() else []:
        tag = TAG.match(path.name[len(prefix):])
        if tag is None:
            continue
        pid, start = int(tag[1]), tag[2] and int(tag[2])
        if pid == os.getpid() and start in (None, _start_time(pid)):
            continue
        if not _alive(pid) or (start is not None and _start_time(pid) != start):
            _remove(path)
            removed.append(path)
    return removed


@contextmanager
def atomic_outputs(*paths: str | os.PathLike) -> Iterator[list[Path]]:
    """Yield temporary sibling paths for ``paths``; rename them into place on success.

    Works for files and directories. On any exception the temporaries are
    deleted and the previous outputs are left untouched (a full disk is raised as the
    :class:`tasks.core.errors.DiskFullError` of the first output: its path and free space); the temporaries a killed
    writer left (``.<name>.tmp-<tag>`` of a process that is gone: :func:`remove_orphans`) are
    removed first.

    Example::

        with atomic_outputs("data/a.parquet", "data/stats.json") as (a, stats):
            write_parquet(a, table)   # writes to the temporary path
            write_json(stats, {...})
    """
    finals = [Path(p) for p in paths]
    temps = [p.with_name(f".{p.name}.tmp-{process_tag()}") for p in finals]
    for final, temp in zip(finals, temps):
        final.parent.mkdir(parents=True, exist_ok=True)
        remove_orphans(final.parent, f".{final.name}.tmp-")
        _remove(temp)
    try:
        yield temps
    except BaseException as exc:
        for temp in temps:
            _remove(temp)
        if (full := disk_full(exc, finals[0])) is not None:  # name what was being written, not the cwd
            raise full from exc
        raise
    for final, temp in zip(finals, temps):
        if not temp.exists():
            raise RuntimeError(f"output {final} was not written")
    for final, temp in zip(finals, temps):
        _remove(final)
        os.replace(temp, final)


def to_json(obj: Any) -> str:
    """Deterministic JSON text: sorted keys, UTF-8 kept readable, trailing newline."""
    return json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as deterministic JSON to ``path`` (directly; wrap in :func:`atomic_outputs`)."""
    Path(path).write_text(to_json(obj), encoding="utf-8")


def write_json_atomic(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as deterministic JSON, atomically."""
    with atomic_outputs(path) as (tmp,):
        write_json(tmp, obj)


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_parquet(path: str | os.PathLike, table: pa.Table) -> None:
    """Write ``table`` to Parquet with fixed settings (zstd, no pandas metadata).

    Other schema metadata is kept: loaders store facts there that readers need
    (e.g. the label names of :func:`tasks.downstream.records.table_labels`).
    """
    pq.write_table(parquet_table(table), path, **PARQUET_OPTIONS)


# The fixed writer settings of every Parquet artifact (also the streaming writer of tasks/core/shards.py).
PARQUET_OPTIONS = {"compression": "zstd", "use_dictionary": True, "write_statistics": True}


class ParquetStream:
    """Write a Parquet file from a stream of tables in row groups of exactly ``rows`` rows
    (the last one shorter), holding at most one row group in memory. The bytes depend only
    on the rows and ``rows``, never on how the producer batched them; settings are
    :func:`write_parquet`'s. Write to a temporary (:func:`atomic_outputs`).

    Example::

        with ParquetStream(tmp, SCHEMA, rows=10_000) as out:
            for table in produce():
                out.write(table)
        out.rows  # rows written
    """

    def __init__(self, path: str | os.PathLike, schema: pa.Schema, rows: int) -> None:
        if rows < 1:
            raise ValueError(f"rows per row group must be >= 1, got {rows}")
        self.schema = parquet_table(schema.empty_table()).schema
        self.row_group_rows = rows
        self.rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._writer = pq.ParquetWriter(path, self.schema, **PARQUET_OPTIONS)

    def write(self, table: pa.Table) -> None:
        """Append ``table``'s rows (cast to the schema)."""
        self._pending.append(table.cast(self.schema))
        self._pending_rows += table.num_rows
        while self._pending_rows >= self.row_group_rows:
            self._flush(self.row_group_rows)

    def _flush(self, n: int) -> None:
        buffered = pa.concat_tables(self._pending)
        # one chunk per column: the bytes of a row group depend on how its columns are chunked
        self._writer.write_table(buffered.slice(0, n).combine_chunks(), row_group_size=n)
        rest = buffered.slice(n)
        self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows
        self.rows += n

    def close(self) -> None:
        if self._pending_rows:
            self._flush(self._pending_rows)
        elif not self.rows:
            self._writer.write_table(self.schema.empty_table())
        self._writer.close()

    def __enter__(self) -> "ParquetStream":
        return self

    def __exit__(self, exc_type, *_) -> None:
        if exc_type is None:
            self.close()
        else:  # the temporary is discarded by atomic_outputs; just release the file
            self._writer.close()


def stream_parquet(path: str | os.PathLike) -> pq.ParquetFile:
    """A Parquet file to stream with ``iter_batches``: one row group in memory at a time.

    pyarrow's default ``pre_buffer=True`` reads ahead the column chunks of every row group
    ``iter_batches`` will visit (coalesced reads, for high-latency filesystems), so a
    stream's memory grew with the file: 84 MB against 8 MB without it, reading a
    47 M-character corpus (``benchmarks/scale.py``).
    """
    return pq.ParquetFile(path, pre_buffer=False)


def parquet_table(table: pa.Table) -> pa.Table:
    """``table`` without pandas schema metadata, as :func:`write_parquet` stores it."""
    meta = {k: v for k, v in (table.schema.metadata or {}).items() if k != b"pandas"}
    return table.replace_schema_metadata(meta or None)


def sha256_file(path: str | os.PathLike) -> str:
    """Hex SHA-256 of a file's bytes (``hashlib.file_digest``: read in chunks)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def sha256_tree(path: str | os.PathLike) -> str:
    """Hex SHA-256 over a directory's relative file names and contents (or of a file)."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(f.relative_to(path).as_posix().encode() + b"\0" + sha256_file(f).encode())
    return h.hexdigest()


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> None:
    """Write one deterministic JSON object per line (sorted keys, UTF-8 kept readable)."""
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, sort_keys=True, allow_nan=False) + "\n")


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The objects of a file written by :func:`write_jsonl`, one per non-empty line."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]


def numbered_lines(path: Path, keep_ends: bool = False) -> Iterator[tuple[int, str]]:
    """(1-based line number, line) of a UTF-8 file, the one text reader of every stage.

    A leading byte-order mark is dropped (Windows tools write one; it is never text).
    Line endings are stripped unless ``keep_ends`` (the ``csv`` module needs them to
    read quoted fields that span lines).

    Raises:
        SourceError: a line is not UTF-8 (names file, line and byte offset in the line).
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SourceError(f"{path}:{number}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield number, line if keep_ends else line.rstrip("\r\n")
