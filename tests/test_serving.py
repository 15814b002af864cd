"""Stopping a served deployment stops its runs: their processes end and the Prefect UI shows them Cancelled, not
Running for good (what ``prefect.serve`` alone left)."""

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, gone_within


def _until(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.5)
    pytest.fail(f"{what} within {seconds} s")


@pytest.mark.slow
def test_sigterm_of_serve_ends_its_runs_processes_and_marks_them_cancelled(prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType

    from tasks.orchestration.serving import STOPPED

    name = f"stop-{os.getpid()}"
    env = {**os.environ, "PREFECT_API_URL": prefect_server, "PREFECT_RUNNER_POLL_FREQUENCY": "1"}
    served = subprocess.Popen([sys.executable, "tests/serving_worker.py", name], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with get_client(sync_client=True) as client:
            def deployed():
                try:
                    return client.read_deployment_by_name(f"sleepy/{name}")
                except Exception:  # not registered yet
                    return None

            run = client.create_flow_run_from_deployment(_until(deployed, 60, "the deployment registered").id)
            _until(lambda: client.read_flow_run(run.id).state.type == StateType.RUNNING, 90, "the run started")
            sleeps = _until(lambda: [p for p in psutil.Process(served.pid).children(recursive=True)
                                     if p.name() == "sleep"], 30, "the run's child process started")
            served.send_signal(signal.SIGTERM)
            served.wait(60)
            state = client.read_flow_run(run.id).state
            assert state.type == StateType.CANCELLED and state.message == STOPPED
            assert gone_within([p.pid for p in sleeps], 5)
    finally:
        served.kill()
