"""Report section "What changed since the last commit": scores judged against the seed spread."""

import pytest

from tasks.core.metrics.base import read_metrics
from tasks.core.metrics.downstream import FinetuneMetrics
from tasks.report import provenance
from tests.conftest import ROOT

TRAINING = read_metrics(ROOT / "metrics" / "finetune" / "mlm-lcqmc.json", FinetuneMetrics).training


def summary(*scores: float) -> dict:
    mean = sum(scores) / len(scores)
    return {"max": max(scores), "mean": mean, "min": min(scores), "n": len(scores), "std": 0.0}


def finetune(dev: tuple, test: tuple, family: str = "classification", headline: str = "accuracy") -> FinetuneMetrics:
    return FinetuneMetrics(model="m", task="t", family=family, headline=headline, seeds=[1], training=TRAINING,
                           runs=[], dev={headline: summary(*dev)}, test={headline: summary(*test)})


@pytest.mark.parametrize("now_dev, verdict", [
    ((0.70, 0.72, 0.74), "identical"),
    ((0.71, 0.73, 0.75), "within seed spread"),      # +1 point, spread 4 points
    ((0.60, 0.61, 0.62), "worse, beyond seed spread"),
    ((0.80, 0.81, 0.82), "better, beyond seed spread"),
])
def test_run_scores_are_judged_against_the_seed_spread(monkeypatch, now_dev, verdict):
    committed = finetune((0.70, 0.72, 0.74), (0.5, 0.5, 0.5))
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": committed)
    text = provenance.changes_section({("mlm", "sentiment"): finetune(now_dev, (0.5, 0.5, 0.5))})
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines()[2:]}
    assert rows["mlm / sentiment dev accuracy (mean)"].rstrip(" |").endswith(verdict)
    assert rows["mlm / sentiment test accuracy (mean)"].rstrip(" |").endswith("identical")


def test_mrc_percentages_compare_as_fractions(monkeypatch):
    committed = finetune((70.0, 74.0), (70.0,), "mrc", "f1")  # as committed: CMRC percentages
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": committed)
    now = finetune((0.71, 0.75), (0.7,), "mrc", "f1")
    row = provenance.changes_section({("wwm", "msra_mrc"): now}).splitlines()[2]
    assert "| 72.00 | 73.00 | +1.00 | 4.00 | within seed spread |" in row


def test_nothing_committed_gives_no_table(monkeypatch):
    monkeypatch.setattr(provenance, "previous_metrics", lambda path, rev="HEAD": None)
    assert provenance.changes_section({("mlm", "sentiment"): finetune((0.7,), (0.7,))}) == ""
