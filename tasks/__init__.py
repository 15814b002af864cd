"""zhplm tasks: the Prefect tasks of the pipeline and the code they run.

Importing any ``tasks`` module first applies the offline defaults of
:mod:`tasks.environment`, so no module has to set them again.
"""

from tasks.environment import apply_defaults as _apply_defaults

_apply_defaults()
