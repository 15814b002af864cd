"""benchmarks/README.md is generated from benchmarks/results/*.json, so no figure is typed twice."""

import importlib.util
import re
import subprocess

import pytest

from tests.conftest import ROOT


@pytest.fixture
def summary():
    """benchmarks/summary.py (not a package module)."""
    spec = importlib.util.spec_from_file_location("summary", ROOT / "benchmarks" / "summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_readme_is_generated_from_the_results(summary):
    committed, rendered = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8"), summary.render()
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], capture_output=True, text=True,
                             cwd=ROOT).stdout.strip() != "false"
    if shallow:  # without history no result can be dated against its code: compare the rest
        committed, rendered = (re.sub(r"\*\*Older than .*\n\n", "", t) for t in (committed, rendered))
    assert committed == rendered
    assert all(f"## {p.stem}" in rendered for p in (ROOT / "benchmarks" / "results").glob("*.json"))


def test_a_result_is_marked_older_than_the_code_it_measures_once_that_code_changes(summary, tmp_path, monkeypatch):
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "__init__.py").write_text("")
    (tmp_path / "tasks" / "heart.py").write_text("X = 1\n")
    (tmp_path / "tasks" / "other.py").write_text("Y = 1\n")
    (tmp_path / "benchmarks" / "b.py").write_text("from tasks.heart import X\n")
    result = tmp_path / "benchmarks" / "results" / "b.json"
    result.write_text("{}")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    commit = lambda: subprocess.run([*git, "commit", "-qam", "x"], cwd=tmp_path, check=True)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    commit()
    monkeypatch.setattr(summary, "ROOT", tmp_path)
    monkeypatch.setattr(summary, "HERE", tmp_path / "benchmarks")
    assert summary.changed_since(result, "b") == []
    (tmp_path / "tasks" / "other.py").write_text("Y = 2\n")  # code the benchmark does not run
    commit()
    assert summary.changed_since(result, "b") == []
    (tmp_path / "tasks" / "heart.py").write_text("X = 2\n")
    commit()
    assert summary.changed_since(result, "b") == ["tasks/heart.py"]
    result.write_text('{"rerun": true}')  # figures taken again, committed with the change
    commit()
    assert summary.changed_since(result, "b") == []


# A duration typed in prose goes stale with the next run; the docs point at the generated tables
# instead (the report's Run times, study.json, benchmarks/README.md). Settings (timeouts) are not run times.
DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?"
                      r"\s*(?:min|mins|minutes?|hours?|h|s|sec|seconds?)\b")
SETTINGS = {"docs/reproducibility.md": ["within 30 s"],  # check_rendezvous's timeout (tasks/training/distributed.py)
            "docs/running.md": ["a target of 30 minutes"]}  # the default run's target, not a measurement


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
