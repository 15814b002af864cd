"""The whole-pipeline Prefect flow: its stage order comes from dvc.yaml, and its
scheduled deployment can be built (without waiting for cron)."""

from flows.pipeline import DEPLOYMENT, deployment, stage_order
from tests.conftest import ROOT


def test_stage_order_follows_the_dvc_graph():
    order = stage_order(str(ROOT))
    first = {name: order.index(name) for name in order}
    assert order[0] == "acquire" and order[-1] == "report"
    assert first["ingest"] < first["segment"] < first["tokenize"] < first["pretraining_data@wwm"] < first["pretrain@wwm"]
    assert first["tokenize"] < first["similar_words"] < first["pretraining_data@mlm"]
    assert "finetune_baseline@random-sentiment" in first
    for name in order:
        if name.startswith(("finetune@", "finetune_baseline@")):
            model = name.split("@")[1].split("-")[0]
            upstream = "init_random" if model == "random" else (
                f"pretrain@{model}" if f"pretrain@{model}" in first else f"import_model@{model}")
            assert first[upstream] < first[name] < first["report"], name
        if name.startswith("downstream@"):
            assert first[name] < first["ingest"], "evaluation text must be known before ingest removes it"


def test_nightly_deployment_can_be_built():
    dep = deployment("30 1 * * *")
    assert dep.name == DEPLOYMENT and dep.flow_name == "pipeline"
    assert [s.schedule.cron for s in dep.schedules] == ["30 1 * * *"]
