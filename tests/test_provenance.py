"""Report section "What changed since the last commit": each score's change with its 95% interval
over the fine-tuning seeds (Welch), and a verdict from it."""

import pytest

from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.core.params import load_params
from tasks.report import provenance
from tests.conftest import ROOT

FIT = {"steps": 10, "examples": 320, "train_loss": 0.5, "wall_sec": 1.0, "examples_per_sec": 320.0}
PARAMS = load_params(ROOT / "params.yaml")
TRAINING = PARAMS.finetune.for_task(PARAMS.task("lcqmc"))  # the knobs a run records


def summary(*scores: float) -> dict:
    mean = sum(scores) / len(scores)
    return {"max": max(scores), "mean": mean, "min": min(scores), "n": len(scores), "std": 0.0}


def finetune(dev: tuple, test: tuple, family: str = "classification", headline: str = "accuracy") -> FinetuneMetrics:
    """Metrics of ``len(dev)`` runs (a single test score stands for every run's)."""
    tests = test * len(dev) if len(test) == 1 else test
    runs = [{"seed": i + 1, "train": FIT, "dev": {headline: d}, "test": {headline: t}}
            for i, (d, t) in enumerate(zip(dev, tests))]
    return FinetuneMetrics(model="m", task="t", family=family, headline=headline, seeds=list(range(1, len(dev) + 1)),
                           training=TRAINING, runs=runs, dev={headline: summary(*dev)}, test={headline: summary(*test)})


@pytest.mark.parametrize("now_dev, verdict", [
    ((0.70, 0.72, 0.74), "identical"),
    ((0.71, 0.73, 0.75), "within noise"),      # +1 point, runs 2 points apart
    ((0.60, 0.61, 0.62), "lower"),
    ((0.80, 0.81, 0.82), "higher"),
])
def test_run_scores_are_judged_by_their_interval(monkeypatch, now_dev, verdict):
    committed = finetune((0.70, 0.72, 0.74), (0.5, 0.5, 0.5))
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": committed)
    text = provenance.changes_section({("mlm", "sentiment"): finetune(now_dev, (0.5, 0.5, 0.5))})
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    if verdict == "identical":  # counted, not a row each
        assert "mlm / sentiment dev accuracy (mean)" not in rows and text.endswith("2 of 2 scores identical to HEAD's.")
    else:
        assert rows["mlm / sentiment dev accuracy (mean)"].rstrip(" |").endswith(verdict)
        assert text.endswith("1 of 2 scores identical to HEAD's.")  # test accuracy: the same


def test_mrc_percentages_compare_as_fractions(monkeypatch):
    committed = finetune((70.0, 72.0, 74.0), (70.0,), "mrc", "f1")  # as committed: CMRC percentages
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": committed)
    now = finetune((0.71, 0.73, 0.75), (0.7,), "mrc", "f1")
    row = provenance.changes_section({("wwm", "msra_mrc"): now}).splitlines()[2]
    assert "| 72.00 | 73.00 | +1.00 [" in row and row.endswith("| within noise |")


def test_two_runs_a_side_are_too_few_for_a_verdict(monkeypatch):
    """Two runs a side give a t interval on 2 degrees of freedom at most: the difference alone, not judged."""
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": finetune((0.70, 0.74), (0.7,)))
    row = provenance.changes_section({("mlm", "sentiment"): finetune((0.71, 0.75), (0.7,))}).splitlines()[2]
    assert row.endswith("| +1.00 | too few replicates |")


def test_nothing_committed_gives_no_table(monkeypatch):
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": None)
    assert provenance.changes_section({("mlm", "sentiment"): finetune((0.7,), (0.7,))}) == ""


def test_one_run_a_side_has_no_interval(monkeypatch):
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": finetune((0.7,), (0.5,)))
    row = provenance.changes_section({("mlm", "sentiment"): finetune((0.8,), (0.5,))}).splitlines()[2]
    assert "| +10.00 | one run: no interval |" in row


def test_a_study_compares_with_its_own_committed_metrics(monkeypatch):
    """A study's report reads the committed files of its own folder, not the default run's."""
    read = []
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": read.append(path))
    provenance.changes_section({("mlm-42", "sentiment"): finetune((0.7,), (0.7,))}, ROOT / "reports" / "study" / "metrics")
    assert read == [ROOT / "reports" / "study" / "metrics" / "finetune" / "mlm-42-sentiment.json"]


def test_previous_metrics_reads_the_committed_file_by_a_path_relative_to_the_checkout(monkeypatch):
    monkeypatch.chdir(ROOT)
    committed = provenance.previous_metrics(ROOT / "reports" / "study" / "metrics" / "finetune" / "mlm-42-sentiment.json")
    assert committed is not None and committed.model == "mlm-42"
