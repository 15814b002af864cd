"""Start stage processes from a warm, preloaded parent: a fork server for ``dvc repro``.

Every stage is its own ``python -m flows.<stage>`` process, and each one spends 2-8 s of its
life importing torch, transformers and Prefect before it does any work: about 4 minutes of a
full ``dvc repro``. Under ``make repro`` (:mod:`tasks.orchestration.prefect_server`), a fork
server imports those libraries once; each stage command then connects to it, hands over its
standard streams, working directory, environment and arguments, and the server forks a child
that runs the stage's module as ``__main__`` would have. The stage command waits, forwards
Ctrl-C and termination, and exits with the child's status, so DVC sees the same process
behaviour, output and exit code. The idea is the zygote of Android and the ``forkserver``
start method of :mod:`multiprocessing` (with its ``set_forkserver_preload``), applied to whole
commands.

What the child runs is the same as a fresh process would run:

- the project's own modules (``tasks``, ``flows``) are never inherited: they are dropped from
  ``sys.modules`` in the child and imported from the stage's working directory, so DVC's code
  hashes describe the code that runs;
- the environment is the command's own. A command whose environment differs from the server's
  in anything but what DVC and its shell set for each command (``DVC_*``, ``SHLVL``, ``PWD``...:
  read by nothing preloaded) runs by itself instead, since the preloaded libraries read theirs
  at import time; so does one with another Python interpreter, or with no server answering;
- random state: :mod:`random` reseeds itself in a forked child; NumPy's and torch's global
  generators are in their import-time state, as in a fresh process, and every stage seeds its
  own generators anyway.

Set ``ZHPLM_FORKSERVER=0`` to run every stage in a fresh process. (In ``ps``, a forked stage shows
the server's command line.) :func:`tasks.orchestration.prefect_server.fork_server` starts and
stops the server.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import sys

ENV = "ZHPLM_FORKSERVER"  # the server's socket path, in the environment of the commands it serves
# What stage processes import before they do any work (the project's own modules excluded).
PRELOAD = ("numpy", "numba", "pyarrow.parquet", "torch", "transformers", "transformers.models.bert.modeling_bert",
           "prefect", "prefect.flow_engine", "prefect.task_engine", "prefect.logging.handlers")
PROJECT = ("tasks", "flows")
_FDS = 3  # stdin, stdout, stderr
_HEADER = struct.Struct("!I")


def _send(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = _HEADER.pack(len(data)) + data
    if fds:
        socket.send_fds(conn, [payload], fds)
    else:
        conn.sendall(payload)


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the fork server's peer closed the connection")
        data += chunk
    return data


def _recv(conn: socket.socket, with_fds: bool = False) -> tuple[dict, list[int]]:
    fds: list[int] = []
    if with_fds:
        head, fds, _, _ = socket.recv_fds(conn, _HEADER.size, _FDS)
        head += _recv_exact(conn, _HEADER.size - len(head))
    else:
        head = _recv_exact(conn, _HEADER.size)
    (size,) = _HEADER.unpack(head)
    return json.loads(_recv_exact(conn, size)), fds


# What DVC and the shell it runs a command with set for that command alone; nothing the server
# preloads reads them.
_PER_COMMAND = ("SHLVL", "_", "PWD", "OLDPWD")


def _comparable(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("DVC_") and k not in _PER_COMMAND}


# --- the stage command's side ------------------------------------------------------------------

def _stage_module() -> tuple[str, list[str]] | None:
    """``(module, args)`` when this process was started as ``python -m flows.<stage> ARGS``."""
    argv = getattr(sys, "orig_argv", [])
    if "-m" not in argv[:-1]:
        return None
    i = argv.index("-m")
    module = argv[i + 1]
    return (module, argv[i + 2:]) if module.startswith("flows.") else None


def delegate() -> None:
    """Hand this ``python -m flows.<stage>`` process over to the fork server named by
    ``$ZHPLM_FORKSERVER`` and exit with the stage's status. Returns (and the stage runs here, as
    usual) when there is no server, it does not answer, or it declines this command."""
    path = os.environ.get(ENV)
    started = _stage_module()
    if not path or path == "0" or started is None:
        return
    module, args = started
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        _send(conn, {"module": module, "args": args, "cwd": os.getcwd(), "env": dict(os.environ),
                     "executable": sys.executable}, fds=[0, 1, 2])
        reply, _ = _recv(conn)
    except OSError:
        conn.close()
        return
    if "pid" not in reply:  # declined: run here
        conn.close()
        print(f"fork server: {reply.get('declined', 'declined')}; {module} runs in its own process", file=sys.stderr)
        return
    child = reply["pid"]

    def forward(signum, frame):
        try:
            os.killpg(child, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    try:
        status = _recv(conn)[0]["status"]
    except (OSError, ValueError, KeyError):
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if status < 0:  # killed by a signal: die the same way, as DVC would have seen it
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


# --- the server's side -------------------------------------------------------------------------

def _decline_reason(request: dict, fds: list[int], env: dict[str, str]) -> str | None:
    if len(fds) != _FDS:
        return "no standard streams received"
    if request.get("executable") != sys.executable:
        return f"another interpreter ({request.get('executable')}, the server runs {sys.executable})"
    theirs, ours = _comparable(request.get("env", {})), _comparable(env)
    differ = sorted(k for k in theirs.keys() | ours.keys() if theirs.get(k) != ours.get(k))
    if differ:
        return f"the environment differs from the server's in {', '.join(differ[:5])}"
    return None


def _run_child(request: dict, fds: list[int], import_env: dict[str, str]) -> None:
    """In the forked child: become the stage process and run its module as ``__main__``.
    Never returns: the module's ``SystemExit`` (or error) ends the process the normal way."""
    os.setpgid(0, 0)  # its own process group: the stage command forwards signals to all of it
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    sys.stdout.reconfigure(line_buffering=os.isatty(1))  # as a fresh process would choose
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update({**request["env"], **import_env})  # what the imports set, as in a fresh process
    for name in [m for m in sys.modules if m.split(".")[0] in PROJECT]:
        del sys.modules[name]
    sys.path[0] = request["cwd"]
    sys.argv = [request["module"], *request["args"]]
    import runpy

    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def serve(path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """Import ``preload``, then serve stage commands on the Unix socket ``path`` until terminated
    (SIGTERM). Runs one child per command, any number at once."""
    server_pid = os.getpid()
    env_before = dict(os.environ)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # bind first: commands that connect during the preload wait in the backlog
    listener.listen(64)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the stages through their commands
    import importlib

    for name in preload:
        importlib.import_module(name)
    import_env = {k: v for k, v in os.environ.items() if env_before.get(k) != v}
    import gc

    gc.collect()
    gc.freeze()  # keep the preloaded objects' pages shared with every child
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    children: dict[int, tuple[socket.socket, int]] = {}  # pidfd -> (the command's connection, pid)
    try:
        while True:
            for key, _ in selector.select():
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    fds: list[int] = []
                    try:
                        request, fds = _recv(conn, with_fds=True)
                        reason = _decline_reason(request, fds, env_before)
                    except (OSError, ValueError) as exc:
                        reason = f"unreadable request ({exc})"
                    if reason:
                        for fd in fds:
                            os.close(fd)
                        try:
                            _send(conn, {"declined": reason})
                        except OSError:
                            pass
                        conn.close()
                        continue
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        selector.close()
                        listener.close()
                        conn.close()
                        for other, _ in children.values():
                            other.close()
                        _run_child(request, fds, import_env)
                    try:  # also here, so the group exists before the command can signal it
                        os.setpgid(pid, pid)
                    except (ProcessLookupError, PermissionError):  # already gone, or already done
                        pass
                    for fd in fds:
                        os.close(fd)
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = (conn, pid)
                    selector.register(pidfd, selectors.EVENT_READ, "child")
                    selector.register(conn, selectors.EVENT_READ, pid)
                    _send(conn, {"pid": pid})
                elif key.data == "child":
                    conn, pid = children.pop(key.fd)
                    selector.unregister(key.fd)
                    os.close(key.fd)
                    _, status = os.waitpid(pid, 0)
                    if conn.fileno() >= 0:
                        selector.unregister(conn)
                        try:
                            _send(conn, {"status": os.waitstatus_to_exitcode(status)})
                        except OSError:
                            pass
                        conn.close()
                else:  # a command's connection is readable only once the command is gone: stop its stage
                    selector.unregister(key.fileobj)
                    key.fileobj.close()
                    try:
                        os.killpg(key.data, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
    finally:
        if os.getpid() == server_pid:
            listener.close()
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    serve(sys.argv[1], tuple(sys.argv[2:]))
