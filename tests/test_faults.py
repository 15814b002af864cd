"""Faults of the scale-out machinery (issue 37): a worker killed in any pool fails its stage within
seconds with one line, and the rerun's output is byte-identical to an uninterrupted run's; shard
parts heal; a killed writer's temporaries are cleaned up by the next run."""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import yaml

import tasks.pretraining.pretraining_data as pretraining_data
from tasks.core.errors import ParamsError, PipelineError
from tasks.core.io import atomic_outputs, process_tag, remove_orphans
from tasks.core.params import Executor
from tasks.core.pool import map_processes
from tasks.core.shards import ShardedStep, check_part, remove_work, run_shards, write_output
from tasks.pretraining.masking import MaskingConfig
from tasks.pretraining.packing import pack_documents
from tasks.training.seeds import map_seeds
from tests.conftest import ROOT, alive, gone_within
from tests.test_shards import build, corpus_file, md5

TWO = Executor(kind="processes", workers=2)
KILL_FLAG = "ZHPLM_TEST_KILL"  # the shard or seed a test's job kills its own worker at


def _kill_self_at(index: int) -> None:
    if os.environ.get(KILL_FLAG) == str(index):
        os.kill(os.getpid(), signal.SIGKILL)


def upper_shard(rows: pa.Table, index: int, params) -> pa.Table:
    """A sharded step whose worker dies at shard ``$ZHPLM_TEST_KILL`` (a kill -9, as the OOM killer does)."""
    _kill_self_at(index)
    return pa.table({"text": [t.upper() for t in rows.column("text").to_pylist()]})


STEP = ShardedStep("upper", upper_shard, None, "upper", pa.schema([("text", pa.string())]), ("text",))


def test_a_killed_worker_fails_the_call_at_once_naming_the_job_and_the_signal(tmp_path):
    """"At once" counted in jobs, not seconds (a loaded CI machine stretches any clock): the call
    fails before the jobs after the killed one are handed out, and its other worker is stopped."""
    def job(i):
        (tmp_path / str(i)).touch()
        _kill_self_at(i)
        time.sleep(1 if i != 3 else 0)
        return i

    os.environ[KILL_FLAG] = "3"
    try:
        with pytest.raises(PipelineError, match=r"^t: the worker of job 3 was killed by SIGKILL \(out of memory\?\)"):
            map_processes(job, list(range(12)), 2, "t", lambda i: f"job {i}")
    finally:
        del os.environ[KILL_FLAG]
    started = {int(p.name) for p in tmp_path.iterdir()}
    assert 3 in started and started <= set(range(6)), started  # 2 and 3 run together; at most 4 and 5 after
    time.sleep(1.5)  # the surviving worker was stopped: no job starts later
    assert {int(p.name) for p in tmp_path.iterdir()} == started
    assert map_processes(lambda i: i * i, list(range(5)), 2, "t", str) == [0, 1, 4, 9, 16]


def test_a_workers_log_lines_reach_the_stage_while_its_job_runs(tmp_path):
    """Each job relays a line, then waits for the stage to have seen it (the stage answers by making a
    file): lines handed over only when a job ends would leave every job waiting out its 60 s."""
    from tasks.core.pool import relay

    def job(i):
        relay(f"job {i} started")
        deadline = time.monotonic() + 60
        while not (tmp_path / str(i)).exists():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    seen = []

    def on_log(index, line):
        seen.append((index, line))
        (tmp_path / str(index)).touch()

    assert map_processes(job, [0, 1, 2], 2, "t", str, on_log=on_log) == [True, True, True]
    assert sorted(seen) == [(i, f"job {i} started") for i in range(3)]


def test_a_worker_terminated_alone_is_named_alone():
    """A SIGTERM to one worker (the other busy with its own job) names that worker's job only."""
    def job(i):
        if i == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(2 if i != 2 else 0)
        return i

    with pytest.raises(PipelineError) as caught:
        map_processes(job, list(range(6)), 2, "segment", lambda i: f"shard {i}")
    assert str(caught.value).startswith("segment: the worker of shard 2 was killed by SIGTERM;")
    assert str(caught.value).count("shard") == 1


