"""Report sections: MRC percentages brought to the common scale, the Findings table (claims of
the line judged by the statistics module, and what has not run), the objective comparison with
its variance decomposition, the stages of the run times; every section template rendered
(StrictUndefined) from the committed metrics and from none; the HTML page with the shared
stylesheet."""

import base64
import json
import re
import shutil
from pathlib import Path

import jinja2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.core.metrics.base import read_metrics, write_metrics
from tasks.core.metrics.compression import PruneMetrics
from tasks.core.metrics.downstream import FinetuneMetrics, SeedSummary
from tasks.core.metrics.pretraining import SweepMetrics
from tasks.core.params import Objective, Params
from tasks.report.common import fmt, load_metrics
from tasks.report.compression import _findings, compression_section
from tasks.report.corpus import corpus_section
from tasks.report.curves import curves_section
from tasks.report.errors import errors_section
from tasks.report.findings import comparison_section, findings_rows, findings_section
from tasks.report.finetune import as_fractions, finetune_results, finetune_section
from tasks.report.html import inline_figures, to_html
from tasks.report.interpretability import interpretability_section
from tasks.report.multilingual import multilingual_section
from tasks.pretraining.objectives import describe
from tasks.report.pretraining import pretraining_section, recipes_table, sweeps_table
from tasks.report.report import Inputs, build_report
from tasks.report.runtime import runtime_section, stage_of
from tasks.report.simulation import Design
from tasks.report.statistics import Outcomes, mean_of
from tasks.report.templating import TEMPLATES, render_blocks
from tests.conftest import ROOT, small_params

METRICS = ROOT / "metrics"  # committed to git: the metrics of a real run
SMALL = Params.model_validate(small_params())
TRAINING = SMALL.finetune.for_task(SMALL.task("lcqmc"))  # the knobs a run records
FIT = {"steps": 10, "examples": 320, "train_loss": 0.5, "wall_sec": 1.0, "examples_per_sec": 320.0}


def result(family, headline, scores) -> FinetuneMetrics:
    """Fine-tuning metrics whose every seed scores the same on dev and test."""
    runs = [{"seed": i + 1, "train": FIT, "dev": {headline: v}, "test": {headline: v}} for i, v in enumerate(scores)]
    mean = sum(scores) / len(scores)
    std = (sum((v - mean) ** 2 for v in scores) / max(1, len(scores) - 1)) ** 0.5
    summary = {headline: {"mean": mean, "std": std, "max": max(scores), "min": min(scores), "n": len(scores)}}
    return FinetuneMetrics(model="m", task="t", family=family, headline=headline, seeds=list(range(1, len(runs) + 1)),
                           training=TRAINING, runs=runs, dev=summary, test=summary)


@pytest.fixture(scope="module")
def params() -> Params:
    return SMALL


def test_mrc_percentages_become_fractions():
    r = as_fractions(result("mrc", "f1", [46.0, 50.0, 48.0]))
    assert r.dev["f1"].max == 0.5 and r.dev["f1"].n == 3 and r.test["f1"].min == 0.46
    assert [run.dev["f1"] for run in r.runs] == [run.test.f1 for run in r.runs] == [0.46, 0.5, 0.48]
    assert as_fractions(result("ner", "f1", [0.2])).dev["f1"].max == 0.2


def simulated(seeds: list[int], shift: float, rng: np.random.Generator, finetune_seeds: int = 2) -> Outcomes:
    """Accuracy outcomes (percent) of a procedure with ``shift`` on the logit scale: the pretraining
    seeds x ``finetune_seeds`` x 400 shared examples (the same examples: ``rng`` is reseeded)."""
    a, _ = Design(seeds=len(seeds), finetune_seeds=finetune_seeds, examples=400).draw(rng, effect=shift)
    return Outcomes(a.counts, mean_of(scale=100.0), tuple(seeds), tuple(range(1, finetune_seeds + 1)))


