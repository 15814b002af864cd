"""Which keys of ``params.yaml`` a stage reads: the check behind its DVC ``params`` deps.

The end-to-end tests put this folder on ``PYTHONPATH`` and name a file in ``$ZHPLM_PARAMS_TRACE``;
its ``sitecustomize`` then has :func:`tasks.core.params.load_params` hand back params that record
every field the stage reads after validation (a scalar, a list, or a whole block through
``model_dump``), and the process appends one JSON line at exit::

    {"module": "flows.finetune", "args": ["mlm", "sentiment"], "keys": ["finetune.training", ...]}

The end-to-end test compares these keys with the params each stage declares in ``dvc.yaml``,
both ways (:func:`compare`), so a stage neither misses a key that changes its result nor reruns
for one it never reads. Nothing of this is in the pipeline's own code.

``model`` is resolved from ``model_presets`` at load time, so a read of ``model.X`` is reported
as ``model.preset`` plus the leaf it came from: ``model.X`` if ``params.yaml`` overrides it,
else ``model_presets.<preset>.X``.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

from pydantic import BaseModel

ENV = "ZHPLM_PARAMS_TRACE"


def _walk(value: Any, path: str, paths: dict[int, tuple[str, frozenset[str]]], in_list: bool = False) -> None:
    """Map the id of every model under ``value`` to its dotted path (and no replaced field). A model
    in a list has the list's path with a trailing ``[]``: any read of it reads the list (one leaf)."""
    if isinstance(value, BaseModel):
        paths[id(value)] = (path + "[]" if in_list else path), frozenset()
        for name in type(value).model_fields:
            _walk(getattr(value, name), f"{path}.{name}" if path else name, paths, in_list)
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}.{key}", paths, in_list)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _walk(item, path, paths, True)


def _holds_models(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
    return any(isinstance(v, BaseModel) for v in items)


def start(params: BaseModel, raw: dict, base: type[BaseModel]) -> None:
    """Record, from now on, the fields of ``params`` read through models derived from ``base``;
    ``raw`` is the file as loaded (for where ``model``'s fields came from). A copy made with
    ``model_copy(update=...)`` reads as its original, except the fields the update replaced."""
    paths: dict[int, tuple[str, frozenset[str]]] = {}
    _walk(params, "", paths)
    read: set[str] = set()
    copies: list[BaseModel] = []  # kept alive, so that no other object takes a copy's id
    get, dump, copy = base.__getattribute__, base.model_dump, base.model_copy

    def getattribute(self, name):
        value = get(self, name)
        path, replaced = paths.get(id(self), (None, ()))
        if path is not None and name in type(self).model_fields and name not in replaced \
                and not _holds_models(value):
            read.add(path.removesuffix("[]") if path.endswith("[]") else f"{path}.{name}" if path else name)
        return value

    def model_dump(self, *args, exclude=None, **kwargs):
        path, replaced = paths.get(id(self), (None, ()))
        if path and path.endswith("[]"):
            read.add(path.removesuffix("[]"))
        elif path is not None:
            skip = set(replaced) | set(exclude or ())
            read.update(f"{path}.{name}" if path else name for name in type(self).model_fields if name not in skip)
        return dump(self, *args, exclude=exclude, **kwargs)

    def model_copy(self, *args, update=None, **kwargs):
        result = copy(self, *args, update=update, **kwargs)
        if id(self) in paths:
            path, replaced = paths[id(self)]
            paths[id(result)] = path, replaced | frozenset(update or ())
            copies.append(result)
        return result

    base.__getattribute__, base.model_dump, base.model_copy = getattribute, model_dump, model_copy
    atexit.register(_write, read, raw)


def install(params_module) -> None:
    """Wrap ``params_module.load_params`` (:mod:`tasks.core.params`, just imported) so that the params
    it returns record what is read (:func:`start`)."""
    import yaml

    load = params_module.load_params

    def load_params(path=params_module.PARAMS_FILE):
        params = load(path)
        start(params, yaml.safe_load(open(path, encoding="utf-8")), params_module._Strict)
        return params

    params_module.load_params = load_params


def _source(key: str, raw: dict) -> list[str]:
    """The keys of ``params.yaml`` behind a read of ``key`` (module docstring: ``model``)."""
    head, _, rest = key.partition(".")
    if head != "model" or not isinstance(raw.get("model"), dict) or "preset" not in raw["model"]:
        return [key]
    if not rest or rest.split(".")[0] in raw["model"]:
        return ["model.preset", key]
    return ["model.preset", f"model_presets.{raw['model']['preset']}.{rest}"]


def _write(read: set[str], raw: dict) -> None:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    record = {"module": spec.name if spec else sys.argv[0], "args": sys.argv[1:],
              "keys": sorted({k for key in read for k in _source(key, raw)})}
    with open(os.environ[ENV], "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def leaves(raw: dict, prefix: str = "") -> set[str]:
    """The dotted keys of the scalars and lists of ``raw`` (a list is one leaf)."""
    out: set[str] = set()
    for key, value in raw.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        out |= leaves(value, path) if isinstance(value, dict) and value else {path}
    return out


def _under(keys: set[str], all_leaves: set[str]) -> set[str]:
    return {leaf for leaf in all_leaves for key in keys if leaf == key or leaf.startswith(key + ".")}


# Keys that by design never change a byte of any output (tests/test_shards.py checks it), so no
# stage declares them though the data stages read them: where the shards run.
NEUTRAL = ("executor",)

# The options of an objective that only pretrain reads (its heads and its budget). pretraining_data
# declares its objective's whole block, since DVC can declare neither a block but some of its keys
# nor a key an objective leaves out; so an edit of these reruns that objective's data stage too,
# whose bytes they never change (seconds of work), and nothing after it that they do not touch.
PRETRAIN_ONLY = ("sbo", "rtd", "budget", "permutation.space", "permutation.targets")
# The keep share, which the masking never reads: it is what the other shares leave (params check that
# they sum to 1), so it changes only with one of them.
IMPLIED = ("replacement.keep",)


def compare(declared: set[str], read: set[str], raw: dict, unread_ok: set[str] = frozenset()
            ) -> tuple[set[str], set[str]]:
    """``(missing, over_broad)``: the leaves of ``params.yaml`` a stage reads that its declared
    params do not cover, and the leaves they cover that it never reads (:data:`NEUTRAL` and the
    keys under ``unread_ok`` aside)."""
    all_leaves = {leaf for leaf in leaves(raw) if leaf.split(".")[0] not in NEUTRAL}
    declared_leaves, read_leaves = _under(declared, all_leaves), _under(read, all_leaves)
    return read_leaves - declared_leaves, declared_leaves - read_leaves - _under(set(unread_ok), all_leaves)
