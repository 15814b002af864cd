"""zhplm flows: one Prefect flow per pipeline stage (``python -m flows.<stage>``),
plus :mod:`flows.pipeline`, which runs the whole DVC stage graph as one flow."""

import tasks  # noqa: F401  (applies the offline environment before Prefect is imported)
from tasks.core.forkserver import delegate

# Under `make repro`, a stage command hands itself to the warm fork server here, before its
# module imports torch and Prefect, and exits with the stage's status (see forkserver).
delegate()