def learned(metrics: Path, *models: str) -> Path:
    """``metrics`` with a held-out curve for each of ``models`` (``<objective>-<seed>``) whose end passed
    its gates, as stage ``curves`` writes it: the models are comparable."""
    gate = {"name": "accuracy above the top token's", "value": 0.27, "low": 0.26, "high": 0.28, "threshold": 0.04,
            "above": True, "passed": True}
    for model in models:
        objective, seed = model.rsplit("-", 1)
        (metrics / "curves").mkdir(parents=True, exist_ok=True)
        (metrics / "curves" / f"{model}.json").write_text(json.dumps(
            {"objective": objective, "seed": int(seed), "heldout_task": "msra_ner", "sequences": 10, "measure": "mlm",
             "predictions": 100, "points": [{"fraction": 1.0, "loss": 4.5, "accuracy": 0.27, "gates": [gate]}]}))
    return metrics


def ner_runs(metrics: Path, model: str, f1s: list[float]) -> None:
    """A fine-tuning metrics file of ``model`` on msra_ner whose runs scored ``f1s`` (dev and test)."""
    done = result("ner", "f1", f1s).model_copy(update={"model": model, "task": "msra_ner"})
    (metrics / "finetune").mkdir(parents=True, exist_ok=True)
    write_metrics(metrics / "finetune" / f"{model}-msra_ner.json", done)


@pytest.fixture(scope="module")
def seeded_params() -> Params:
    raw = small_params()
    raw["pretrain"]["seeds"] = [42, 43, 44]
    return Params.model_validate(raw)


def test_findings_judge_each_claim_by_its_interval_and_say_what_did_not_run(seeded_params, tmp_path):
    seeds = seeded_params.pretrain.seeds
    outcomes = {("mlm", "sentiment"): simulated(seeds, 1.5, np.random.default_rng(0)),   # far above random
                ("random", "sentiment"): simulated(seeds, 0.0, np.random.default_rng(0)),
                ("mlm", "msra_ner"): simulated(seeds, 0.0, np.random.default_rng(1)),
                ("wwm", "msra_ner"): simulated(seeds, 0.0, np.random.default_rng(1))}  # the very same runs
    metrics = learned(tmp_path, *(f"{o}-{s}" for o in ("mlm", "wwm") for s in seeds))
    rows = {(r[0], r[2]): r for r in findings_rows(seeded_params, outcomes, metrics)}
    better = rows["pretraining beats random init", "sentiment"]
    low, high = map(float, better[3].split("[")[1].rstrip("]").split(", "))
    assert 0 < low < float(better[3].split()[0]) < high and better[-1] == "agrees"
    # the very same runs: no variation to judge a difference by, so no [0, 0] interval and no MDE of 0
    assert rows["whole word masking beats MLM on MRC and NER", "msra_ner"][3:] == ["+0.00", "-", "-", "n/a"]
    # a claim about sentiment is judged on no other task: lcqmc did not run for it
    assert ("pretraining beats random init", "lcqmc") not in rows
    assert rows["MLM as correction (Mac) beats random replacement", "-"][-1] == \
        "not run: add mac and mac_random_replace to compare"
    assert rows["replaced-token detection beats MLM at equal compute", "-"][-1] == "not run: add electra to compare"
    assert rows["resampling helps the small languages", "-"][-1].startswith("not run")
    md = findings_section(seeded_params, outcomes, metrics)
    assert "3 pretraining seeds × 2 fine-tuning seeds" in md and "about these checkpoints" not in md


