"""A warm interpreter for the stages of one run: ``python -m flows.<stage>`` without importing torch,
transformers and Prefect again for every stage.

Every stage of ``dvc repro`` is a fresh ``python -m flows.<stage>``, and most of a stage's fixed cost
is importing the same libraries again (``benchmarks/stage_overhead.py``). The run's wrapper
(:mod:`tasks.orchestration.prefect_server`) starts one **fork server** that imports them once
(:data:`PRELOAD`, third-party only), and puts a ``python`` shim first on the ``PATH`` of ``dvc repro``.
A stage's ``python -m MODULE ARGS`` then connects to the server, which forks a child that runs
``MODULE`` exactly as ``python -m`` would: in the stage's working directory, with its environment,
arguments and standard streams (passed as file descriptors, so a terminal stays a terminal), and the
stage's exit status comes back to the shim. The same idea as multiprocessing's ``forkserver`` start
method, Android's zygote, or Nailgun for the JVM.

What keeps a forked stage the same as a fresh one:

* the server imports **no project module** (``tasks``, ``flows``): each stage imports the code of its
  own working directory, as ``python -m`` does, so a study's workspace runs its own checkout;
* it forks only for an environment equal to its own (:data:`PER_PROCESS`: the variables a shell or
  DVC sets per command, which no preloaded library reads on import) and the same interpreter;
  anything else (``OMP_NUM_THREADS`` of a study's two workers, another venv) runs a fresh
  interpreter, as without a server;
* the server runs nothing but imports (no thread, no torch op, no event loop) before it forks.

Lifetime: the child is in a process group of its own; the shim forwards SIGINT, SIGTERM and SIGHUP
to it, a child whose shim is gone (``kill -9``) gets SIGTERM, and a shim whose parent dies gets SIGTERM,
so a stage still dies with the ``dvc repro`` that started it (:mod:`tasks.core.lifetime`).

This file is run as a script (``python -S forkserver.py client ...``, ``python forkserver.py serve
SOCKET``) and imports only the standard library at the top, so that the shim starts in milliseconds
and the server holds no project module. Set ``ZHPLM_FORKSERVER=off`` to run every stage in a fresh
interpreter.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import os
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Iterator

ENV = "ZHPLM_FORKSERVER"  # the server's socket, in the environment of the command it serves; "off": none
PRELOAD = (  # what most stages import; a library missing here is simply not preloaded
    "torch",
    "numpy",
    "scipy.stats",
    "transformers",
    "transformers.modeling_utils",
    "transformers.models.bert.modeling_bert",
    "transformers.models.electra.modeling_electra",
    "transformers.models.albert.modeling_albert",
    "tokenizers",
    "pyarrow",
    "prefect",
    "prefect.flows",
    "prefect.flow_engine",
    "prefect.task_engine",
)
# Set per command by the shell or by DVC (dvc/stage/run.py), read by no preloaded library on import.
PER_PROCESS = frozenset({"PWD", "OLDPWD", "SHLVL", "_", "DVC_ROOT", "DVC_STAGE"})
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_HEADER = struct.Struct("!I")


# --- the shim's side ----------------------------------------------------------------------------

def client(argv: list[str]) -> int:
    """Run ``python ARGV`` in a child of the fork server named by ``$ZHPLM_FORKSERVER``; its exit status.

    Only ``-m MODULE ...`` goes to the server; any other command line, no server, or a server that
    declines (another environment) replaces this process with a fresh interpreter (``os.execv``).
    """
    _die_with_parent()
    path = os.environ.get(ENV, "")
    if len(argv) < 2 or argv[0] != "-m" or not path or path == "off":
        _exec(argv)
    request = {"module": argv[1], "argv": argv[2:], "cwd": os.getcwd(), "env": dict(os.environ),
               "executable": sys.executable, "umask": _umask()}
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(path)
        payload = json.dumps(request).encode()
        socket.send_fds(conn, [_HEADER.pack(len(payload))], [0, 1, 2])
        conn.sendall(payload)
        replies = conn.makefile("rb")
        first = json.loads(replies.readline() or b"{}")
    except (OSError, ValueError):  # no server (stopped, still starting and gone): a fresh interpreter
        first = {}
    if "pid" not in first:
        _exec(argv)
    pid, forwarded = first["pid"], []

    def forward(signum, frame):
        forwarded.append(signum)
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    last = replies.readline()
    if last:
        return int(json.loads(last)["exit"])
    if forwarded:  # ended by the signal passed on, as a fresh interpreter would be
        return 128 + forwarded[-1]
    print(f"error: the stage's process {pid} ended without an exit status (killed?)", file=sys.stderr)
    return 1


def _die_with_parent() -> None:
    """SIGTERM to this shim (and, through ``exec``, to the fresh interpreter it becomes) when its parent dies: a
    ``dvc repro`` killed by its wrapper's death takes its stage with it (it forwards no signal itself). As
    :func:`tasks.core.lifetime.die_with_parent`, without importing the project."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux
        return
    if os.getppid() == 1:  # the parent died before the call
        os._exit(128 + signal.SIGTERM)


