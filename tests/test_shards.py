"""Sharded steps (tasks/core/shards.py): the same bytes on every executor, a kill -9 and a
rerun redo only the unfinished shards, a stale work folder is never read."""

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from tasks.core.errors import ParamsError
from tasks.core.io import atomic_outputs, read_json, write_parquet
from tasks.core.params import Executor, load_params
from tasks.core.shards import _task_runner, remove_work, run_shards, work_folder, write_output
from tasks.corpus.segment import segment_shard, segment_step
from tasks.corpus.tokenize import tokens_step, train_tokenizer
from tests.conftest import ROOT
from tests.test_segment import sample_texts


def corpus_file(path: Path, copies: int = 1) -> Path:
    """The People's Daily excerpt as an ingest-style sentence table (``copies`` times over)."""
    texts = sample_texts() * copies
    path.parent.mkdir(parents=True, exist_ok=True)
    write_parquet(path, pa.table({
        "doc_id": [f"d{i // 10}" for i in range(len(texts))],
        "sent_id": pa.array([i % 10 for i in range(len(texts))], type=pa.int32()),
        "lang": ["zh"] * len(texts), "source": ["peoples_daily"] * len(texts), "text": texts}))
    return path


def jieba_words(texts: list[str]) -> list[list[str]]:
    """The peer of the segment step: jieba's default tokenizer, precise mode with HMM."""
    import jieba

    return [jieba.lcut(t) for t in texts]


def build(step, source: Path, output: Path, rows: int, executor: Executor):
    """What a flow does: run the shards, write the one output atomically, remove the work folder."""
    run = run_shards(step, source, output, rows, executor)
    with atomic_outputs(output) as (out,):
        write_output(run, step.schema, out)
    remove_work(run)
    return run


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_output_is_byte_identical_on_every_executor(tmp_path, prefect_server):
    """processes x1 and x2, and Prefect tasks on a 2-worker LocalCluster: one cluster serves both
    steps through ``kind: address`` (``kind: local_cluster`` differs only in who starts it)."""
    from distributed import LocalCluster

    corpus = corpus_file(tmp_path / "corpus.parquet")
    seg = segment_step(pq.read_schema(corpus), hmm=True, user_dict=None)
    texts = sample_texts()
    tok = tokens_step(train_tokenizer(texts, 300, 2), seg.schema)
    digests = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        for name, executor in {"processes x1": Executor(kind="processes", workers=1),
                               "processes x2": Executor(kind="processes", workers=2),
                               "LocalCluster x2": Executor(kind="address", workers=2,
                                                           address=cluster.scheduler_address)}.items():
            out = tmp_path / name.replace(" ", "_")
            run = build(seg, corpus, out / "segmented.parquet", 120, executor)
            build(tok, out / "segmented.parquet", out / "tokens.parquet", 120, executor)
            assert (run.shards, run.processed) == (4, 4)
            digests[name] = (md5(out / "segmented.parquet"), md5(out / "tokens.parquet"))
            assert not list(out.glob(".*")), "work folders must be removed"
    assert len(set(digests.values())) == 1, digests
    segmented = pq.read_table(tmp_path / "processes_x1" / "segmented.parquet")
    assert segmented.column("words").to_pylist() == jieba_words(texts)
    assert pq.ParquetFile(tmp_path / "processes_x1" / "tokens.parquet").metadata.num_row_groups == 4


def test_local_cluster_executor_starts_one_single_threaded_process_per_worker():
    runner = _task_runner(Executor(kind="local_cluster", workers=3))
    assert runner.cluster_kwargs == {"n_workers": 3, "threads_per_worker": 1, "processes": True}


def test_one_shard_gives_the_bytes_of_the_whole_table(tmp_path):
    """With one shard the output is what write_parquet writes for the whole table, which is
    how the stages wrote their outputs before sharding."""
    corpus = corpus_file(tmp_path / "corpus.parquet")
    step = segment_step(pq.read_schema(corpus), hmm=True, user_dict=None)
    build(step, corpus, tmp_path / "sharded.parquet", 10_000, Executor(kind="processes", workers=1))
    table = pq.read_table(corpus)
    write_parquet(tmp_path / "whole.parquet", segment_shard(table, 0, (None, True)))
    assert md5(tmp_path / "sharded.parquet") == md5(tmp_path / "whole.parquet")


