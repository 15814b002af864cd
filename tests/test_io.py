"""Atomic outputs, deterministic Parquet and the shared line reader."""

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.core.errors import SourceError
from tasks.core.io import ParquetStream, atomic_outputs, numbered_lines, sha256_file, write_json, write_parquet
from tasks.downstream.records import table_labels


def test_failed_run_keeps_previous_outputs_and_leaves_no_temporaries(tmp_path):
    out, stats = tmp_path / "a.parquet", tmp_path / "d" / "stats.json"
    with atomic_outputs(out, stats) as (a, s):
        write_parquet(a, pa.table({"x": [1, 2]}))
        write_json(s, {"n": 2})
    before = sha256_file(out), sha256_file(stats)
    with pytest.raises(KeyboardInterrupt):
        with atomic_outputs(out, stats) as (a, s):
            write_parquet(a, pa.table({"x": [3]}))
            raise KeyboardInterrupt  # killed half-way: stats not written yet
    assert (sha256_file(out), sha256_file(stats)) == before
    assert sorted(os.listdir(tmp_path)) == ["a.parquet", "d"] and os.listdir(tmp_path / "d") == ["stats.json"]


def test_an_output_never_written_is_an_error_and_replaces_nothing(tmp_path):
    (tmp_path / "a.json").write_text("old")
    with pytest.raises(RuntimeError, match=r"b.json was not written"):
        with atomic_outputs(tmp_path / "a.json", tmp_path / "b.json") as (a, _):
            write_json(a, {})
    assert (tmp_path / "a.json").read_text() == "old"


def test_directory_outputs_replace_the_old_tree(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "stale.bin").write_bytes(b"x")
    with atomic_outputs(tmp_path / "m") as (m,):
        m.mkdir()
        (m / "model.bin").write_bytes(b"y")
    assert os.listdir(tmp_path / "m") == ["model.bin"]


def test_parquet_is_byte_identical_and_keeps_loader_metadata_only(tmp_path):
    schema = pa.schema([("label", pa.int64())], metadata={"labels": '["a", "b"]', "pandas": "{}"})
    table = pa.table({"label": [0, 1, 1]}, schema=schema)
    write_parquet(tmp_path / "1.parquet", table)
    write_parquet(tmp_path / "2.parquet", table)
    assert sha256_file(tmp_path / "1.parquet") == sha256_file(tmp_path / "2.parquet")
    back = pq.read_table(tmp_path / "1.parquet")
    assert table_labels(back) == ["a", "b"]
    assert b"pandas" not in back.schema.metadata


def test_numbered_lines_drops_a_leading_bom_and_line_ends(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes("\ufeff一\r\n\ufeff二\n\n三".encode())
    assert list(numbered_lines(path)) == [(1, "一"), (2, "\ufeff二"), (3, ""), (4, "三")]
    assert [line for _, line in numbered_lines(path, keep_ends=True)] == ["一\r\n", "\ufeff二\n", "\n", "三"]


def test_numbered_lines_names_file_line_and_byte_of_bad_utf8(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes("好\n".encode() + b"ab\xff\n")
    with pytest.raises(SourceError, match=r"bad.txt:2: not valid UTF-8 \(invalid start byte at byte 2\)"):
        list(numbered_lines(path))


def test_parquet_stream_bytes_depend_only_on_rows_and_group_size(tmp_path):
    table = pa.table({"a": list(range(25)), "b": [f"文{i}" for i in range(25)]})
    for name, batch in (("whole", 25), ("threes", 3), ("ones", 1)):
        with ParquetStream(tmp_path / f"{name}.parquet", table.schema, 10) as out:
            for i in range(0, 25, batch):
                out.write(table.slice(i, batch))
        assert out.rows == 25
    assert (tmp_path / "whole.parquet").read_bytes() == (tmp_path / "threes.parquet").read_bytes() \
        == (tmp_path / "ones.parquet").read_bytes()
    meta = pq.ParquetFile(tmp_path / "ones.parquet").metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [10, 10, 5]
    assert pq.read_table(tmp_path / "ones.parquet").equals(table)
    # a group as large as the data: exactly write_parquet's bytes; nothing written: an empty file
    with ParquetStream(tmp_path / "big.parquet", table.schema, 100) as out:
        out.write(table)
    write_parquet(tmp_path / "ref.parquet", table)
    assert (tmp_path / "big.parquet").read_bytes() == (tmp_path / "ref.parquet").read_bytes()
    with ParquetStream(tmp_path / "empty.parquet", table.schema, 10):
        pass
    assert pq.read_table(tmp_path / "empty.parquet").schema.equals(table.schema)


STREAM_PROBE = """
import sys, pyarrow as pa, pyarrow.parquet as pq
from tasks.core.io import stream_parquet
path, reader = sys.argv[1], sys.argv[2]
pf = stream_parquet(path) if reader == "stream" else pq.ParquetFile(path)
assert sum(b.num_rows for b in pf.iter_batches(batch_size=5_000, columns=["text"])) == pf.metadata.num_rows
print(pa.default_memory_pool().max_memory())
"""


def test_stream_parquet_memory_does_not_grow_with_the_file(tmp_path):
    """pyarrow pre-buffers every row group iter_batches will read (its default grows 15 -> 50 MB
    from 20 to 80 row groups here); stream_parquet holds one at a time."""
    import subprocess
    import sys

    rng = np.random.default_rng(0)

    def peak(groups: int, reader: str) -> int:  # a fresh process: the pool's high-water mark is per process
        path = tmp_path / f"texts-{groups}.parquet"  # incompressible text, row groups of 0.6 MB
        if not path.exists():
            texts = [rng.bytes(60).hex() for _ in range(groups * 5_000)]
            pq.write_table(pa.table({"text": texts}), path, row_group_size=5_000)
        out = subprocess.run([sys.executable, "-c", STREAM_PROBE, str(path), reader], capture_output=True,
                             text=True, check=True, cwd=Path(__file__).resolve().parents[1])  # imports tasks
        return int(out.stdout.split()[-1])

    assert peak(80, "default") > 2 * peak(20, "default")  # the probe sees pre-buffering
    assert peak(80, "stream") < 1.1 * peak(20, "stream") < peak(20, "default")