def test_workers_are_spawned_not_forked_and_the_pool_is_reentrant():
    """No fork from the stage's threaded process: each worker is a fresh interpreter (its parent's
    threads and memory are not inherited), and a call may run inside another's job."""
    import threading

    marker = threading.Thread(target=time.sleep, args=(5,), daemon=True)
    marker.start()  # a thread in the caller, as Prefect's are in a stage
    inner = lambda i: map_processes(lambda j: (j, threading.active_count()), [i, i + 1], 2, "inner", str)  # noqa: E731
    outer = map_processes(inner, [0, 10], 2, "outer", str)
    assert [[j for j, _ in r] for r in outer] == [[0, 1], [10, 11]]
    assert all(threads == 1 for r in outer for _, threads in r)  # a forked child would see the caller's threads


def test_an_error_stops_the_other_jobs_without_waiting_for_them():
    def job(i):
        if i == 1:
            raise ValueError("a truncated file")
        time.sleep(300)

    t0 = time.perf_counter()
    with pytest.raises(ValueError, match="a truncated file"):
        map_processes(job, [0, 1, 2], 2, "t", str)
    # the sleeping worker is killed, not waited for (the bound leaves room for a loaded machine's spawns)
    assert time.perf_counter() - t0 < 120


def test_segment_like_step_killed_mid_run_fails_then_the_rerun_finishes_it_identically(tmp_path):
    corpus = corpus_file(tmp_path / "corpus.parquet")
    whole = build(STEP, corpus, tmp_path / "whole" / "out.parquet", 40, TWO)
    os.environ[KILL_FLAG] = "2"
    try:
        with pytest.raises(PipelineError, match=r"^upper: the worker of shard 2 was killed by SIGKILL"):
            run_shards(STEP, corpus, tmp_path / "killed" / "out.parquet", 40, TWO)
    finally:
        del os.environ[KILL_FLAG]
    rerun = build(STEP, corpus, tmp_path / "killed" / "out.parquet", 40, TWO)
    assert rerun.shards == whole.shards and rerun.processed < rerun.shards  # only the unfinished shards
    assert md5(tmp_path / "killed" / "out.parquet") == md5(tmp_path / "whole" / "out.parquet")


def toy_seed(seed: int, log) -> dict:
    _kill_self_at(seed)
    torch.manual_seed(seed)
    return {"seed": seed, "value": float(torch.rand(1))}


def test_a_killed_seed_worker_fails_the_stage_naming_the_seed():
    os.environ[KILL_FLAG] = "13"
    try:
        with pytest.raises(PipelineError, match=r"^finetune: the worker of seed 13 was killed by SIGKILL"):
            map_seeds(toy_seed, [1, 13, 2], 2, torch.device("cpu"), "finetune")
    finally:
        del os.environ[KILL_FLAG]
    assert [r["seed"] for r in map_seeds(toy_seed, [1, 13, 2], 2, torch.device("cpu"), "finetune")] == [1, 13, 2]


def _dying_mask_shard(args):
    """pretraining_data's shard job, but the worker of the second shard dies as it starts (a module-level
    function: spawned workers import it, as they import the real one)."""
    if args[4][3] == 1:  # the rng key (seed, objective, copy, shard)
        os.kill(os.getpid(), signal.SIGKILL)
    return REAL_MASK_SHARD(args)


REAL_MASK_SHARD = pretraining_data._mask_shard