def test_a_finding_about_a_model_without_gates_or_one_that_failed_them_is_not_judged(seeded_params, tmp_path):
    seeds = seeded_params.pretrain.seeds
    outcomes = {(p, "sentiment"): simulated(seeds, shift, np.random.default_rng(0))
                for p, shift in (("mlm", 1.5), ("random", 0.0))}
    row = lambda: [r for r in findings_rows(seeded_params, outcomes, tmp_path) if r[2] == "sentiment"][0]  # noqa: E731
    assert row()[-1] == "unchecked: mlm-42 has no gates (stage curves)"
    learned(tmp_path, "mlm-42", "mlm-43", "mlm-44")
    failed = json.loads((tmp_path / "curves" / "mlm-43.json").read_text())
    failed["points"][0]["gates"][0].update(passed=False, low=0.01, value=0.02, high=0.03)
    (tmp_path / "curves" / "mlm-43.json").write_text(json.dumps(failed))
    assert row()[-1] == "invalid: mlm-43 did not learn its objective by half its budget " \
        "(accuracy above the top token's at 1)"
    # one that passes only at its end is at the edge of learning: judged from half its budget on, not before
    early, late = (json.loads(json.dumps(failed["points"][0])) for _ in range(2))
    early.update(fraction=0.25)
    late.update(fraction=0.5)
    passed = json.loads((tmp_path / "curves" / "mlm-42.json").read_text())
    for at_half, verdict in ((True, "agrees"), (False, "invalid: mlm-43 did not learn its objective by half its "
                                                       "budget (accuracy above the top token's at 0.5)")):
        late["gates"][0]["passed"] = at_half
        (tmp_path / "curves" / "mlm-43.json").write_text(json.dumps({**passed, "points": [early, late,
                                                                                        *passed["points"]]}))
        judged = row()
        assert judged[-1] == verdict
        # an invalid row gives the difference alone: its interval would read as a finding
        assert (judged[4:6] == ["-", "-"] and "[" not in judged[3]) == verdict.startswith("invalid")


def test_a_side_whose_every_fine_tuning_run_scored_zero_did_not_learn_the_task(seeded_params, tmp_path):
    """Random init tagging every token O (NER F1 0 in every run) is no baseline to beat."""
    seeds = seeded_params.pretrain.seeds
    outcomes = {(p, "msra_ner"): simulated(seeds, shift, np.random.default_rng(0))
                for p, shift in (("mlm", 1.5), ("random", 0.0))}
    metrics = learned(tmp_path, *(f"mlm-{s}" for s in seeds))
    for s in seeds:
        ner_runs(metrics, f"mlm-{s}", [0.4, 0.41])
        ner_runs(metrics, f"random-{s}", [0.0, 0.0] if s == 44 else [0.2, 0.0])
    [row] = [r for r in findings_rows(seeded_params, outcomes, metrics) if r[2] == "msra_ner"]
    assert row[-1] == "invalid: random-44 did not learn msra_ner (f1 0 in every fine-tuning run)"
    ner_runs(metrics, "random-44", [0.0, 0.1])  # one run found something: a score to compare
    [row] = [r for r in findings_rows(seeded_params, outcomes, metrics) if r[2] == "msra_ner"]
    assert row[-1] == "agrees"


def test_with_one_pretraining_seed_a_finding_is_about_the_checkpoint(params, tmp_path):
    """Its replicates are the fine-tuning seeds (3: enough for a verdict; 2 are too few)."""
    outcomes = {(p, "sentiment"): simulated([42], shift, np.random.default_rng(0), finetune_seeds=3)
                for p, shift in (("mlm", 1.5), ("random", 0.0))}
    metrics = learned(tmp_path, "mlm-42")
    [row] = [r for r in findings_rows(params, outcomes, metrics) if r[2] == "sentiment"]
    assert row[-1] == "agrees (about this checkpoint, not the procedure)"
    assert "about these checkpoints, not the procedures" in findings_section(params, outcomes, metrics)
    # two replicates: the verdict is withheld, and so are the interval, p-value and MDE that would read as one
    two = {k: Outcomes(o.counts[:, :2], o.metric, o.seeds, o.finetune_seeds[:2]) for k, o in outcomes.items()}
    [row] = [r for r in findings_rows(params, two, metrics) if r[2] == "sentiment"]
    assert row[-1] == "too few replicates (about this checkpoint, not the procedure)"
    assert "[" not in row[3] and float(row[3]) > 0 and row[4] == row[5] == "-"
    assert f"| mlm | {two['mlm', 'sentiment'].runs.mean():.1f} · " in comparison_section(params, two)


