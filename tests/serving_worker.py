"""A served deployment (``python tests/serving_worker.py <name>``) of a flow whose run holds a child process
started as the nightly pipeline starts ``dvc repro`` (:func:`tasks.orchestration.repro.run_logged`): what
tests/test_serving.py stops."""

import sys

from prefect import flow

from tasks.orchestration.repro import run_logged
from tasks.orchestration.serving import serve


@flow(name="sleepy")
def sleepy(seconds: float = 300) -> None:
    run_logged(["sleep", str(seconds)], "sleepy")


if __name__ == "__main__":
    serve(sleepy.to_deployment(name=sys.argv[1]))