def test_a_killed_masking_worker_fails_pretraining_data_naming_the_shard(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    sentences = [rng.integers(5, 90, size=rng.integers(3, 20)).astype(np.int32) for _ in range(300)]
    packed = pack_documents([f"d{i // 5}" for i in range(300)], sentences,
                            [np.arange(len(s), dtype=np.int32) for s in sentences], 32, 1, 2)
    monkeypatch.setattr(pretraining_data, "_mask_shard", _dying_mask_shard)
    with pytest.raises(PipelineError, match=r"^pretraining_data@mlm: the worker of shard \d+ was killed by SIGKILL"):
        pretraining_data.write_shards(packed, MaskingConfig(), tmp_path / "mlm", objective="mlm", seed=1,
                                      dynamic=False, dupe_factor=1, shard_size=40, mask_token_id=3,
                                      random_token_ids=np.arange(5, 90), executor=TWO)


# each kind of damage a killed or faulty run can leave, on its own shard (10 shards of 40 rows), and why
# check_part says that shard must be redone
DAMAGES = {
    0: ("garbage marker", "its completion marker is unreadable"),
    1: ("empty marker", "its completion marker is unreadable"),
    2: ("truncated part", "sha256 differs"),
    3: ("swapped part", "sha256 differs"),
    5: ("missing part", "its part is missing"),
}


def test_damaged_shards_are_redone_with_a_warning_and_the_output_is_identical(tmp_path, caplog):
    """Every kind of damage at once, one shard each (a pool start per run, not per kind): the rerun redoes
    exactly those shards, warns for each with its reason, and writes the uninterrupted run's bytes."""
    corpus = corpus_file(tmp_path / "corpus.parquet")
    build(STEP, corpus, tmp_path / "whole" / "out.parquet", 40, TWO)
    output = tmp_path / "damaged" / "out.parquet"
    run = run_shards(STEP, corpus, output, 40, TWO)  # as if killed before writing the output
    assert run.shards == 10
    for index, (damage, _) in DAMAGES.items():
        part, marker = run.work / "parts" / f"part-{index:05d}.parquet", run.work / "completions" / f"{index:05d}"
        if damage == "garbage marker":
            marker.write_text("garbage{")
        elif damage == "empty marker":
            marker.write_text("")
        elif damage == "truncated part":
            part.write_bytes(part.read_bytes()[:100])
        elif damage == "swapped part":
            part.write_bytes((run.work / "parts" / "part-00004.parquet").read_bytes())
        else:
            part.unlink()
    assert [i for i in range(run.shards) if check_part(run.work, i)] == list(DAMAGES)
    rerun = run_shards(STEP, corpus, output, 40, TWO)
    assert rerun.processed == len(DAMAGES)  # those shards alone
    with atomic_outputs(output) as (out,):
        write_output(rerun, STEP.schema, out)
    remove_work(rerun)
    assert md5(output) == md5(tmp_path / "whole" / "out.parquet")
    for index, (damage, reason) in DAMAGES.items():
        assert re.search(rf"redoing shard {index}: [^\n]*{re.escape(reason)}", caplog.text), damage


def test_a_killed_writers_temporaries_are_removed_by_the_next_write(tmp_path):
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)  # a pid that is surely gone
    (tmp_path / f".out.parquet.tmp-{dead}").write_text("half")
    (tmp_path / f".mlm.packed-{dead}-x1y2").mkdir()
    (tmp_path / f".out.parquet.tmp-{os.getppid()}").write_text("a live writer's")
    with atomic_outputs(tmp_path / "out.parquet") as (out,):
        out.write_text("whole")
    assert not (tmp_path / f".out.parquet.tmp-{dead}").exists()
    assert (tmp_path / f".out.parquet.tmp-{os.getppid()}").exists()  # never another live process's
    assert remove_orphans(tmp_path, ".mlm.packed-") == [tmp_path / f".mlm.packed-{dead}-x1y2"]
    assert (tmp_path / "out.parquet").read_text() == "whole"


def test_a_temporary_whose_writers_pid_now_belongs_to_a_live_process_is_removed(tmp_path):
    """Liveness by pid alone keeps a dead writer's temporary forever once its pid is reused: the
    owner's start time in the name tells the two apart."""
    parent = os.getppid()  # a live process, standing in for the one that reused the dead writer's pid
    start = int(Path(f"/proc/{parent}/stat").read_text().rsplit(")", 1)[1].split()[19])
    reused = tmp_path / f".out.parquet.tmp-{parent}s{start + 1}"  # same pid, another start: a dead writer's
    live = tmp_path / f".out.parquet.tmp-{parent}s{start}"
    reused.write_text("half")
    live.write_text("a live writer's")
    with atomic_outputs(tmp_path / "out.parquet") as (out,):
        assert out.name == f".out.parquet.tmp-{process_tag()}" and "s" in process_tag()
        out.write_text("whole")
    assert not reused.exists() and live.exists()


