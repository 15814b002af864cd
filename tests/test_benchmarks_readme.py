"""benchmarks/README.md is generated from benchmarks/results/*.json, so no figure is typed twice."""

import importlib.util
import re

from tests.conftest import ROOT


def test_benchmarks_readme_is_generated_from_the_results():
    spec = importlib.util.spec_from_file_location("summary", ROOT / "benchmarks" / "summary.py")
    summary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(summary)
    assert (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8") == summary.render()
    assert all(f"## {p.stem}" in summary.render() for p in (ROOT / "benchmarks" / "results").glob("*.json"))


# A duration typed in prose goes stale with the next run; the docs point at the generated tables
# instead (the report's Run times, study.json, benchmarks/README.md). Settings (timeouts) are not run times.
DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?\s*(?:min|mins|minutes?|hours?|h|s|sec|seconds?)\b")
SETTINGS = {"docs/reproducibility.md": ["within 30 s"]}  # check_rendezvous's timeout (tasks/training/distributed.py)


def test_docs_type_no_run_time():
    typed = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        for setting in SETTINGS.get(rel, []):
            assert setting in text, f"{rel}: the allowed setting {setting!r} is gone; drop it from SETTINGS"
            text = text.replace(setting, "")
        typed += [f"{rel}: {m.group(0)!r}" for m in DURATION.finditer(text)]
    assert typed == []
