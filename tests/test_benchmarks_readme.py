"""benchmarks/README.md is generated from benchmarks/results/*.json, so no figure is typed twice."""

import importlib.util

from tests.conftest import ROOT


def test_benchmarks_readme_is_generated_from_the_results():
    spec = importlib.util.spec_from_file_location("summary", ROOT / "benchmarks" / "summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    assert (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8") == summary.render()
    assert all(f"## {p.stem}" in summary.render() for p in (ROOT / "benchmarks" / "results").glob("*.json"))
