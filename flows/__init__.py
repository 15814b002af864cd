"""zhplm flows: one Prefect flow per pipeline stage (``python -m flows.<stage>``),
plus :mod:`flows.pipeline`, which runs the whole DVC stage graph as one flow."""

import tasks  # noqa: F401  (applies the offline environment before Prefect is imported)
