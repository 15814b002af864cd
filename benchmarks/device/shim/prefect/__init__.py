"""A stand-in for Prefect on the device machine, whose image lacks it (and its ~40 MiB of
dependencies would not fit the 64 MiB the device tool carries). Only what the training stages
touch: ``flow`` and ``task`` run the function itself, ``get_run_logger`` is a standard logger.
Orchestration is not what a GPU check measures; CI runs the real Prefect on CPU.
Put on ``PYTHONPATH`` by ``benchmarks/device/run.sh`` only."""

import functools
import logging

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")


def _decorator(fn=None, **_options):
    def wrap(f):
        @functools.wraps(f)
        def run(*args, **kwargs):
            return f(*args, **kwargs)
        run.fn = f
        return run
    return wrap(fn) if fn is not None else wrap


flow = task = _decorator


def get_run_logger() -> logging.Logger:
    return logging.getLogger("prefect")
