"""Serving deployments so that stopping the server stops its runs, in the processes and in the Prefect UI.

``prefect.serve`` exits on SIGTERM (or Ctrl-C) leaving the flow runs it started behind: their processes keep
running (``dvc repro`` and a stage, with no one to report to) and their state stays *Running* in the UI for
good. :func:`serve` ends them with it.
"""

from __future__ import annotations

import psutil
from prefect.deployments.runner import RunnerDeployment

GRACE_SEC = 10.0
"""How long a run's processes have to stop on SIGTERM (a stage cleans up) before SIGKILL."""
STOPPED = "the served deployment was stopped while this run was going"


def serve(*deployments: RunnerDeployment) -> None:
    """``prefect.serve(*deployments)`` until it stops; then every process it started is ended (SIGTERM, SIGKILL
    after :data:`GRACE_SEC`) and each of its runs still *Running* or *Pending* is marked *Cancelled*
    (:func:`cancel_runs`)."""
    from prefect import serve as prefect_serve

    try:
        prefect_serve(*deployments)
    finally:
        children = psutil.Process().children(recursive=True)
        for child in children:
            try:
                child.terminate()
            except psutil.NoSuchProcess:
                pass
        for child in psutil.wait_procs(children, timeout=GRACE_SEC)[1]:
            try:
                child.kill()
            except psutil.NoSuchProcess:
                pass
        cancel_runs(deployments)


def cancel_runs(deployments: tuple[RunnerDeployment, ...]) -> list[str]:
    """Mark the runs of ``deployments`` that are *Running* or *Pending* as *Cancelled* (:data:`STOPPED`);
    returns their names."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterName, FlowFilter, FlowFilterName,
                                                FlowRunFilter, FlowRunFilterState, FlowRunFilterStateType)
    from prefect.client.schemas.objects import StateType
    from prefect.states import Cancelled

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[d.flow_name for d in deployments])),
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[d.name for d in deployments])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(
                any_=[StateType.RUNNING, StateType.PENDING]))))
        for run in runs:
            client.set_flow_run_state(run.id, Cancelled(message=STOPPED), force=True)
    return [run.name for run in runs]
