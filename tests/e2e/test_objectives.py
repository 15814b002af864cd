"""Every code path of the pretraining objectives of params.yaml through ``dvc repro`` of the objective
stages (data, pretraining, curve, fine-tuning): each pretrained, fine-tuned and in the report's
comparison table (``compare``: one param away), and adding one objective to ``compare`` reruns its
own stages, nothing else. Its own repository, so it runs beside ``test_end_to_end.py`` (which runs
every stage) under ``pytest -n 2``."""

import json

import pytest
import yaml

from tasks.core.params import load_params
from tasks.report.findings import comparison_section, load_outcomes
from tests.conftest import small_params
from tasks.orchestration.progress import ran_stages
from tests.e2e.repo import reproduced, run, write_params

pytestmark = pytest.mark.slow

ADDED = "mac_sop"  # left out of the first repro, added by the last test
# objectives whose path through the stages a compared one takes with other numbers (about a minute
# of CI each): ngram is Mac's masking with MLM's [MASK] replacement, MacBERT's ablations are ngram's,
# NSP is SOP's pairing with another partner, span is span_sbo's data, electra runs every stage in
# test_end_to_end.py, and PerLM's word and global options are the ngram and both ones'
SAME_PATH = {"ngram", "mac_random_replace", "mac_all_mask", "wwm_nsp", "span", "electra", "perlm_word",
             "perlm_global"}
STAGES = ("pretraining_data", "pretrain", "curves", "finetune")  # and what they need upstream


@pytest.fixture(scope="module")
def repo(tmp_path_factory, prefect_server):
    """The repository after ``dvc repro`` of :data:`STAGES` with every objective but :data:`ADDED` and
    :data:`SAME_PATH` compared, each fine-tuned on sentiment with one seed."""
    params = small_params()
    params["compare"] = [o for o in params["objectives"] if o != ADDED and o not in SAME_PATH]
    params["finetune"].update(tasks=["sentiment"], seeds=[1])
    params["curves"]["tasks"] = []
    # (validation: compressed tasks must be fine-tuned, and the ablation reads a model fine-tuned on MRC)
    params["compression"]["tasks"] = ["sentiment"]
    params["ablation"]["models"] = []
    repo = tmp_path_factory.mktemp("objectives")
    with reproduced(repo, params, prefect_server, STAGES) as (env, out):
        yield repo, env, out


def comparison(repo, monkeypatch) -> str:
    """The report's objective comparison table of the run in ``repo``."""
    monkeypatch.chdir(repo)
    params = load_params()
    outcomes = load_outcomes(params, repo / "metrics")
    return comparison_section(params, {k: v for k, v in outcomes.items() if k[0] != "random"})


def test_every_objective_is_pretrained_finetuned_and_compared(repo, monkeypatch):
    repo, _, out = repo
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert len(params["objectives"]) >= 20
    assert set(params["objectives"]) - set(params["compare"]) == {ADDED, *SAME_PATH}
    for name in params["compare"]:
        assert {f"pretraining_data@{name}-42", f"pretrain@{name}-42", f"curves@{name}-42",
                f"finetune@{name}-42-sentiment"} <= ran_stages(out), name
    mac = json.loads((repo / "metrics" / "pretraining_data" / "mac-42.json").read_text())
    assert mac["similar_words"] > 0 and 0 <= mac["similar_fallback_rate"] < 1 and mac["mask"] == 0
    mac_curve = json.loads((repo / "metrics" / "curves" / "mac-42.json").read_text())  # measured as it trains
    assert mac_curve["measure"] == "mac" and 0 <= mac_curve["points"][-1]["copy_accuracy"] < 1
    perlm = json.loads((repo / "metrics" / "pretrain" / "perlm-42.json").read_text())
    assert perlm["token_target"] == "position"
    sop = json.loads((repo / "metrics" / "pretrain" / "wwm_sop-42.json").read_text())
    assert sop["sentence_task"] == "sop" and sop["final_sentence_accuracy"] is not None
    assert (repo / "models" / "wwm_sop-42" / "pretraining_heads.safetensors").is_file()
    span = json.loads((repo / "metrics" / "pretraining_data" / "span_sbo-42.json").read_text())
    assert span["chosen"] > 0 and abs(span["mask_share"] - 0.8) < 0.15
    full = json.loads((repo / "metrics" / "pretrain" / "perlm_full-42.json").read_text())
    assert full["flops"] > perlm["flops"]  # every token predicted
    table = comparison(repo, monkeypatch)
    for name in params["compare"]:
        assert f"| {name} |" in table, name
    assert f"| {ADDED} |" not in table