def test_comparison_table_and_variance_decomposition(seeded_params):
    seeds = seeded_params.pretrain.seeds
    outcomes = {(p, "sentiment"): simulated(seeds, shift, np.random.default_rng(2))
                for p, shift in (("mlm", 1.0), ("wwm", 1.0), ("random", 0.0))}
    md = comparison_section(seeded_params, outcomes)
    assert "| procedure | sentiment (classification) |" in md
    mlm = outcomes["mlm", "sentiment"].runs
    assert f"| mlm | {mlm.mean():.1f} [" in md and f"· {mlm.max():.1f} ({mlm.mean():.1f}) |" in md
    [row] = [line for line in md.splitlines() if line.startswith("| sentiment |")]
    shares = [float(c.rstrip("%")) for c in row.split(" | ")[1:4]]
    assert abs(sum(shares) - 100) <= 2 and float(row.split(" | ")[4].rstrip(" |")) > 0
    assert comparison_section(seeded_params, {}) == ""


def test_run_times_name_the_stages_of_dvc_yaml(tmp_path):
    assert stage_of("mlm-42", "sentiment") == "finetune@mlm-42-sentiment"
    assert stage_of("random-43", "lcqmc") == "finetune_random@43-lcqmc"
    assert stage_of("albert_tiny", "msra_ner") == "finetune_baseline@albert_tiny-msra_ner"
    side_by_side = result("classification", "accuracy", [0.7, 0.71]).model_copy(update={"wall_sec": 90.0})
    results = {("mlm-42", "sentiment"): result("classification", "accuracy", [0.8, 0.81]),
               ("random-42", "sentiment"): side_by_side}
    md = runtime_section(tmp_path, ["mlm-42", "wwm-42"], results)
    # a run without the stage's wall (before seed_workers): its seeds' training, summed
    assert f"| finetune@mlm-42-sentiment | {fmt(2 * FIT['wall_sec'] / 60, 2)} |" in md
    # seeds side by side: the stage's wall time, not their sum
    assert "| finetune_random@42-sentiment | 1.50 |" in md


def test_the_recipe_is_what_pretrain_trained_with_the_sweeps_choice_included(params, tmp_path):
    setting = lambda name, lr, loss: {"name": name, "overrides": {"learning_rate": lr}, "score": -loss, "loss": loss,
                                      "accuracy": 0.1, "tokens": 10, "steps": 1, "wall_sec": 60.0}
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "mlm.json").write_text(json.dumps({
        "objective": "mlm", "seed": 42, "fraction": 0.25, "heldout_task": "msra_ner", "split": "dev", "wall_sec": 120.0,
        "chosen": "lr5e-4", "settings": [setting("lr5e-4", 5e-4, 6.0), setting("lr1e-3", 1e-3, 6.2)]}))
    sweeps = {o: load_metrics(tmp_path / "sweep" / f"{o}.json", SweepMetrics) for o in ("mlm", "wwm")}
    recipes = recipes_table(sweeps, params.objectives, params.pretrain)
    assert "| mlm | 0.0005 (swept) |" in recipes  # not pretrain's learning_rate
    assert f"| wwm | {params.pretrain.learning_rate:g} |" in recipes  # not swept here: pretrain's
    table = sweeps_table(sweeps)
    assert "| **mlm** | **lr5e-4** | learning_rate 0.0005 | 6.000 |" in table and "| mlm | lr1e-3 |" in table
    assert sweeps_table({"wwm": sweeps["wwm"]}) is None


def test_a_mac_curve_is_marked_and_kept_off_the_mlm_plot(tmp_path, monkeypatch):
    """Mac is measured on similar words, not [MASK]: its loss is shown marked, never plotted or ranked with MLM's."""
    for kind in ("curves", "pretrain"):
        (tmp_path / kind).mkdir()
        run = json.loads((METRICS / kind / "mlm-42.json").read_text())
        (tmp_path / kind / "mlm-42.json").write_text(json.dumps(run))
        run["objective"] = "mac"
        if kind == "curves":
            run["measure"] = "mac"
        (tmp_path / kind / "mac-42.json").write_text(json.dumps(run))
    plotted = []
    monkeypatch.setattr("tasks.report.curves._plot", lambda curves, *args: plotted.append(set(curves)))
    params = Params.model_validate({**small_params(), "compare": ["mlm", "wwm", "mac"]})
    section = curves_section(params, tmp_path, tmp_path)
    assert plotted == [{"mlm"}]
    assert "| mac | 1 |" in section and "(*Mac*)" in section.split("| mac | 1 |")[1].splitlines()[0]
    assert "(*Mac*)" not in section.split("| mlm | 1 |")[1].splitlines()[0]


