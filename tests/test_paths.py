"""Artifact paths have one source of truth, dvc.yaml: the constants of tasks/core/paths.py and
the file of each metrics model are checked against the outputs and metrics it declares."""

import re
from fnmatch import fnmatchcase
from pathlib import Path

import yaml

from tasks.core import paths
from tasks.core.metrics.registry import MODELS
from tests.conftest import ROOT


def _declared() -> tuple[set[str], set[str]]:
    """(outs, metrics) of every stage of dvc.yaml, with each ``${...}`` as ``*``."""
    outs, metrics = set(), set()
    for stage in yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"].values():
        body = stage.get("do", stage)
        for kind, found in (("outs", outs), ("metrics", metrics), ("plots", metrics)):
            for entry in body.get(kind, []):
                found.add(re.sub(r"\$\{[^}]+\}", "*", entry if isinstance(entry, str) else next(iter(entry))))
    return outs, metrics


def test_each_metrics_model_file_is_a_declared_metrics_file():
    _, metrics = _declared()
    files = {"metrics/" + re.sub(r"<[^>]+>", "*", model.file) for model in MODELS.values()}
    declared_json = {m for m in metrics if m.endswith(".json")}
    # each declared file is an instance of exactly one model's (finetune's four stages name <model> each its way)
    assert all(sum(fnmatchcase(d, f) for f in files) == 1 for d in declared_json), declared_json
    assert all(any(fnmatchcase(d, f) for d in declared_json) for f in files), files


def test_stage_metrics_paths_are_the_declared_ones():
    _, metrics = _declared()
    for model in MODELS.values():
        item = re.sub(r"<[^>]+>", "*", model.file.split("/", 1)[1].removesuffix(".json")) if "/" in model.file else None
        assert str(paths.stage_metrics(model.kind(), item)) in metrics, model.file


def test_every_artifact_path_constant_is_declared_by_a_stage():
    outs, metrics = _declared()
    declared = outs | metrics

    def matches(path: str, pattern: str) -> bool:
        return re.fullmatch(re.escape(pattern).replace(r"\*", "[^/]+"), path) is not None

    files = {name: value for name, value in vars(paths).items() if isinstance(value, Path) and name.isupper()}
    assert files
    for name, path in files.items():
        if name in ("METRICS", "CHECKPOINTS", "REPORTS", "MODELS"):  # folders of several stages, or none
            assert name == "CHECKPOINTS" or any(d.startswith(f"{path}/") for d in declared), name
            continue
        exact = any(matches(str(path), d) for d in declared)
        folder = any(d.startswith(f"{path}/") for d in declared)
        assert exact or folder, f"paths.{name} = {path} is no output of dvc.yaml"
    assert str(paths.eval_texts("t")) == "data/eval_texts/t.parquet"
    assert str(paths.downstream_split("t", "train")) == "data/downstream/t/train.parquet"