def test_a_killed_multilingual_build_leaves_nothing_the_next_write_does_not_remove(tmp_path):
    """The multilingual stage's scratch folder sits beside its output's temporary and carries its
    name: killed, both go at the next write of the output."""
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    (tmp_path / f".documents.parquet.tmp-{dead}").write_text("half")
    (tmp_path / f".documents.parquet.tmp-{dead}-languages-ab12").mkdir()
    with atomic_outputs(tmp_path / "documents.parquet") as (out,):
        out.write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["documents.parquet"]


# --------------------------------------------------------------------------- no stage outlives its command

STAGE = """
import os, sys, time
from tasks.core.lifetime import die_with_parent
die_with_parent()  # as run_stage does
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(120)
"""
# the command between the wrapper and the stage: like dvc repro, it neither forwards signals nor waits to die
MIDDLE = "import subprocess, sys; subprocess.run([sys.executable, '-c', sys.argv[1], sys.argv[2]])"


def _wait_for(path: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while not (path.is_file() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.1)
    return int(path.read_text())


@pytest.mark.parametrize("how", ["SIGTERM to the wrapper", "SIGKILL to the wrapper", "SIGKILL to its group",
                                 "SIGKILL to the command"])
def test_no_stage_outlives_the_wrapper_or_its_command(tmp_path, how):
    """make repro's wrapper runs dvc repro, which runs the stage: whichever of them is killed,
    the stage is gone within 10 s."""
    pid_file = tmp_path / "stage.pid"
    env = {**os.environ, "PREFECT_API_URL": "http://127.0.0.1:9/api"}  # a server of its own is not started
    wrapper = subprocess.Popen([sys.executable, "-m", "tasks.orchestration.prefect_server", sys.executable, "-c",
                                MIDDLE, STAGE, str(pid_file)], cwd=ROOT, env=env, start_new_session=True,
                               stderr=subprocess.DEVNULL)
    stage = _wait_for(pid_file)
    command = int(open(f"/proc/{stage}/stat").read().split(")")[-1].split()[1])  # the stage's parent
    if how == "SIGTERM to the wrapper":
        wrapper.send_signal(signal.SIGTERM)
    elif how == "SIGKILL to the wrapper":
        wrapper.kill()
    elif how == "SIGKILL to its group":
        os.killpg(wrapper.pid, signal.SIGKILL)
    else:
        os.kill(command, signal.SIGKILL)
    try:
        assert gone_within([stage, command])
    finally:
        for pid in (stage, command):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        wrapper.kill()
        wrapper.wait()


def test_torchrun_ranks_die_with_their_agent_killed_with_its_group(tmp_path):
    """torchrun starts each rank in a session of its own, out of reach of ``kill -- -PGID``: the ranks
    die with the agent (tasks.core.lifetime, set when a rank joins the process group)."""
    out = tmp_path / "sleep"
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                              "-m", "tests.distributed_worker", str(out), "--case", "sleep"], cwd=ROOT,
                             env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ranks = [_wait_for(Path(f"{out}.{r}"), 120) for r in (0, 1)]
    assert all(os.getsid(r) != os.getsid(agent.pid) for r in ranks)  # torchrun's doing: own sessions
    os.killpg(agent.pid, signal.SIGKILL)
    agent.wait()
    try:
        assert gone_within(ranks)
    finally:
        for pid in ranks:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_finished_run_leaves_no_lock_and_no_snapshots_of_discarded_params(tmp_path):
    from tasks.pretraining.checkpoint import clear_checkpoint, exclusive, save_checkpoint

    path = tmp_path / "checkpoints" / "pretrain" / "mlm-42" / "last.pt"
    (path.parent / "snapshots-0123456789abcdef" / "0.5").mkdir(parents=True)  # a run of earlier params
    (path.parent / "snapshots-fedcba9876543210" / "0.5").mkdir(parents=True)  # this run's
    with exclusive(path):
        save_checkpoint(path, {"fingerprint": "f"})
    assert path.with_name("last.pt.lock").exists()  # held while it ran
    clear_checkpoint(path)
    assert not path.parent.exists()


