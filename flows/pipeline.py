"""The whole pipeline as one Prefect flow, walking the stage graph of ``dvc.yaml``.

The DAG is declared once, in ``dvc.yaml``; this flow reads it through DVC's API
and runs each stage as a Prefect task (``dvc repro --single-item <stage>``), in
dependency order, so the Prefect UI shows every stage with its state, duration
and logs, and a failed stage is retried. DVC decides whether a stage's
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


@stage_task(retries=1, retry_delay_seconds=10, task_run_name="{stage}")
def repro_stage(stage: str, force: bool = False) -> None:
    """``dvc repro --single-item <stage>``; DVC skips it when nothing it depends on changed.
    The stage's output is streamed into this task's log."""
    logger = get_run_logger()
    cmd = ["dvc", "repro", "--single-item", stage] + (["--force"] if force else [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        logger.info(line.rstrip())
    if proc.wait() != 0:
        raise RuntimeError(f"stage {stage} failed (dvc repro exit status {proc.returncode})")


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