def test_objective_description():
    bert = {"mask": 0.8, "random": 0.1, "keep": 0.1}
    assert describe(Objective(masking="wwm", replacement=bert)) == \
        "wwm; mask 80 / random 10 / keep 10; static"
    assert describe(Objective(masking="ngram", replacement={"similar": 0.8, "random": 0.1, "keep": 0.1})) \
        == "ngram; similar 80 / random 10 / keep 10; static"
    assert describe(Objective(masking="ngram", replacement={"permute": 0.9, "keep": 0.1}, sentence_task="sop",
                                        dynamic=True)) == "ngram; permute 90 / keep 10; + SOP; dynamic"


# --------------------------------------------------------------------------- every section template


def _sections(params: Params, metrics: Path, root: Path) -> dict[str, str]:
    """Template name -> the section rendered from ``metrics`` (figures and stubs under ``root``)."""
    figures = root / "figures"
    figures.mkdir(exist_ok=True)
    objectives, models, tasks = params.compare, params.finetune_models, params.finetune.tasks
    results = finetune_results(metrics, models, tasks)
    outcomes = {(p, "sentiment"): simulated(params.pretrain.seeds, shift, np.random.default_rng(0))
                for p, shift in (("mlm", 1.0), ("wwm", 1.0), ("random", 0.0))}
    return {
        "findings.md.j2": findings_section(params, outcomes, metrics),
        "corpus.md.j2": corpus_section(metrics, tasks),
        "pretraining.md.j2": pretraining_section(metrics, objectives, params.pretrain.seeds, params.objectives,
                                                 params.pretrain, figures),
        "curves.md.j2": curves_section(params, metrics, figures),
        "comparison.md.j2": comparison_section(params, outcomes),
        "finetune.md.j2": finetune_section(results, models, tasks, figures),
        "errors.md.j2": errors_section(*_errors_stub(root), ["mlm"], ["sentiment", "msra_ner"], root / "predictions",
                                       root / "data"),
        "multilingual.md.j2": multilingual_section(metrics, list(params.multilingual.mixtures), figures),
        "interpretability.md.j2": interpretability_section(params, metrics, root / "attributions", figures, root),
        "compression.md.j2": compression_section(metrics, params.compression.tasks, list(params.compression.students),
                                                 params.compression.prune.models, figures),
    }