def test_a_second_run_on_the_same_checkpoint_is_refused(tmp_path):
    from tasks.pretraining.checkpoint import exclusive

    with exclusive(tmp_path / "last.pt"):
        with pytest.raises(PipelineError, match=rf"another run \(pid {os.getpid()}\) is training on .*last.pt"):
            with exclusive(tmp_path / "last.pt"):
                pass
    with exclusive(tmp_path / "last.pt"):  # released when its run ended
        pass


# --------------------------------------------------------------------------- params that cannot be honoured


def test_prune_targets_larger_than_the_model_are_refused():
    from transformers import BertConfig

    from tasks.compression.prune import check_targets

    config = BertConfig(num_attention_heads=2, intermediate_size=64)
    with pytest.raises(ParamsError, match=r"compression.prune.heads 5 is more than the 2 attention heads per layer "
                                          r"of models/wwm; compression.prune.ffn 100000 is more than the 64 FFN"):
        check_targets(5, 100000, config, "models/wwm")
    check_targets(2, 64, config, "models/wwm")


def test_an_unreachable_dask_scheduler_is_one_line_at_once_and_leaves_no_work_folder(tmp_path):
    corpus = corpus_file(tmp_path / "corpus.parquet")
    t0 = time.perf_counter()
    with pytest.raises(ParamsError, match=r"^executor.address: no Dask scheduler answers at tcp://127.0.0.1:9"):
        run_shards(STEP, corpus, tmp_path / "out" / "out.parquet", 40,
                   Executor(kind="address", workers=1, address="tcp://127.0.0.1:9"))
    assert time.perf_counter() - t0 < 30
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_a_port_that_answers_but_is_no_dask_scheduler_is_refused_by_the_handshake(tmp_path):
    """A port that accepts connections (an HTTP server, e.g. Dask's dashboard) is no scheduler: the
    stage is refused in one line within the timeout, and leaves no work folder."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.server_address[1]}"
    corpus = corpus_file(tmp_path / "corpus.parquet")
    t0 = time.perf_counter()
    try:
        with pytest.raises(ParamsError, match=rf"^executor.address: no Dask scheduler answers at {address} \("):
            run_shards(STEP, corpus, tmp_path / "out" / "out.parquet", 40,
                       Executor(kind="address", workers=1, address=address))
    finally:
        server.shutdown()
    assert time.perf_counter() - t0 < 30
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_an_unreachable_rendezvous_is_one_line_within_its_wait():
    from tasks.core.params import Distributed
    from tasks.training.distributed import check_rendezvous

    far = Distributed(nproc_per_node=1, nnodes=2, rdzv_endpoint="192.0.2.1:29400", rdzv_id="x")  # TEST-NET-1
    t0 = time.perf_counter()
    with pytest.raises(ParamsError, match=r"distributed.rdzv_endpoint: nothing answers at 192.0.2.1:29400"):
        check_rendezvous(far, wait=3)
    assert time.perf_counter() - t0 < 10
    check_rendezvous(Distributed(nproc_per_node=1, nnodes=2, rdzv_endpoint="localhost:29400", rdzv_id="x"))


@pytest.mark.parametrize("edit, line", [
    ({"pretrain": {"device": "cuda"}, "distributed": {"nproc_per_node": 2}},
     r"error: pretrain.device: cuda asked for, but torch .* has no CUDA device"),
    ({"pretrain": {"device": "gpu"}}, r"pretrain.device: 'gpu' is no device"),
    ({"pretrain": {"device": "mps"}}, r"pretrain.device: mps asked for, but torch .* has no MPS device"),
    ({"pretrain": {"batch_size": 9}, "distributed": {"nproc_per_node": 2}},
     r"pretrain.batch_size 9 \(the global batch\) is not a multiple of 2 processes x 1 accumulation_steps"),
])
def test_params_a_training_stage_cannot_honour_stop_it_with_one_line_before_torchrun(tmp_path, edit, line):
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    for block, values in edit.items():
        params[block].update(values)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "flows.pretrain", "mlm", "42"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert re.search(line, proc.stderr), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and proc.stderr.count("error:") == 1


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().split(")")[-1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out



def test_a_command_of_make_study_dies_with_it(tmp_path):
    """`make study` terminated must not leave its `dvc exp run` (and the stage under it) running."""
    pid_file = tmp_path / "command.pid"
    command = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    study = subprocess.Popen([sys.executable, "-c", "import sys; from tasks.orchestration import study; "
                              f"study._run([sys.executable, '-c', {command!r}], open(sys.argv[1], 'w', buffering=1))",
                              str(pid_file)], cwd=ROOT)
    child = _wait_for(pid_file)
    study.kill()
    study.wait()
    try:
        assert gone_within([child])
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)

STUDY_OF_SLEEPERS = """
import contextlib, signal, sys
from pathlib import Path
from tasks.orchestration import study, units

