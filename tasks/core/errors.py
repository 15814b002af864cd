"""User-facing errors.

A :class:`PipelineError` means bad input or bad parameters, not a bug: stages
report it as one line (``error: <message>``) and exit non-zero, without a
traceback. Its message names the file, line, record or parameter at fault.
"""


class PipelineError(Exception):
    """Bad input data or parameters; the message says which and what is wrong."""


class SourceError(PipelineError):
    """A corpus or dataset source is missing, corrupt or unreadable."""


class ParamsError(PipelineError):
    """``params.yaml`` holds a value the pipeline cannot run with."""


class MetricsError(PipelineError):
    """A metrics file (``metrics/``) does not match its model in :mod:`tasks.core.metrics`."""
