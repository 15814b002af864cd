"""Every pretraining objective of params.yaml through ``dvc repro``: pretrained, fine-tuned and
in the report's comparison table (``compare``: one param away), and adding one objective to
``compare`` reruns its own stages and the report, nothing else. Its own repository, so it runs
beside ``test_end_to_end.py`` under ``pytest -n 2``."""

import json

import pytest
import yaml

from tests.conftest import small_params
from tests.e2e.repo import ran_stages, reproduced, run, write_params

pytestmark = pytest.mark.slow

ADDED = "mac_sop"  # left out of the first repro, added by the last test


@pytest.fixture(scope="module")
def repo(tmp_path_factory, prefect_server):
    """The repository after ``dvc repro`` with every objective but :data:`ADDED` compared, each
    fine-tuned on sentiment with one seed; one model per analysis, one task compressed."""
    params = small_params()
    params["compare"] = [o for o in params["objectives"] if o != ADDED]
    params["finetune"].update(tasks=["sentiment"], seeds=[1])
    params["compression"]["tasks"] = ["sentiment"]  # compressed tasks must be fine-tuned
    for analysis in ("ablation", "probe", "scalar_mix"):
        params[analysis]["models"] = ["wwm"]
    repo = tmp_path_factory.mktemp("objectives")
    with reproduced(repo, params, prefect_server) as (env, out):
        yield repo, env, out


def test_every_objective_is_pretrained_finetuned_and_compared(repo):
    repo, _, out = repo
    params = yaml.safe_load((repo / "params.yaml").read_text())
    assert len(params["objectives"]) >= 11 and set(params["objectives"]) - set(params["compare"]) == {ADDED}
    for name in params["compare"]:
        assert {f"pretraining_data@{name}", f"pretrain@{name}", f"finetune@{name}-sentiment"} <= ran_stages(out), name
    mac = json.loads((repo / "metrics" / "pretraining_data" / "mac.json").read_text())
    assert mac["similar_words"] > 0 and 0 <= mac["similar_fallback_rate"] < 1 and mac["mask"] == 0
    perlm = json.loads((repo / "metrics" / "pretrain" / "perlm.json").read_text())
    assert perlm["token_target"] == "position"
    sop = json.loads((repo / "metrics" / "pretrain" / "wwm_sop.json").read_text())
    assert sop["sentence_task"] == "sop" and sop["final_sentence_accuracy"] is not None
    assert (repo / "models" / "wwm_sop" / "pretraining_heads.safetensors").is_file()
    md = (repo / "reports" / "report.md").read_text()
    table = md[md.index("## Objective comparison"):]
    for name in params["compare"]:
        assert f"| {name} |" in table, name
    assert f"| {ADDED} |" not in table


def test_adding_an_objective_reruns_only_its_stages(repo):
    """DVC's granularity: the new objective's data, pretraining and fine-tuning, and the report;
    no data stage, no other objective. The ablation and the attributions rerun too: they depend
    on all of results/finetune, since params decide which fine-tuned model they read back."""
    repo, env, _ = repo
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["compare"].append(ADDED)
    write_params(repo, params)
    out = run(["dvc", "repro"], repo, env)
    assert ran_stages(out) == {f"pretraining_data@{ADDED}", f"pretrain@{ADDED}", f"finetune@{ADDED}-sentiment",
                               "report", "ablation@wwm", "attributions@wwm"}
    md = (repo / "reports" / "report.md").read_text()
    assert f"| {ADDED} |" in md[md.index("## Objective comparison"):]
