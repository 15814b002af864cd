"""The one place where the pipeline's process environment is set.

Every process of the pipeline (DVC stage, Prefect flow, test) imports this module
before any third-party library, through ``tasks/__init__.py``. It makes the
default run offline and hermetic: no hub downloads, no telemetry, and Prefect
settings that work on a small CPU machine. Values are *defaults*: a variable
already set in the environment wins, so ``HF_HUB_OFFLINE=0 dvc repro`` lets an
online user load hub models and datasets.
"""

from __future__ import annotations

import logging
import os

OFFLINE_DEFAULTS = {
    # Hugging Face: never reach the hub unless the user opts in.
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_VERBOSITY": "error",
    "TOKENIZERS_PARALLELISM": "false",
    # Prefect 3 (see shared STACK notes): telemetry off, a start-up timeout that
    # fits a 2-core machine, no network calls for the temporary local server.
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_UI_SHOW_PROMOTIONAL_CONTENT": "false",
    # DVC, when called through its Python API.
    "DVC_NO_ANALYTICS": "1",
    "DVC_NO_UPDATE_CHECK": "1",
}


def apply_defaults() -> None:
    """Set every variable of :data:`OFFLINE_DEFAULTS` that is not set yet."""
    for name, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(name, value)


class _UserErrorTracebackFilter(logging.Filter):
    """Drop the traceback from log records about a user error (:func:`tasks.core.errors.user_error`).

    Prefect logs every failed task and flow with ``exc_info``; for a user error
    (bad input, bad params, no space or memory left) the message alone is the useful part.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        from tasks.core.errors import user_error

        error = record.exc_info[1] if record.exc_info else None
        if error is not None and user_error(error) is not None:
            record.exc_info = None
            record.exc_text = None
        return True


def quiet_user_errors() -> None:
    """Install :class:`_UserErrorTracebackFilter` on Prefect's log handlers."""
    flt = _UserErrorTracebackFilter()
    for name in ("prefect", "prefect.flow_runs", "prefect.task_runs"):
        for handler in logging.getLogger(name).handlers:
            handler.addFilter(flt)
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
