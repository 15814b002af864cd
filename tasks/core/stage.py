"""What every stage script shares: Prefect task defaults and the command-line entry point."""

from __future__ import annotations

import gc
import logging
import sys
import urllib.error
import urllib.request
from typing import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.environment import quiet_user_errors
from tasks.core.errors import PipelineError, disk_full
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
    if not url:
        return
    try:
        urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout).close()
    except urllib.error.HTTPError:
        pass
    except (OSError, ValueError):  # URLError, refused, timed out, malformed URL
        raise PipelineError(f"no Prefect server answers at {url} (unset PREFECT_API_URL to use a temporary one, "
                            "or start one with `prefect server start`)") from None


def run_stage(flow: Callable, *args: str) -> None:
    """Run a stage's flow as a program: a :class:`PipelineError` (bad input or
    params, an unreachable Prefect server) prints one ``error:`` line naming the
    culprit and exits with status 1."""
    quiet_user_errors()
    die_with_parent()  # a stage never outlives the command that started it (dvc repro, a shell)
    # What the stage has imported (torch, transformers, Prefect: millions of objects) is never
    # garbage: left out of every collection, the one at interpreter exit included, it saves
    # 1-2 s of each stage (gc.freeze moves them to a permanent generation that collections skip).
    gc.freeze()
    try:
        check_prefect_api()
        flow(*args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:  # a full disk anywhere the stage wrote: one line, not a library's traceback
        full = disk_full(exc)
        if full is None:
            raise
        print(f"error: {full}", file=sys.stderr)
        sys.exit(1)
