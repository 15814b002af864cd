"""The whole pipeline as one Prefect flow, walking the stage graph of ``dvc.yaml``.

Each stage runs as a Prefect task in dependency order (:mod:`tasks.orchestration.repro`);
DVC decides which stages rerun. ``python -m flows.pipeline`` runs it once;
``python -m flows.pipeline serve --cron "0 2 * * *"`` serves it on a schedule (needs a Prefect server).
"""

from __future__ import annotations

import argparse
import sys

from prefect import flow, get_run_logger
from prefect.client.schemas.objects import ConcurrencyLimitConfig, ConcurrencyLimitStrategy
from prefect.deployments.runner import RunnerDeployment

from tasks.core.stage import run_stage
from tasks.orchestration.repro import repro_stage, stage_order
from tasks.orchestration.serving import serve

DEPLOYMENT = "nightly"


@flow(name="pipeline")
def pipeline(force: bool = False) -> list[str]:
    """Run every stage of ``dvc.yaml`` in dependency order; returns the stage names."""
    stages = stage_order()
    get_run_logger().info(f"{len(stages)} stages: {', '.join(stages)}")
    for stage in stages:
        repro_stage(stage, force)
    return stages


def deployment(cron: str, name: str = DEPLOYMENT) -> RunnerDeployment:
    """The scheduled deployment of :func:`pipeline` (what ``serve`` registers): one run at a time, a run
    scheduled while one is still going is cancelled (both would ``dvc repro`` one workspace, and the one
    going will have done what the new one asks)."""
    return pipeline.to_deployment(name=name, cron=cron, description="zhplm: dvc repro of the whole pipeline",
                                  concurrency_limit=ConcurrencyLimitConfig(
                                      limit=1, collision_strategy=ConcurrencyLimitStrategy.CANCEL_NEW))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="serve the pipeline on a cron schedule (needs PREFECT_API_URL)")
    serve.add_argument("--cron", default="0 2 * * *", help="cron schedule (default: every night at 02:00)")
    serve.add_argument("--name", default=DEPLOYMENT)
    parser.add_argument("--force", action="store_true", help="rerun every stage even if unchanged")
    args = parser.parse_args(argv)
    if args.command == "serve":
        serve(deployment(args.cron, args.name))  # stopped, it cancels its runs in flight
    else:
        pipeline(args.force)


if __name__ == "__main__":
    run_stage(main, sys.argv[1:])  # a failed stage ends it with that stage's one line, not a traceback