# each unit's command starts a grandchild (as dvc repro starts its stage) and sleeps; both print their pids
SLEEPER = ("import os, subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
           "'import os, time; print(os.getpid(), flush=True); time.sleep(120)']); print(os.getpid(), flush=True); "
           "time.sleep(120)")
units.workspace = lambda path, *args: contextlib.nullcontext(path)
units.prefix = lambda space, all_units: []
units.run_unit = lambda space, out, unit, stages, log, env=None: units._run([sys.executable, "-c", SLEEPER], log)
signal.signal(signal.SIGTERM, study._stop)
todo = [units.Unit(f"u{k}", "pretrained", ()) for k in range(3)]
units.run_units(Path("."), todo, todo, [], 1, open(sys.argv[1], "w", buffering=1))
"""


def test_a_terminated_study_stops_its_running_unit_and_starts_no_other(tmp_path):
    """SIGTERM reaches the study's main thread while a worker thread runs a unit's `dvc repro`: the command
    and the stage under it go (DVC terminated leaves its stage running), and no unit after it starts."""
    log = tmp_path / "study.log"
    proc = subprocess.Popen([sys.executable, "-c", STUDY_OF_SLEEPERS, str(log)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while len(pids := [int(x) for x in log.read_text().split() if x.isdigit()] if log.is_file() else []) < 2:
        assert time.monotonic() < deadline and proc.poll() is None, "the unit's command never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(30) != 0
        assert gone_within(pids)
        assert "unit u0" in log.read_text() and "unit u1" not in log.read_text()
    finally:
        for pid in pids + [proc.pid]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_prefect_server_of_make_repro_dies_with_its_wrapper_killed_with_9(tmp_path):
    """The wrapper of `make repro` starts a Prefect server when none is configured: a `kill -9` of the
    wrapper takes the server (and its port) down too, not only the command."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path / "prefect")
    wrapper = subprocess.Popen([sys.executable, "-m", "tasks.orchestration.prefect_server", sys.executable, "-c",
                                "import time; time.sleep(300)"], cwd=ROOT, env=env, start_new_session=True,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert "Prefect API" in wrapper.stderr.readline()  # the server answered; the command starts
        deadline = time.monotonic() + 10
        while len(below := _descendants(wrapper.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(below) >= 2  # the server and the command
        wrapper.kill()
        assert gone_within(below, 30)
    finally:
        for pid in _descendants(wrapper.pid):
            os.kill(pid, signal.SIGKILL)
        wrapper.kill()
        wrapper.wait()


# --------------------------------------------------------------------------- a full disk

FULL_DISK_STAGE = """
import errno, sys
from pathlib import Path
from prefect import flow
from tasks.core.io import atomic_outputs
from tasks.core.stage import run_stage

@flow
def stage():
    with atomic_outputs(Path(sys.argv[1]) / "data" / "sentences.parquet") as (out,):
        out.write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device", str(out))

run_stage(stage)
"""


def test_a_full_disk_is_one_line_naming_the_path_and_leaves_no_partial_artifact(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}  # a temporary server of its own
    proc = subprocess.run([sys.executable, "-c", FULL_DISK_STAGE, str(tmp_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env={**env, "PREFECT_HOME": str(tmp_path / "prefect")})
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("error:")]
    assert re.search(r"no space left on the device of .*data/sentences\.parquet: [\d,.]+ MiB free", line)
    assert not any((tmp_path / "data").iterdir())  # the temporary went with the error


def test_a_full_disk_names_the_output_being_written_when_the_error_names_no_path(tmp_path, monkeypatch):
    """torch.save's "file write failed" names no file: the error named the working directory's file system."""
    from tasks.core.errors import DiskFullError
    from tasks.core.io import atomic_outputs
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DiskFullError, match=r"^no space left on the device of snapshots/0\.5: [\d,.]+ MiB free"):
        with atomic_outputs(Path("snapshots") / "0.5") as (out,):
            out.mkdir()
            raise RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file "
                               "data/3: file write failed (No space left on device)")
    assert list((tmp_path / "snapshots").iterdir()) == []


def test_a_full_disk_under_checkpoints_says_so_and_keeps_the_last_checkpoint(tmp_path, monkeypatch):
    from collections import namedtuple

    from tasks.core.errors import DiskFullError
    from tasks.pretraining.checkpoint import load_checkpoint, save_checkpoint

    path = tmp_path / "checkpoints" / "last.pt"
    save_checkpoint(path, {"fingerprint": "f", "w": torch.zeros(1000)})

    def full(*args, **kwargs):  # what torch's zip writer says when the disk fills
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 13056 vs 12950")

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr("tasks.pretraining.checkpoint.shutil.disk_usage",
                        lambda p: namedtuple("Usage", "total used free")(10**6, 10**6 - 100, 100))
    with pytest.raises(DiskFullError, match=r"no space left on the device of .*checkpoints/last\.tmp: .* MiB free, "
                                            r"and the write needed 0\.0 MiB"):
        save_checkpoint(path, {"fingerprint": "f", "w": torch.zeros(1000)})
    assert not path.with_suffix(".tmp").exists()
    assert load_checkpoint(path, "f", print) is not None  # the previous one stays


@pytest.mark.parametrize("seeds, line", [('"42"', r"pretrain\.seeds: Input should be a valid list"),
                                         ("[42, 42]", r"pretrain\.seeds: seeds repeat: \[42, 42\]")])
def test_every_entry_point_validates_params_before_dvc_reads_them(tmp_path, seeds, line):
    """`make repro` (and study, compare, pipeline) runs through the Prefect wrapper, which refuses bad
    params before DVC reads its foreach/matrix lists and whether or not a stage would rerun."""
    text = (ROOT / "params.yaml").read_text(encoding="utf-8")
    (tmp_path / "params.yaml").write_text(re.sub(r"(?m)^  seeds: \[42\]", f"  seeds: {seeds}", text),
                                          encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "tasks.orchestration.prefect_server", "touch", "ran"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2 and re.search(line, proc.stderr), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (tmp_path / "ran").exists()


SERVER_DIES_STAGE = """
import sys, time
from tasks.core import stage
stage.WATCH_EVERY = 0.2

def flow():
    print("started", flush=True)
    for _ in range(300):  # 60 s: the watch must stop it long before
        time.sleep(0.2)

stage.run_stage(flow)
"""


def test_a_prefect_server_dying_mid_stage_is_one_line_soon(tmp_path):
    """It gave a 206-line httpx traceback 229 s later (the server was checked only at the start)."""
    import http.server
    import threading
    import time
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/api"
    proc = subprocess.Popen([sys.executable, "-c", SERVER_DIES_STAGE], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PREFECT_API_URL": url})
    assert proc.stdout.readline().strip() == "started"
    t0 = time.perf_counter()
    server.shutdown()
    server.server_close()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and time.perf_counter() - t0 < 10
    assert err.strip().splitlines() == [f"error: the Prefect server at {url} stopped answering during the stage; "
                                        "restart it (`make repro` starts one) and rerun (a pretraining resumes "
                                        "from its checkpoint)"]