def test_adding_an_objective_reruns_only_its_stages(repo, monkeypatch):
    """DVC's granularity: the new objective's data, recipe sweep, pretraining, curve and fine-tuning;
    no data stage, no other objective."""
    repo, env, _ = repo
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["compare"].append(ADDED)
    write_params(repo, params)
    out = run(["dvc", "repro", *STAGES], repo, env)
    assert ran_stages(out) == {f"pretraining_data@{ADDED}-42", f"sweep@{ADDED}", f"pretrain@{ADDED}-42",
                               f"curves@{ADDED}-42", f"finetune@{ADDED}-42-sentiment"}
    assert f"| {ADDED} |" in comparison(repo, monkeypatch)


def test_a_study_runs_as_units_and_a_fresh_clone_goes_on_from_the_committed_ones(repo, tmp_path):
    """``make study``'s mechanism (tasks/orchestration/units.py) on a reduced study: it plans, runs every unit and
    reports from the committed units; a clone with no DVC cache finds all of them done and builds the report
    alone; a changed fine-tuning param leaves the recipes done and every seed's unit to run again."""
    import subprocess
    import sys

    repo, env, _ = repo
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    run([*git, "add", "-A"], repo, env)
    run([*git, "commit", "-qm", "the pipeline"], repo, env)
    reduced = ["--out", "reports/u", "-S", "compare=[mlm,wwm]", "-S", "pretrain.seeds=[42,43]",
               "-S", "finetune.baseline_tasks=[sentiment]"]  # this repository's one task
    study = [sys.executable, "-m", "tasks.orchestration.study", "study", *reduced]
    out = run(study, repo, env)
    assert "study: 0 of 8 units done" in out and "study: unit wwm-43 done" in out and "8 of 8 units done" in out
    records = sorted(p.stem for p in (repo / "reports" / "u" / "units").glob("*.yaml"))
    assert records == sorted(["recipe-mlm", "recipe-wwm", "mlm-42", "wwm-42", "random-42", "mlm-43", "wwm-43",
                              "random-43"])
    report = (repo / "reports" / "u" / "report.md").read_text()
    assert "| pretraining beats random init | BERT (Devlin et al. 2019) | sentiment |" in report
    assert "## How the study ran\n\n8 units in 1 stop (the commits they ran at)" in report
    assert (repo / "reports" / "u" / "metrics" / "outcomes" / "wwm-43-sentiment.parquet").is_file()
    assert not (repo / ".dvc" / "tmp" / "study").exists() or not any((repo / ".dvc" / "tmp" / "study").iterdir())
    run([*git, "add", "reports/u"], repo, env)
    run([*git, "commit", "-qm", "the study's units"], repo, env)

    clone = tmp_path / "clone"
    run(["git", "clone", "-q", str(repo), str(clone)], tmp_path, env)
    assert not (clone / ".dvc" / "cache").exists()
    env = {**env, "PYTHONPATH": env["PYTHONPATH"].replace(str(repo), str(clone))}
    changed = subprocess.run([*study, "--plan", "-S", "finetune.training.epochs=2"], cwd=clone, env=env,
                             capture_output=True, text=True)
    assert "study: 2 of 8 units done" in changed.stdout, changed.stdout + changed.stderr  # the recipes read no finetune
    again = run(study, clone, env)
    assert "study: 8 of 8 units done" in again and "unit " not in again.replace("units done", "")
    assert (clone / "reports" / "u" / "report.md").read_text().split("## Findings")[1].split("## Corpus")[0] == \
        report.split("## Findings")[1].split("## Corpus")[0]
