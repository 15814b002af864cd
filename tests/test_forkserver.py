"""The fork server: a stage forked from the warm interpreter runs as ``python -m`` would, in its own
folder, environment and streams, returns its exit status, dies with its shim, and trains the same
bytes as a fresh interpreter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tasks.orchestration import forkserver as fs
from tests.conftest import gone_within

SCRIPT = fs.__file__
PROBE = textwrap.dedent("""
    import json, os, sys, time
    if sys.argv[1:2] == ["sleep"]:
        open("pid", "w").write(str(os.getpid()))
        time.sleep(60)
    if sys.argv[1:2] == ["exec"]:  # as a stage relaunches itself under torchrun
        os.execv(sys.executable, [sys.executable, "-c", "print('replaced'); raise SystemExit(5)"])
    if sys.argv[1:2] == ["raise"]:
        raise ValueError("bad record 7")
    print(json.dumps({"pid": os.getpid(), "cwd": os.getcwd(), "argv": sys.argv, "name": __name__,
                      "path0": sys.path[0], "x": os.environ.get("X"), "orig": sys.orig_argv[1:]}))
    sys.exit(int(sys.argv[1]))
""")


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.fixture
def served(tmp_path):
    """A fork server preloading json only, its environment, and a folder holding the probe module."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "probe.py").write_text(PROBE)
    env = {**os.environ, fs.ENV: str(tmp_path / "socket")}
    env.pop("X", None)
    server = subprocess.Popen([sys.executable, SCRIPT, "serve", env[fs.ENV], "json"], env=env)
    _wait_for(tmp_path / "socket")
    yield project, env
    server.terminate()
    server.wait()


def _client(project: Path, env: dict, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-S", SCRIPT, "client", "-m", "probe", *args], cwd=project, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_a_forked_stage_runs_as_python_m_would_and_returns_its_status(served):
    project, env = served
    proc = _client(project, {**env, "PWD": "/elsewhere", "DVC_STAGE": "s"}, "3", "b")
    out, err = proc.communicate(timeout=60)
    seen = json.loads(out)
    assert proc.returncode == 3, err
    assert seen["pid"] != proc.pid  # a child of the server, not the shim's own process
    assert seen["cwd"] == seen["path0"] == str(project)
    assert seen["argv"] == [str(project / "probe.py"), "3", "b"] and seen["name"] == "__main__"
    assert seen["orig"] == ["-m", "probe", "3", "b"]


def test_another_environment_runs_a_fresh_interpreter(served):
    project, env = served
    proc = _client(project, {**env, "X": "1"}, "0")
    out, err = proc.communicate(timeout=60)
    seen = json.loads(out)
    assert proc.returncode == 0, err
    assert seen["pid"] == proc.pid and seen["x"] == "1"  # the shim exec'd python itself
    assert seen["cwd"] == str(project)


def test_what_the_preload_sets_in_the_environment_does_not_decline_a_request(tmp_path):
    """torch's import sets TORCHINDUCTOR_CACHE_DIR; the forked ``progress`` passed it on to ``dvc repro``, and every
    stage was then declined ("environment differs"), so no stage of ``make repro`` was forked. A request with the
    preload's value, or without it, is forked; another value runs a fresh interpreter."""
    (tmp_path / "pre").mkdir()
    (tmp_path / "pre" / "presets.py").write_text("import os\nos.environ['PRESET'] = 'by-the-import'\n")
    (tmp_path / "probe.py").write_text(PROBE)
    env = {**os.environ, fs.ENV: str(tmp_path / "socket"), "PYTHONPATH": str(tmp_path / "pre")}
    env.pop("PRESET", None)
    server = subprocess.Popen([sys.executable, SCRIPT, "serve", env[fs.ENV], "presets"], env=env)
    try:
        _wait_for(tmp_path / "socket")
        for preset, forked in ((None, True), ("by-the-import", True), ("another", False)):
            proc = _client(tmp_path, {**env, **({"PRESET": preset} if preset else {})}, "0")
            out, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err
            assert (json.loads(out)["pid"] != proc.pid) is forked, preset
    finally:
        server.terminate()
        server.wait()


def test_without_a_server_the_shim_runs_a_fresh_interpreter(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    proc = _client(tmp_path, {**os.environ, fs.ENV: str(tmp_path / "absent")}, "4")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 4 and json.loads(out)["pid"] == proc.pid


def test_an_uncaught_error_prints_its_traceback_and_exits_1(served):
    project, env = served
    proc = _client(project, env, "raise")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "ValueError: bad record 7" in err and "Traceback" in err


def test_a_stage_that_replaces_itself_still_returns_the_status_of_what_replaced_it(served):
    project, env = served
    proc = _client(project, env, "exec")
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (5, "replaced\n"), err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_stage_dies_with_its_shim(served, sig):
    """SIGTERM is passed on (the shim returns 128+15); a shim killed with -9 leaves no stage behind."""
    project, env = served
    proc = _client(project, env, "sleep")
    _wait_for(project / "pid")
    stage = int((project / "pid").read_text())
    assert stage != proc.pid
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    assert proc.returncode == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGKILL)
    assert gone_within([stage], 30), "the stage outlived its shim"


def test_the_wrapper_puts_the_shim_first_on_path_and_off_turns_it_off(tmp_path):
    (tmp_path / "probe.py").write_text(PROBE)
    with fs.forkserver({**os.environ, fs.ENV: "off"}) as env:
        assert fs.ENV not in env or env[fs.ENV] == "off"
        assert env["PATH"] == os.environ["PATH"]
    with fs.forkserver(dict(os.environ)) as env:
        proc = subprocess.Popen("exec python -m probe 0", shell=True, cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, text=True)
        seen = json.loads(proc.communicate(timeout=120)[0])
        assert proc.returncode == 0
        assert seen["pid"] != proc.pid and seen["cwd"] == str(tmp_path)  # forked by the server
        shim = Path(env["PATH"].split(os.pathsep)[0]) / "python"
        assert shim.is_file()
    assert not shim.exists()  # the shim's folder, socket included, went with the server


TRAIN = textwrap.dedent("""
    import sys
    project = sorted(m for m in sys.modules if m.split(".")[0] in ("tasks", "flows"))
    assert not project, f"the server preloaded project modules {project}: a stage must import its own checkout's"
    import hashlib, os, torch
    from transformers import BertConfig, BertForMaskedLM
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = BertForMaskedLM(BertConfig(vocab_size=200, hidden_size=64, num_hidden_layers=2,
                                       num_attention_heads=2, intermediate_size=128))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(5):
        ids = torch.randint(0, 200, (8, 32))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters()))
    print(digest.hexdigest(), os.getpid())
""")


def test_a_forked_training_gives_the_bytes_of_a_fresh_one(tmp_path):
    """With the real preload (torch, transformers, Prefect imported before the fork), which holds no module of
    the project."""
    (tmp_path / "train.py").write_text(TRAIN)
    fresh = subprocess.run([sys.executable, "-m", "train"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300, check=True).stdout.split()
    with fs.forkserver(dict(os.environ)) as env:
        proc = subprocess.Popen([sys.executable, "-S", SCRIPT, "client", "-m", "train"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, text=True)
        forked = proc.communicate(timeout=300)[0].split()
    assert proc.returncode == 0 and int(forked[1]) != proc.pid  # forked from the server
    assert len(fresh[0]) == 64 and forked[0] == fresh[0]
