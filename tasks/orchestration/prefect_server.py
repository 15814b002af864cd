"""Run a command against one local Prefect server.

Without ``PREFECT_API_URL`` every Prefect process starts a temporary server of
its own (10-20 s on 2 cores), which a ``dvc repro`` of a dozen stages pays a
dozen times, and whose run history is thrown away. ``python -m
tasks.orchestration.prefect_server CMD...`` starts ``prefect server start`` once on a free
local port, runs ``CMD`` with ``PREFECT_API_URL`` pointing at it, and stops the
server afterwards. Runs are stored in ``$PREFECT_HOME`` (default ``~/.prefect``),
so ``prefect server start`` later shows them in the UI. When
``PREFECT_API_URL`` is already set, ``CMD`` simply runs against that server.

``CMD`` also runs with a fork server (:mod:`tasks.orchestration.forkserver`): every stage's
``python -m flows.<stage>`` starts as a child of one interpreter that has torch, transformers and
Prefect imported already, not as a fresh one (``ZHPLM_FORKSERVER=off`` turns it off).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from functools import partial
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import tasks  # noqa: F401  (offline defaults for the server process too)
from tasks.core.errors import ParamsError
from tasks.core.lifetime import die_with_parent
from tasks.core.params import PARAMS_FILE, load_params
from tasks.orchestration.forkserver import forkserver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextmanager
def prefect_server(timeout: float = 120.0) -> Iterator[str]:
    """Yield the API URL of a running Prefect server: ``$PREFECT_API_URL`` if set,
    else a local server started here and stopped on exit.

    Raises:
        RuntimeError: the server did not answer within ``timeout`` seconds.
    """
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    port = _free_port()
    api_url = f"http://127.0.0.1:{port}/api"
    log = open(os.devnull, "w")
    # the server dies with this process, even one killed with -9 (its port and database with it)
    server = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                               "--port", str(port)], stdout=log, stderr=log,
                              preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(api_url):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Prefect server on port {port} did not start within {timeout:.0f} s")
            time.sleep(0.5)
        yield api_url
    finally:
        _stop(server)
        log.close()


def _stop(server: subprocess.Popen) -> None:
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tasks.orchestration.prefect_server COMMAND [ARGS...]", file=sys.stderr)
        return 2
    # Every entry point (make repro, study, compare, pipeline) validates params.yaml first, whether or
    # not a stage will rerun, and before DVC reads its lists (foreach, matrix) into an error of its own.
    if Path(PARAMS_FILE).is_file():
        try:
            load_params()
        except ParamsError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    # A terminated wrapper must still stop its server (the `finally` above), not orphan it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with prefect_server() as api_url, forkserver({**os.environ, "PREFECT_API_URL": api_url}) as env:
        print(f"Prefect API: {api_url}", file=sys.stderr)
        # the command (dvc repro) dies with this wrapper, even a wrapper killed with -9, and every stage
        # with the command (tasks.core.lifetime)
        child = subprocess.Popen(argv, env=env, preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
        try:
            return child.wait()
        except KeyboardInterrupt:  # the command got the terminal's Ctrl-C too and stops its own run (progress.GRACE)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return child.wait(timeout=30)
            return 130
        finally:
            if child.poll() is None:  # we were terminated: stop the command too
                child.terminate()
                child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
