"""The fork server: a stage command handed to it behaves as the same command run by itself
(arguments, working directory, streams, environment, exit status, signals), and a command it
cannot serve faithfully runs by itself."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tasks.core.forkserver import ENV
from tasks.orchestration.prefect_server import fork_server

STAGE = '''
import json, os, sys, time
import flows
mode = sys.argv[1]
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "args": sys.argv[1:], "cwd": os.getcwd(),
                  "stdin": sys.stdin.read() if mode == "exit" else "", "flows": flows.__file__,
                  "name": __name__, "env": os.environ.get("STAGE_ENV")}), flush=True)
print("to stderr", file=sys.stderr)
if mode == "sleep":
    time.sleep(60)
if mode == "raise":
    raise ValueError("bad record 7")
sys.exit(int(sys.argv[2]))
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A stand-in for the repository: a ``flows`` package whose ``__init__`` delegates, as the real one."""
    root = tmp_path_factory.mktemp("project")
    (root / "flows").mkdir()
    (root / "flows" / "__init__.py").write_text("from tasks.core.forkserver import delegate\ndelegate()\n")
    (root / "flows" / "stage.py").write_text(STAGE)
    return root


@pytest.fixture(scope="module")
def server_env(project):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["STAGE_ENV"] = "from the command"
    with fork_server(env, preload=("json",)) as env:
        yield env


def stage(project, env, *args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.stage", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=120, **kwargs)


def test_a_served_stage_runs_in_a_forked_child_as_it_would_by_itself(project, server_env):
    proc = subprocess.Popen([sys.executable, "-m", "flows.stage", "exit", "3", "two words"], cwd=project,
                            env=server_env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    out, err = proc.communicate("records on stdin", timeout=120)
    assert proc.returncode == 3, err
    seen = json.loads(out)
    assert seen["pid"] != proc.pid and seen["ppid"] != proc.pid  # a child of the server, not this command
    assert seen["args"] == ["exit", "3", "two words"]
    assert seen["cwd"] == str(project) and seen["flows"] == str(project / "flows" / "__init__.py")
    assert seen["stdin"] == "records on stdin" and seen["name"] == "__main__"
    assert seen["env"] == "from the command"
    assert "to stderr" in err and "fork server" not in err


def test_errors_and_exit_statuses_pass_through(project, server_env):
    assert stage(project, server_env, "exit", "0").returncode == 0
    failed = stage(project, server_env, "raise")
    assert failed.returncode == 1
    assert "ValueError: bad record 7" in failed.stderr and json.loads(failed.stdout)["pid"] != 0


def test_a_command_with_another_environment_runs_by_itself(project, server_env):
    proc = stage(project, {**server_env, "STAGE_ENV": "changed"}, "exit", "4")
    assert proc.returncode == 4
    assert "environment differs from the server's in STAGE_ENV" in proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["env"] == "changed" and seen["ppid"] == os.getpid()  # the command itself ran the stage


@pytest.mark.parametrize("setting", ["0", "missing"])
def test_without_a_server_the_stage_runs_by_itself(project, server_env, tmp_path, setting):
    env = {**server_env, ENV: "0" if setting == "0" else str(tmp_path / "no-socket")}
    proc = stage(project, env, "exit", "5")
    assert proc.returncode == 5 and json.loads(proc.stdout)["ppid"] == os.getpid()


def test_termination_reaches_the_stage_and_its_status_comes_back(project, server_env):
    proc = subprocess.Popen([sys.executable, "-m", "flows.stage", "sleep"], cwd=project, env=server_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = json.loads(proc.stdout.readline())["pid"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM
    assert _ends(child)
    proc.stdout.close()
    proc.stderr.close()


def test_a_killed_command_takes_its_stage_down(project, server_env):
    proc = subprocess.Popen([sys.executable, "-m", "flows.stage", "sleep"], cwd=project, env=server_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child = json.loads(proc.stdout.readline())["pid"]
    proc.kill()  # SIGKILL: nothing is forwarded; the server sees the connection close
    proc.wait(timeout=60)
    assert _ends(child)
    proc.stdout.close()
    proc.stderr.close()


def _ends(pid: int, timeout: float = 30.0) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False
