"""Imported by every Python process the end-to-end tests start (this folder is on their ``PYTHONPATH``):
with ``$ZHPLM_PARAMS_TRACE`` set, :mod:`tasks.core.params` is wrapped as it is first imported, so that
a stage records the params keys it reads (:mod:`params_trace`). Processes that never import it (``dvc``,
``git``) are left alone."""

import importlib.abc
import importlib.util
import os
import sys

TARGET = "tasks.core.params"


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds :data:`TARGET` with the other finders and wraps its loader's ``exec_module``."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # once: the real finders find it
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            execute = spec.loader.exec_module

            def exec_module(module):
                execute(module)
                import params_trace  # beside this file

                params_trace.install(module)

            spec.loader.exec_module = exec_module
        return spec


if os.environ.get("ZHPLM_PARAMS_TRACE"):
    sys.meta_path.insert(0, _WrapOnImport())
