"""benchmarks/README.md is generated from benchmarks/results/*.json, so no figure is typed twice."""

import importlib.util
import json
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


def test_every_result_names_its_commit_and_is_newer_than_the_code_it_measures(summary):
    """Evidence cannot go stale silently: a CPU result (``make bench`` on a machine like CI's) must name the
    commit it was taken at and no file it runs may have changed in a later commit (rerun it with the change,
    commit both). A GPU result can only be retaken where a GPU is lent, and a long one (``summary.LONG``) in a
    stop with the time for it: a stale one is named in this test's skip and marked in benchmarks/README.md."""
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], capture_output=True, text=True,
                             cwd=ROOT).stdout.strip() != "false"
    if shallow:
        pytest.skip("a shallow clone cannot date a result against its code")
    stale, later = [], []
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        result = json.loads(path.read_text(encoding="utf-8"))
        changed = summary.changed_since(path, result["benchmark"])
        why = ("no commit recorded" if not result.get("commit") or result["commit"].endswith("-dirty")
               else f"older than {', '.join(changed)}" if changed else None)
        if why:  # a GPU result waits for a GPU; a long one (summary.LONG) for a stop with the time, never unmarked
            wait = result["machine"].get("gpu") or (result["benchmark"] in summary.LONG and why != "no commit recorded")
            (later if wait else stale).append(f"{path.stem}: {why}")
    assert stale == [], "rerun these benchmarks and commit their results with the code (make bench)"
    if later:
        pytest.skip(f"results to retake (a GPU one on a GPU, make gpu-check; a long one in a stop with the time, "
                    f"benchmarks/summary.py LONG): {'; '.join(later)}")


# A figure typed in prose goes stale with the next run: measured durations, shares, ratios and score
# comparisons come from generated tables instead (the report, study.json, benchmarks/README.md,
# docs/params.md). What prose may type: settings and definitions (an objective's shares, an interval's
# level, a gate's or a test's threshold) and published figures quoted with their source.
DURATION = re.compile(r"\b\d+(?:\.\d+)?(?:\s*(?:-|–|to)\s*\d+(?:\.\d+)?)?"
                      r"\s*(?:min|mins|minutes?|hours?|h|s|sec|seconds?)\b")
FIGURE = re.compile(r"(?<![\w.§/])\d+(?:\.\d+)?(?:\s*[-–]\s*\d+(?:\.\d+)?)?\s*(?:%|x\b|×)"  # shares, ratios
                    r"|\b\d+\.\d+\s*(?:vs\.?|against|→)\s*\d+\.\d+")  # score against score
DEFINITION = re.compile(r"\s*(?:interval|power|bands|\[MASK\]|random|kept|similar word|permuted|a same-pinyin|"
                        r"of the maskable|of single tokens|test split|of each language|below the base|and PerLM)")
SETTINGS = {"docs/reproducibility.md": ["within 30 s"],  # check_rendezvous's timeout (tasks/training/distributed.py)
            "docs/running.md": ["a target of 30 minutes",  # the default run's target, not a measurement
                                "the 40-50% MFU",  # NVIDIA's and MosaicML's published BERT recipes
                                "a 4 × 512"],  # a model's shape
            "docs/objectives.md": ["64.16 vs 63.49"],  # PERT's §6, quoted
            "docs/statistics.md": ["rate ≤ 7%", "coverage ≥ 93%", "about 80% at",  # tests/test_statistics.py's bounds
                                   "(5 × 3 runs"]}  # the simulated design


def typed_figures(rel: str, text: str) -> list[str]:
    """The durations and measured figures typed in ``text`` (file ``rel``), settings and definitions aside."""
    for setting in SETTINGS.get(rel, []):
        assert setting in text, f"{rel}: the allowed setting {setting!r} is gone; drop it from SETTINGS"
        text = text.replace(setting, "")
    return [f"{rel}: {m.group(0)!r}" for m in DURATION.finditer(text)] + \
        [f"{rel}: {m.group(0)!r}" for m in FIGURE.finditer(text) if not DEFINITION.match(text, m.end())]


def test_docs_type_no_run_time_or_measured_figure():
    typed = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        typed += typed_figures(path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8"))
    assert typed == []
    planted = "Packing fills 81% of a sequence, 1.31x the tokens per step (F1 54.8 vs 53.7), in 12 min."
    assert typed_figures("docs/x.md", planted) == ["docs/x.md: '12 min'", "docs/x.md: '81%'", "docs/x.md: '1.31x'",
                                                   "docs/x.md: '54.8 vs 53.7'"]