def finished(work: Path) -> list[Path]:
    """Completion markers in place (a marker being written is a dot-named temporary, not one)."""
    return [p for p in (work / "completions").glob("*") if not p.name.startswith(".")]


def test_a_stage_killed_by_sigkill_reruns_only_its_unfinished_shards(project, prefect_server):
    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    params["shards"]["rows"] = 100
    params["executor"] = {"kind": "processes", "workers": 2, "address": None}
    (project / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    corpus = corpus_file(project / "data/corpus/sentences.parquet", copies=15)  # 6,000 sentences, 60 shards
    step = segment_step(pq.read_schema(corpus), hmm=True, user_dict=None)
    work = work_folder(step, corpus.resolve(), (project / "data/segmented/sentences.parquet").resolve(), 100)
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "PYTHONPATH": str(ROOT)}

    stage = subprocess.Popen([sys.executable, "-m", "flows.segment"], cwd=project, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not finished(work) and time.monotonic() < deadline:
            assert stage.poll() is None, "the stage ended before finishing a shard"
            time.sleep(0.02)
        os.killpg(stage.pid, signal.SIGKILL)  # the stage and its workers, as a crash or the OOM killer would
    finally:
        stage.wait()
    done = len(finished(work))
    assert 0 < done < 60 and not (project / "data/segmented/sentences.parquet").exists()

    subprocess.run([sys.executable, "-m", "flows.segment"], cwd=project, env=env, check=True)
    metrics = read_json(project / "metrics/segment.json")
    assert metrics["shards"] == 60 and metrics["shards_run"] <= 60 - done
    assert not work.exists()

    build(step, corpus, project / "uninterrupted.parquet", 100, Executor(kind="processes", workers=1))
    assert md5(project / "data/segmented/sentences.parquet") == md5(project / "uninterrupted.parquet")


def test_a_stale_work_folder_is_never_read(tmp_path):
    """A work folder of other params (here: another HMM setting) has another name; a part
    planted in it, or in the real folder without its marker, never reaches the output."""
    corpus = corpus_file(tmp_path / "corpus.parquet")
    output = tmp_path / "segmented.parquet"
    step = segment_step(pq.read_schema(corpus), hmm=True, user_dict=None)
    other = segment_step(pq.read_schema(corpus), hmm=False, user_dict=None)
    ex = Executor(kind="processes", workers=1)
    stale = run_shards(other, corpus, output, 100, ex)
    assert stale.work != work_folder(step, corpus.resolve(), output.resolve(), 100)
    assert stale.work != work_folder(step, corpus.resolve(), output.resolve(), 50), "the shard size is keyed too"

    fresh = work_folder(step, corpus.resolve(), output.resolve(), 100)
    (fresh / "parts").mkdir(parents=True)
    for part in (stale.work / "parts").glob("*.parquet"):  # a part without a marker is redone
        (fresh / "parts" / part.name).write_bytes(part.read_bytes())
    run = build(step, corpus, output, 100, ex)
    assert run.processed == run.shards == 4
    assert not stale.work.exists(), "stale siblings are removed once the output is written"
    assert pq.read_table(output).column("words").to_pylist() == jieba_words(sample_texts())


def test_executor_params_name_the_key(tmp_path):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    assert "executor" not in str(yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["segment"]["params"])
    for executor, message in [({"kind": "address", "workers": 1, "address": None}, "executor.address: kind 'address' needs"),
                              ({"kind": "processes", "workers": 2, "address": "tcp://h:8786"}, "executor.address: kind 'processes'"),
                              ({"kind": "cluster", "workers": 2, "address": None}, "executor.kind"),
                              ({"kind": "processes", "workers": 0, "address": None}, "executor.workers")]:
        raw["executor"] = executor
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
        with pytest.raises(ParamsError, match=message):
            load_params(tmp_path / "params.yaml")


def test_a_work_folder_left_by_a_killed_run_goes_once_the_dag_is_up_to_date(tmp_path):
    """A killed `segment` redone from DVC's run cache left its shard work folder for good."""
    from tasks.core.shards import remove_left_work
    left = tmp_path / "data" / "segmented" / ".sentences.parquet.shards-0123abcd"
    (left / "parts").mkdir(parents=True)
    (tmp_path / "data" / "segmented" / "sentences.parquet").write_bytes(b"PAR1")
    assert remove_left_work(tmp_path / "data") == [left]
    assert [p.name for p in (tmp_path / "data" / "segmented").iterdir()] == ["sentences.parquet"]
