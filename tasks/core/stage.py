"""What every stage script shares: Prefect task defaults and the command-line entry point."""

from __future__ import annotations

import _thread
import gc
import inspect
import logging
import os
import signal
import sys
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from typing import Callable, Iterator

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.environment import quiet_user_errors
from tasks.core.errors import PipelineError, user_error
from tasks.core.lifetime import die_with_parent


def stage_task(fn: Callable | None = None, **options):
    """``prefect.task`` with caching off: DVC alone decides what reruns, so Prefect
    must never skip work DVC asked for, nor persist large in-memory results."""
    options = {"cache_policy": NO_CACHE, "persist_result": False, **options}
    return task(fn, **options) if fn is not None else task(**options)


def run_logger() -> logging.Logger | logging.LoggerAdapter:
    """The Prefect run logger of the running flow or task; outside one (a test, a benchmark,
    a worker process's caller), the module's standard logger."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


WATCH_EVERY, WATCH_MISSES = 5.0, 3  # seconds between health checks; misses in a row that stop the stage


def _answers(url: str, timeout: float) -> bool:
    """Whether anything answers HTTP at ``url``'s ``/health`` (any status counts: only the connection matters)."""
    try:
        urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        pass
    except (OSError, ValueError):  # URLError, refused, timed out, malformed URL
        return False
    return True


def check_prefect_api(timeout: float = 3.0) -> None:
    """Fail fast when ``PREFECT_API_URL`` names a server that does not answer (Prefect
    would otherwise fail deep inside the flow with a connection traceback). Unset, the
    flow starts a temporary server of its own. Any HTTP answer counts: only the
    connection matters here.

    Raises:
        PipelineError: nothing answers at the URL.
    """
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url and not _answers(url, timeout):
        raise PipelineError(f"no Prefect server answers at {url} (unset PREFECT_API_URL to use a temporary one, "
                            "or start one with `prefect server start`)")


@contextmanager
def server_watched() -> Iterator[list[str]]:
    """While the stage runs, check every :data:`WATCH_EVERY` s that the Prefect server of ``PREFECT_API_URL``
    still answers; after :data:`WATCH_MISSES` misses in a row, interrupt the stage (Ctrl-C's way: its
    temporaries are removed, a pretraining's checkpoint stays) and put the reason in the yielded list; if it
    has not stopped 2 checks later (Prefect retrying to report the failure), end the process with that line.
    Without it, a server dying mid-stage surfaced minutes later as Prefect's client gave up its retries, as a
    200-line httpx traceback."""
    from prefect.settings import PREFECT_API_URL

    url, lost, done = PREFECT_API_URL.value(), [], threading.Event()

    def watch() -> None:
        misses = 0
        while not done.wait(WATCH_EVERY):
            misses = 0 if _answers(url, timeout=WATCH_EVERY) else misses + 1
            if misses == WATCH_MISSES:
                lost.append(_lost(url))
                _thread.interrupt_main(signal.SIGUSR1)  # not SIGINT: a background job ignores it, and so its stage
                if not done.wait(WATCH_EVERY * 2):  # a Prefect flow reports its failure to the dead server first,
                    print(f"error: {lost[0]}", file=sys.stderr, flush=True)  # retrying for minutes: stop it as a
                    os._exit(1)  # kill would (its temporaries go at the next run; a checkpoint stays)
                return

    def stop(signum, frame):
        raise PipelineError(lost[0])  # unwinds like Ctrl-C: temporaries removed, a checkpoint kept

    watcher = threading.Thread(target=watch, name="prefect-server-watch", daemon=True) if url else None
    previous = signal.signal(signal.SIGUSR1, stop) if watcher else None
    if watcher:
        watcher.start()
    try:
        yield lost
    except BaseException:
        if not lost and url and not _answers(url, timeout=3.0):  # the flow failed on the dead server first
            lost.append(_lost(url))
        raise
    finally:
        done.set()
        if watcher:
            signal.signal(signal.SIGUSR1, previous)