def _exec(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- the server's side --------------------------------------------------------------------------

def serve(path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """Listen on the Unix socket ``path``, import ``preload``, then fork one child per request.

    The socket is bound before the imports, so a stage that starts meanwhile waits for them rather
    than running without the server. Never returns (ended by a signal: SIGTERM from the wrapper, or
    its death: :func:`tasks.core.lifetime.die_with_parent` set by the wrapper).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the stages through their shims
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    env, executable = dict(os.environ), sys.executable
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()  # the imports stay out of every child's collections, and their pages shared
    if threading.active_count() != 1:  # a fork copies only the forking thread: refuse rather than hang
        raise RuntimeError(f"the preload started threads {threading.enumerate()}; the fork server cannot fork")
    # what the imports set in the environment (TORCHINDUCTOR_CACHE_DIR), as they would in a fresh stage
    imported = {k: v for k, v in os.environ.items() if env.get(k) != v}
    while True:
        conn, _ = listener.accept()
        conn.settimeout(10)
        try:
            header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, 3)
            (size,) = _HEADER.unpack(header)
            request = json.loads(_read(conn, size))
        except (OSError, ValueError, struct.error):
            conn.close()
            continue
        reason = _declined(request, env, executable, imported)
        if reason or len(fds) != 3:
            _send(conn, {"declined": reason or "no standard streams"})
        elif os.fork() == 0:
            listener.close()
            _child(conn, fds, {**request, "env": {**request["env"], **imported}})  # never returns
        for fd in fds:
            os.close(fd)
        conn.close()


def _declined(request: dict, env: dict, executable: str, imported: dict | None = None) -> str:
    """Why a fresh interpreter must run ``request`` instead of a child of this server ('' when none).

    ``env``: the server's environment before the preload; ``imported``: what the preload set in it. A request
    may carry ``imported`` or lack it: a command this server forked (``progress``) passes it on to ``dvc repro``
    and so to every stage, and a fresh interpreter would set it itself on importing the same libraries.
    """
    if request.get("executable") != executable:
        return f"interpreter {request.get('executable')} is not the server's {executable}"
    imported = imported or {}
    theirs = {k: v for k, v in {**imported, **request.get("env", {})}.items() if k not in PER_PROCESS}
    ours = {k: v for k, v in {**env, **imported}.items() if k not in PER_PROCESS}
    differ = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
    return f"environment differs in {', '.join(differ)}" if differ else ""


def _child(conn: socket.socket, fds: list[int], request: dict) -> None:
    """Become ``python -m MODULE ARGV`` as the request describes, run it, report its status, exit."""
    code = 1
    try:
        os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the stage once, through its shim
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path.insert(0, request["cwd"])  # as python -m does (the server left its own folder out)
        _fresh_process_state(request["cwd"])
        sys.argv = ["-m", *request["argv"]]
        sys.orig_argv = [request["executable"], "-m", request["module"], *request["argv"]]
        sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as a fresh interpreter sets them up
        sys.stderr.reconfigure(line_buffering=True)
        os.execv = partial(_exec_as_child, conn)
        _send(conn, {"pid": os.getpid()})
        conn.settimeout(None)
        threading.Thread(target=_die_without_shim, args=(conn,), daemon=True).start()
        code = _run_module(request["module"])
    finally:  # nothing of the server's stack may run in the child: always leave here
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        try:
            _send(conn, {"exit": code})
        except OSError:
            pass
        os._exit(code)


def _exec_as_child(conn: socket.socket, path: str, args: list[str]) -> None:
    """``os.execv`` in a forked stage: run the program as a child, then exit with its status. A real exec
    would close the connection to the shim, and with it the exit status the shim must return
    (:func:`tasks.training.distributed.relaunch` replaces a stage by ``torchrun`` this way). The child dies
    with this process, and gets the signals the shim passes on."""
    from tasks.core.lifetime import die_with_parent  # the stage's own checkout, imported by it already

    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    program = subprocess.Popen(list(args), executable=path,
                               preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
    for signum in FORWARDED:
        signal.signal(signum, lambda signum, frame: program.send_signal(signum))
    code = program.wait()
    code = code if code >= 0 else 128 - code  # killed by a signal: the shell's 128 + its number
    _send(conn, {"exit": code})
    os._exit(code)


def _fresh_process_state(cwd: str) -> None:
    """What a preloaded library fixed at import and a fresh interpreter would draw anew (``random`` reseeds
    itself after a fork): NumPy's global generator, multiprocessing's start folder (its spawned workers'
    ``sys.path``)."""
    if "numpy.random" in sys.modules:
        sys.modules["numpy.random"].seed()
    if "multiprocessing.process" in sys.modules:
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = cwd


def _run_module(module: str) -> int:
    """Run ``module`` as ``__main__`` and end as the interpreter would; its exit status."""
    import runpy

    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = _exit_status(exc.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    # what Py_FinalizeEx does first: wait for the non-daemon threads, then run the atexit hooks
    threading._shutdown()
    atexit._run_exitfuncs()
    return code


def _exit_status(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value & 0xFF
    print(value, file=sys.stderr)
    return 1


def _die_without_shim(conn: socket.socket) -> None:
    """SIGTERM to this stage when its shim's end of the connection closes (the shim was killed)."""
    try:
        while conn.recv(1):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def _send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


def _read(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 16))
        if not chunk:
            raise ValueError("the request ended early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# --- the wrapper's side -------------------------------------------------------------------------

@contextmanager
def forkserver(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Start a fork server for commands run in ``env``; yield ``env`` as they must get it (the shim
    first on ``PATH``, ``$ZHPLM_FORKSERVER`` naming the socket), and stop the server on exit.

    Yields ``env`` unchanged when ``$ZHPLM_FORKSERVER`` is ``off`` or no ``python`` is on ``PATH``.
    """
    python = shutil.which("python", path=env.get("PATH"))
    if env.get(ENV) == "off" or python is None:
        yield env
        return
    from tasks.core.lifetime import die_with_parent

    folder = Path(tempfile.mkdtemp(prefix="zhplm-forkserver-"))
    try:
        shim = folder / "python"
        shim.write_text(f"#!/bin/sh\nexec {shlex.quote(python)} -S {shlex.quote(__file__)} client \"$@\"\n")
        shim.chmod(0o755)
        served = {**env, ENV: str(folder / "socket"), "PATH": f"{folder}{os.pathsep}{env.get('PATH', '')}"}
        server = subprocess.Popen([python, __file__, "serve", served[ENV]], env=served, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL,
                                  preexec_fn=partial(die_with_parent, signal.SIGTERM, os.getpid()))
        try:
            deadline = time.monotonic() + 10  # the socket is bound before the imports: a moment
            while not Path(served[ENV]).exists() and server.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            yield served
        finally:
            server.terminate()
            server.wait()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _main(argv: list[str]) -> int:
    if argv[:1] == ["client"]:
        return client(argv[1:])
    if argv[:1] == ["serve"] and len(argv) in (2, 3):
        sys.path.pop(0)  # this script's folder (tasks/orchestration): no project module may be found from it
        serve(argv[1], tuple(argv[2].split(",")) if len(argv) == 3 else PRELOAD)
    print("usage: forkserver.py client PYTHON-ARGS... | forkserver.py serve SOCKET [MODULE,...]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
