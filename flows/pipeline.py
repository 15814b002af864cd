"""The whole pipeline as one Prefect flow, walking the stage graph of ``dvc.yaml``.

The DAG is declared once, in ``dvc.yaml``; this flow reads it through DVC's API
and runs each stage as a Prefect task (``dvc repro --single-item <stage>``), in
dependency order, so the Prefect UI shows every stage with its state, duration
and logs. A stage that failed on bad input or params (it printed ``error: ...``)
fails at once with that line as its message; any other failure (killed, out of
memory, crash) is retried once. DVC decides whether a stage's
dependencies changed; Prefect caching is off (``NO_CACHE``), so Prefect never
skips a stage DVC wants to rerun.

Usage::

    python -m flows.pipeline                       # run once
    python -m flows.pipeline serve --cron "0 2 * * *"   # serve on a schedule (needs a Prefect server)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import deque

import networkx as nx
from prefect import flow, get_run_logger
from prefect.deployments.runner import RunnerDeployment

from tasks.core.stage import stage_task

DEPLOYMENT = "nightly"


def stage_order(repo_root: str = ".") -> list[str]:
    """Stage names (``name`` or ``name@item``) of ``dvc.yaml`` in a deterministic dependency order."""
    from dvc.repo import Repo

    with Repo(repo_root) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        runnable = {s for s in graph.nodes if getattr(s, "cmd", None)}
        order = nx.lexicographical_topological_sort(graph.reverse(), key=lambda s: s.addressing)
        return [s.addressing for s in order if s in runnable]


class StageFailed(RuntimeError):
    """A stage failed; ``user_error`` when it reported bad input or params (``error: ...``),
    which a rerun would only repeat."""

    def __init__(self, message: str, user_error: bool):
        super().__init__(message)
        self.user_error = user_error


def repro_command(stage: str, force: bool = False) -> list[str]:
    return ["dvc", "repro", "--single-item", stage] + (["--force"] if force else [])


def run_logged(cmd: list[str], stage: str) -> None:
    """Run ``cmd``, streaming its output into the task log.

    Raises:
        StageFailed: it exited non-zero; the message holds the stage's ``error:``
            lines (see :func:`tasks.core.stage.run_stage`), else its last lines of output.
    """
    logger = get_run_logger()
    errors: list[str] = []
    tail: deque[str] = deque(maxlen=5)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        logger.info(line)
        if line.startswith("error: "):
            errors.append(line)
        elif line.strip():
            tail.append(line)
    if proc.wait() != 0:
        cause = " | ".join(errors or tail) or "no output"
        raise StageFailed(f"stage {stage} failed (exit status {proc.returncode}): {cause}", user_error=bool(errors))


def _transient(task, task_run, state) -> bool:
    """Retry condition: anything but a reported user error may pass on a second try."""
    return not (isinstance(state.data, StageFailed) and state.data.user_error)


@stage_task(retries=1, retry_delay_seconds=10, retry_condition_fn=_transient, task_run_name="{stage}")
def repro_stage(stage: str, force: bool = False) -> None:
    """``dvc repro --single-item <stage>``; DVC skips it when nothing it depends on changed.
    The stage's output is streamed into this task's log."""
    run_logged(repro_command(stage, force), stage)


@flow(name="pipeline")
def pipeline(force: bool = False) -> list[str]:
    """Run every stage of ``dvc.yaml`` in dependency order; returns the stage names."""
    stages = stage_order()
    get_run_logger().info(f"{len(stages)} stages: {', '.join(stages)}")
    for stage in stages:
        repro_stage(stage, force)
    return stages


def deployment(cron: str, name: str = DEPLOYMENT) -> RunnerDeployment:
    """The scheduled deployment of :func:`pipeline` (what ``serve`` registers)."""
    return pipeline.to_deployment(name=name, cron=cron, description="zhplm: dvc repro of the whole pipeline")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve the pipeline on a cron schedule (needs PREFECT_API_URL)")
    serve.add_argument("--cron", default="0 2 * * *", help="cron schedule (default: every night at 02:00)")
    serve.add_argument("--name", default=DEPLOYMENT)
    parser.add_argument("--force", action="store_true", help="rerun every stage even if unchanged")
    args = parser.parse_args(argv)
    if args.command == "serve":
        from prefect import serve as prefect_serve

        prefect_serve(deployment(args.cron, args.name))
    else:
        pipeline(args.force)


if __name__ == "__main__":
    main(sys.argv[1:])