@contextmanager
def no_heartbeats() -> Iterator[None]:
    """Prefect's flow-run heartbeats off for the stage: its heartbeat thread sleeps in 1 s steps and the
    flow joins it on exit, 0.5-1 s of every stage (a one-task flow: 1.22 s with them, 0.22 s without,
    ``benchmarks/stage_overhead.py``). They only serve a server-side automation that marks silent runs
    crashed, which this project does not install; a stage whose process dies is failed by DVC and the
    pipeline flow."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield


def _lost(url: str) -> str:
    return (f"the Prefect server at {url} stopped answering during the stage; restart it (`make repro` starts "
            "one) and rerun (a pretraining resumes from its checkpoint)")


def usage(flow: Callable) -> str:
    """The stage's usage line, ``usage: python -m flows.<stage> ARG ...`` (``[ARG]`` for one with a default),
    then the first paragraph of its module's docstring."""
    fn = getattr(flow, "fn", flow)
    main = sys.modules.get(fn.__module__)
    spec = getattr(main, "__spec__", None)
    program = f"python -m {spec.name}" if spec else os.path.basename(sys.argv[0])
    names = [p.name.upper() if p.default is inspect.Parameter.empty else f"[{p.name.upper()}]"
             for p in inspect.signature(fn).parameters.values()]
    about = (inspect.getdoc(main) or "").split("\n\n")[0]
    return f"usage: {program} {' '.join(names)}".rstrip() + (f"\n\n{about}" if about else "")


def _check_arguments(flow: Callable, args: tuple) -> None:
    """``--help``/``-h``: print :func:`usage` and exit 0; arguments the flow cannot take: the reason and the
    usage on stderr, exit 2 (as argparse does); else return."""
    if any(a in ("-h", "--help") for a in args if isinstance(a, str)):
        print(usage(flow))
        sys.exit(0)
    try:
        inspect.signature(getattr(flow, "fn", flow)).bind(*args)
    except TypeError as exc:
        print(f"error: {exc}\n{usage(flow)}", file=sys.stderr)
        sys.exit(2)


def run_stage(flow: Callable, *args: str, memory: str | None = None,
              prepare: Callable[[list[str]], None] | None = None) -> None:
    """Run a stage's flow as a program, ``flow(*args)``, as a Prefect flow run named after the stage and its
    arguments (``finetune mlm-42 sentiment``). ``--help`` prints its usage (:func:`usage`); arguments it
    cannot take are one line and the usage, status 2. A :class:`PipelineError` (bad input or
    params, an unreachable Prefect server, at the start or later: :func:`server_watched`),
    a full disk or memory run out (:func:`tasks.core.errors.user_error`; ``memory``: the params
    that size the stage's memory, named in that line) prints one ``error:`` line naming the
    culprit and exits with status 1. ``prepare(args)`` runs before the flow, inside that handling (a training
    stage's checks and its ``torchrun`` relaunch)."""
    _check_arguments(flow, args)
    quiet_user_errors()
    die_with_parent()  # a stage never outlives the command that started it (dvc repro, a shell)
    # What the stage has imported (torch, transformers, Prefect: millions of objects) is never
    # garbage: left out of every collection, the one at interpreter exit included, it saves
    # 1-2 s of each stage (gc.freeze moves them to a permanent generation that collections skip).
    gc.freeze()
    if hasattr(flow, "with_options"):  # a Prefect flow: its run named after the stage, not at random
        name = " ".join([flow.name, *map(str, args)])
        flow = flow.with_options(flow_run_name=lambda: name)
    try:
        check_prefect_api()
        if prepare is not None:
            prepare(list(args))
        lost: list[str] = []
        try:
            with server_watched() as lost, no_heartbeats():
                flow(*args)
        except BaseException:
            if lost:  # the watch interrupted the flow, or the flow failed on the dead server first
                raise PipelineError(lost[0]) from None
            raise
    except Exception as exc:  # a user error, a full disk or no memory left: one line, not a library's traceback
        error = user_error(exc, memory)
        if error is None:
            raise
        print(f"error: {error}", file=sys.stderr)
        sys.exit(1)
