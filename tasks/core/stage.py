"""What every stage script shares: Prefect task defaults and the command-line entry point."""

from __future__ import annotations

import sys
from typing import Callable

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks.core.environment import quiet_user_errors
from tasks.core.errors import PipelineError


def stage_task(fn: Callable | None = None, **options):
    """``prefect.task`` with caching off: DVC alone decides what reruns, so Prefect
    must never skip work DVC asked for, nor persist large in-memory results."""
    options = {"cache_policy": NO_CACHE, "persist_result": False, **options}
    return task(fn, **options) if fn is not None else task(**options)


def run_stage(flow: Callable, *args: str) -> None:
    """Run a stage's flow as a program: a :class:`PipelineError` (bad input or
    params) prints one ``error:`` line naming the culprit and exits with status 1."""
    quiet_user_errors()
    try:
        flow(*args)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