def _errors_stub(root: Path) -> tuple[dict]:
    """Test splits and first-seed predictions of a classification and an NER run."""
    for task, rows, preds in (
            ("sentiment", [{"id": "a", "text_a": "好|看", "text_b": "", "label": 1}],
             [{"id": "a", "label": 1, "prediction": 0}]),
            ("msra_ner", [{"id": "n", "tokens": list("北京")}],
             [{"id": "n", "tokens": list("北京"), "gold": ["B-LOC", "I-LOC"], "prediction": ["O", "O"]}])):
        (root / "data" / task).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows), root / "data" / task / "test.parquet")
        (root / "predictions" / f"mlm-{task}").mkdir(parents=True)
        (root / "predictions" / f"mlm-{task}" / "test-seed1.jsonl").write_text(
            "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in preds), encoding="utf-8")
    return ({("mlm", "sentiment"): result("classification", "accuracy", [0.5]),
             ("mlm", "msra_ner"): result("ner", "f1", [0.5])},)


def test_every_section_template_renders_from_metrics(params, tmp_path):
    sections = _sections(params, METRICS, tmp_path)
    assert set(sections) == {p.name for p in TEMPLATES.glob("*.md.j2")} - {"report.md.j2"}
    for name, md in sections.items():
        assert md and md == md.strip("\n") and "\n\n\n" not in md, name
        assert not re.search(r"{[{%#]", md), name  # no template syntax left over
    assert sections["corpus.md.j2"].startswith("| language | documents | sentences | characters |")
    assert "\n\nTokenizer: " in sections["corpus.md.j2"] and "\n\nDropped: " in sections["corpus.md.j2"]
    assert f"| {params.compare[0]}-42 | {describe(params.objective(params.compare[0]))} |" in \
        sections["pretraining.md.j2"]
    assert "| pretraining beats random init | BERT (Devlin et al. 2019) | sentiment | +" in sections["findings.md.j2"]
    assert "| sentiment | n/a (one seed) | " in sections["comparison.md.j2"]  # the committed run: one pretraining seed
    curves = sections["curves.md.j2"]  # ρ only with snapshots fine-tuned (curves.tasks: the study's, not the default)
    assert f"| {params.compare[0]} | 0.5 |" in curves
    assert ("Spearman" in curves) == any((METRICS / "finetune").glob("*@*.json"))
    errors = sections["errors.md.j2"]
    assert errors.startswith("**sentiment** (mlm, seed 1; 1 wrong of 1 test examples)\n\n| text | gold | predicted |")
    assert "| 好\\|看 | 1 | 0 |" in errors and "| 北京 | 北京/LOC | (none) |" in errors
    assert "### Vocabulary pruning" in sections["multilingual.md.j2"]
    interpretability = sections["interpretability.md.j2"]
    assert [line for line in interpretability.splitlines() if line.startswith("### ")] == [
        "### Attention-zone ablation (MRC)", "### Layer-wise probing",
        "### Feature-based (ELMo scalar mix) vs fine-tuning", "### Attributions"]
    assert "have not run" not in interpretability and "Completeness holds to" in interpretability
    compression = sections["compression.md.j2"]
    assert [line for line in compression.splitlines() if line.startswith("### ")] == [
        *(f"### {t} ({params.task(t).metrics[0]})" for t in params.compression.tasks), "### Findings"]
    assert "| teacher (mlm-42) |" in compression and "| l1: kd |" in compression and "| pruned: supervised-uneven-" \
        in compression and "vs labels only" in compression and "keep ≥ 90%" in compression


def test_pruning_findings_state_retention_and_survive_an_unpruned_score_of_zero():
    m = read_metrics(METRICS / "prune" / "mlm-42-sentiment.json", PruneMetrics)
    [line] = _findings("sentiment", [], [m])
    assert re.search(r"\d+ of \d+ variants keep ≥ 90% of the unpruned test score \(best \S+: \d+%\)", line)
    zero = SeedSummary(mean=0, std=0, max=0, min=0, n=len(m.seeds))
    unpruned = m.variants[0].model_copy(update={"test": {k: zero for k in m.variants[0].test}})
    [line] = _findings("sentiment", [], [m.model_copy(update={"variants": [unpruned, *m.variants[1:]]})])
    assert line.endswith("the unpruned model scores 0 on test, so no retention can be stated.")


def test_sections_say_what_has_not_run(params, tmp_path):
    md = build_report.fn(params, tmp_path / "figures", tmp_path,
                      Inputs(metrics=tmp_path / "none", params_file=ROOT / "params.yaml"))
    headings = [line for line in md.splitlines() if line.startswith("## ")]
    assert headings == ["## Findings", "## Corpus", "## Pretraining", "## Score for compute",
                        "## Objective comparison", "## Fine-tuning",
                        "## Wrong predictions", "## Multilingual continued pretraining", "## Interpretability",
                        "## Compression", "## What changed since the last commit", "## Run times", "## Parameters",
                        "## Data versions (dvc.lock)"]
    assert md.startswith("# zhplm pipeline report\n\nCode: git `") and md.endswith("\n") and not md.endswith("\n\n")
    for missing in ("The multilingual stages have not run.", "The attention-zone ablation has not run.",
                    "The probes have not run.", "The feature-based runs have not run.",
                    "The attributions have not run.", "The compression stages (distill, prune) have not run.",
                    "No committed metrics to compare with", "No curve yet",
                    "not run: not fine-tuned yet (stage finetune)", "not run: add mac and mac_random_replace"):
        assert missing in md
    assert "```yaml\n# All knobs of the pipeline." in md  # params.yaml verbatim, comments included


def test_templates_refuse_undefined_names():
    with pytest.raises(jinja2.UndefinedError):
        render_blocks("corpus.md.j2", corpus=None)


def test_html_page_inlines_figures_and_the_shared_stylesheet(tmp_path):
    (tmp_path / "figures").mkdir()
    shutil.copy(ROOT / "tests" / "data" / "README.md", tmp_path / "figures" / "x.png")  # any bytes will do
    page = to_html("# T\n\n| a | b |\n|---|---|\n| 1 | <2> |\n\n![plot](figures/x.png)\n", tmp_path, "T & U")
    assert page.startswith("<!DOCTYPE html>") and "<title>T &amp; U</title>" in page
    assert (TEMPLATES / "style.css").read_text(encoding="utf-8").strip() in page
    assert 'src="data:image/png;base64,' in page and "<table>" in page and 'class="wide"' not in page
    # the Prefect artifact's Markdown: the same figure inlined, a link elsewhere kept
    md = inline_figures("![plot](figures/x.png) and [the data](figures/x.csv)", tmp_path)
    png = base64.b64encode((tmp_path / "figures" / "x.png").read_bytes()).decode()
    assert md == f"![plot](data:image/png;base64,{png}) and [the data](figures/x.csv)"


def test_the_report_names_each_input_of_dvc_yaml_that_is_missing(tmp_path):
    """`python -m flows.report` with a metrics file missing exited 0 and dropped its findings; the flow now
    raises a PipelineError naming the first of these."""
    import subprocess
    import sys
    from tasks.report.common import missing_inputs
    subprocess.run([sys.executable, "-m", "dvc", "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text(
        "stages:\n"
        "  pretrain:\n    cmd: 'true'\n    outs: [metrics/pretrain/mlm.json]\n"
        "  elsewhere:\n    cmd: 'true'\n    outs: [models/mlm]\n"
        "  report:\n    cmd: 'true'\n    deps: [metrics]\n    outs: [reports/report.md]\n")
    (tmp_path / "metrics").mkdir()
    assert missing_inputs(root=str(tmp_path)) == ["metrics/pretrain/mlm.json (stage pretrain)"]  # models/: not read


def test_a_rank_correlation_of_constant_scores_reads_na_not_nan():
    from tasks.report.curves import _rank
    assert _rank("msra_ner", "snapshots", [(6.1, 0.0), (5.9, 0.0), (5.5, 0.0)]) == [
        ["msra_ner", "snapshots", "3", "n/a (constant scores)", "-"]]
    assert _rank("sentiment", "snapshots", [(6.1, 80.0), (5.9, 82.0), (5.5, 85.0)])[0][3] == "+1.00"


def test_the_layer_by_zone_heat_maps_stay_readable_when_scaled_to_the_page(tmp_path):
    """Two models of 2 layers x 9 zones side by side made a 1659 x 287 px strip: a page column of about 980 px
    showed it 170 px tall. One above the other, it keeps an aspect a page shows whole."""
    from PIL import Image

    from tasks.report.interpretability import NAMES, ZONES, _heatmaps

    grids = {m: np.linspace(-2, 2, 2 * len(ZONES)).reshape(2, len(ZONES)) for m in ("mlm-42", "random-42")}
    path = _heatmaps(grids, ["layer 0", "layer 1"], [NAMES[z] for z in ZONES], "ΔF1", tmp_path / "zones.png")
    width, height = Image.open(path).size
    assert width <= 1100 and height * 980 / max(width, 980) >= 350, (width, height)
