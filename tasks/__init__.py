"""zhplm tasks: the Prefect tasks of the pipeline and the code they run.

Importing any ``tasks`` module first applies the offline defaults of
:mod:`tasks.core.environment`, so no module has to set them again.
"""

from tasks.core.environment import apply_defaults as _apply_defaults

_apply_defaults()
