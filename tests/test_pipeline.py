"""The whole-pipeline Prefect flow: its stage order comes from dvc.yaml, and its
scheduled deployment can be built (without waiting for cron), and a failed stage says why
and is retried only when a rerun may pass."""

import sys

import pytest

import tasks.orchestration.repro as pipeline_module
from prefect import flow

from flows.pipeline import DEPLOYMENT, deployment
from tasks.core.errors import PipelineError
from tasks.orchestration.repro import StageFailed, repro_stage, stage_order
from tests.conftest import ROOT


def test_stage_order_follows_the_dvc_graph():
    order = stage_order(str(ROOT))
    first = {name: order.index(name) for name in order}
    assert order[:2] == ["code", "acquire"] and order[-1] == "report"  # code: every stage's fingerprint
    assert first["ingest"] < first["segment"] < first["tokenize"] < first["pretraining_data@mlm-42"] \
        < first["pretrain@mlm-42"] < first["curves@mlm-42"]
    assert first["downstream@sentiment"] < first["baseline@sentiment"] < first["report"]
    assert "finetune_random@42-sentiment" in first and "import_model@albert_tiny" in first
    for name in order:
        model = name.split("@")[-1].rsplit("-", 1)[0]
        upstream = {"finetune": f"pretrain@{model}", "finetune_random": f"init_random@{model}",
                    "finetune_baseline": f"import_model@{model}"}.get(name.split("@")[0])
        if upstream:
            assert first[upstream] < first[name] < first["report"], name
        if name.startswith("downstream@"):
            assert first[name] < first["ingest"], "evaluation text must be known before ingest removes it"


def test_nightly_deployment_can_be_built():
    dep = deployment("30 1 * * *")
    assert dep.name == DEPLOYMENT and dep.flow_name == "pipeline"
    assert [s.schedule.cron for s in dep.schedules] == ["30 1 * * *"]
    # never two runs of one workspace at once: a run due while one is going is cancelled
    assert dep.concurrency_limit == 1 and dep.concurrency_options.collision_strategy == "CANCEL_NEW"


@flow
def one_stage(stage: str) -> None:
    """A pipeline of one stage, without the 10 s wait before a retry."""
    repro_stage.with_options(retry_delay_seconds=0)(stage)


@pytest.mark.parametrize("script, user_error", [
    ("import sys; print('loading'); print('error: bad params: seed: must be >= 0', file=sys.stderr); sys.exit(1)", True),
    ("import os, signal; print('training'); os.kill(os.getpid(), signal.SIGKILL)", False),
    ("import sys; print('Killed'); sys.exit(137)", False),
], ids=["user-error", "sigkill", "exit-137"])
def test_stage_failures_carry_their_cause_and_only_crashes_are_retried(script, user_error, prefect_server, tmp_path,
                                                                       monkeypatch):
    attempts = tmp_path / "attempts"
    counted = f"open({str(attempts)!r}, 'a').write('x'); {script}"
    monkeypatch.setattr(pipeline_module, "repro_command", lambda stage, force=False: [sys.executable, "-c", counted])
    with pytest.raises(StageFailed) as failure:
        one_stage("train@x")
    assert attempts.read_text() == ("x" if user_error else "xx")
    message = str(failure.value)
    assert message.startswith("stage train@x failed") and failure.value.user_error is user_error
    if user_error:
        assert message.endswith("error: bad params: seed: must be >= 0") and "loading" not in message
    else:
        assert "exit status" in message and ("training" in message or "Killed" in message)
    # python -m flows.pipeline ends with this one line, not a traceback (run_stage prints a PipelineError)
    assert isinstance(failure.value, PipelineError)


def test_a_passing_stage_runs_once(prefect_server, tmp_path, monkeypatch):
    attempts = tmp_path / "attempts"
    monkeypatch.setattr(pipeline_module, "repro_command",
                        lambda stage, force=False: [sys.executable, "-c", f"open({str(attempts)!r}, 'a').write('x')"])
    one_stage("ok")
    assert attempts.read_text() == "x"


@pytest.mark.parametrize("key", ["ablation.models", "probe.models", "scalar_mix.models", "attributions.models",
                                 "finetune.baselines", "compression.students", "compression.prune.models",
                                 "hub_models", "curves.tasks", "pretrain.snapshots"])
def test_every_data_dep_is_made_by_a_stage_when_an_analysis_list_is_empty(key, tmp_path):
    """A stage whose dep no stage makes fails at the end of a whole run (``dvc repro``: missing dependency): with any
    one list of analyses, models or mixtures emptied in params.yaml, each stage's deps are still another stage's
    outputs (or hold some), or a file git tracks."""
    import subprocess

    import yaml
    from dvc.repo import Repo

    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    *parents, last = key.split(".")
    section = params
    for part in parents:
        section = section[part]
    section[last] = {} if isinstance(section[last], dict) else []
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    (tmp_path / "dvc.yaml").write_bytes((ROOT / "dvc.yaml").read_bytes())
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    Repo.init(str(tmp_path))
    tracked = set(subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split())
    stages = Repo(str(tmp_path)).index.stages
    outs = {str(o.def_path) for s in stages for o in s.outs}
    missing = {(s.name, str(d.def_path)) for s in stages for d in s.deps if not hasattr(d, "params")
               and not any(t == d.def_path or t.startswith(d.def_path + "/") for t in tracked)
               and not any(d.def_path == o or d.def_path.startswith(o + "/") or o.startswith(d.def_path + "/")
                           for o in outs)}
    assert not missing, f"{key}: [] leaves deps no stage makes: {sorted(missing)}"
