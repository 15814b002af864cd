"""Report tables: HFL-style cells, MRC percentages brought to the common scale, the
"what pretraining buys" verdict and the objective comparison, judged against the seed spread."""

from tasks.report.report import as_fractions, comparison_section, describe_objective, finetune_section, max_avg


def result(family, headline, scores):
    runs = [{"seed": i + 1, "dev": {headline: v}, "test": {headline: v}} for i, v in enumerate(scores)]
    mean = sum(scores) / len(scores)
    std = (sum((v - mean) ** 2 for v in scores) / max(1, len(scores) - 1)) ** 0.5
    summary = {headline: {"mean": mean, "std": std, "max": max(scores), "min": min(scores), "n": len(scores)}}
    return {"family": family, "headline": headline, "runs": runs, "dev": summary, "test": summary}


def test_max_avg_cell():
    assert max_avg({"max": 0.812, "mean": 0.8, "std": 0.0123, "min": 0.79, "n": 3}) == "81.2 (80.0 ± 1.2)"


def test_mrc_percentages_become_fractions():
    r = as_fractions(result("mrc", "f1", [46.0, 50.0, 48.0]))
    assert r["dev"]["f1"]["max"] == 0.5 and r["dev"]["f1"]["n"] == 3
    assert [run["dev"]["f1"] for run in r["runs"]] == [0.46, 0.5, 0.48]
    assert as_fractions(result("ner", "f1", [0.2]))["dev"]["f1"]["max"] == 0.2


def test_verdict_needs_a_gap_beyond_the_seed_spread(tmp_path):
    results = {
        ("random", "sentiment"): result("classification", "accuracy", [0.76, 0.77, 0.78]),
        ("mlm", "sentiment"): result("classification", "accuracy", [0.80, 0.81, 0.80]),   # +3.3 > spread 2
        ("wwm", "sentiment"): result("classification", "accuracy", [0.77, 0.79, 0.78]),   # +1.0 < spread 2
        ("random", "msra_mrc"): as_fractions(result("mrc", "f1", [40.0, 41.0, 42.0])),
        ("mlm", "msra_mrc"): as_fractions(result("mrc", "f1", [30.0, 31.0, 32.0])),      # -10 beyond spread
    }
    md = "\n".join(finetune_section(results, ["mlm", "wwm", "random"], ["sentiment", "msra_mrc"], tmp_path))
    assert "| sentiment | mlm | +3.33 | 2.00 | better, beyond seed spread |" in md
    assert "| sentiment | wwm | +1.00 | 2.00 | within seed spread |" in md
    assert "| msra_mrc | mlm | -10.00 | 2.00 | worse, beyond seed spread |" in md
    assert (tmp_path / "finetune_dev.png").stat().st_size > 0


def test_comparison_table_and_noise_verdict():
    results = {
        ("mlm", "sentiment"): result("classification", "accuracy", [0.80, 0.81, 0.80]),
        ("wwm", "sentiment"): result("classification", "accuracy", [0.79, 0.80, 0.81]),    # -0.33, spread 2
        ("mac", "sentiment"): result("classification", "accuracy", [0.74, 0.75, 0.75]),    # -5.67 beyond
        ("random", "sentiment"): result("classification", "accuracy", [0.70, 0.71, 0.72]),
        ("mlm", "msra_mrc"): as_fractions(result("mrc", "f1", [30.0, 31.0, 32.0])),
    }
    md = "\n".join(comparison_section(results, ["mlm", "wwm", "mac"], ["random"], ["sentiment", "msra_mrc"]))
    assert "| objective | sentiment (accuracy) | msra_mrc (f1) |" in md
    assert "| mlm | 81.0 (80.3 ± 0.6) | 32.0 (31.0 ± 1.0) |" in md
    assert "| mac | 75.0 (74.7 ± 0.6) | - |" in md and "| random | 72.0 (71.0 ± 1.0) | - |" in md
    assert ("- **sentiment** (accuracy, dev mean): best mlm 80.33; within noise of it: wwm (−0.33, spread 2.00); "
            "worse beyond noise: mac (−5.67, spread 1.00).") in md
    assert "- **msra_mrc**: only mlm was fine-tuned." in md


def test_objective_description():
    assert describe_objective({"masking": "wwm"}) == "wwm; mask 80 / random 10 / keep 10; static"
    assert describe_objective({"masking": "ngram", "replacement": {"permute": 0.9, "keep": 0.1},
                               "sentence_task": "sop", "dynamic": True}) == "ngram; permute 90 / keep 10; + SOP; dynamic"
