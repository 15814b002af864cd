"""The MDE planner (tasks/report/planner.py) and the study's refusal to run over uncommitted changes
(tasks/orchestration/study.py)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from tasks.orchestration.units import estimate_minutes, plan_units
from tasks.report.planner import costs, markdown, plan
from tasks.report.variance import Decomposition
from tests.conftest import ROOT
from tasks.core.params import load_params
from tasks.orchestration import study

COMPONENTS = {"pretraining_seed": 4.0, "finetuning_seed": 1.0, "test_sample": 6.0, "run_noise": 2.0, "examples": 1000,
              "procedure": "mlm", "seeds": 5, "finetune_seeds": 3}
COST = {"pretrain_min": 6.0, "pretrain_flops": 3e13, "finetune_min": {"t": 0.5}, "test_examples": {"t": 4000}}


def test_planned_variance_drops_the_examples_difficulty_and_shrinks_with_replication():
    d = Decomposition(4.0, 1.0, 6.0, 2.0, 1000)
    assert d.paired_variance(5, 3, 1000) == pytest.approx(2 * (4 / 5 + (1 + 2) / 15))
    assert d.paired_variance(5, 3, 4000) == pytest.approx(2 * (4 / 5 + (1 + 0.5) / 15))  # 4x the examples
    assert d.planned_mde(10, 3, 1000) < d.planned_mde(5, 3, 1000)
    assert np.isnan(d.planned_mde(1, 1, 1000)) and np.isnan(d.planned_mde(2, 3, 1000))  # under 3 replicates, none


def test_the_plan_is_the_cheapest_design_that_reaches_the_target():
    (row,) = plan({"t": COMPONENTS}, COST, target=2.0, gpu_rate=1e14)
    assert row["mde"] <= 2.0 and row["test_examples"] == 4000
    d = Decomposition(4.0, 1.0, 6.0, 2.0, 1000)
    cheaper = [(s, f) for s in range(2, 51) for f in range(1, 11)
               if 2 * s * 6 + 2 * s * f * 0.5 < row["minutes"] and d.planned_mde(s, f, 4000, estimated_df=4) <= 2.0]
    assert cheaper == []
    assert row["gpu_hours"] == pytest.approx(2 * row["seeds"] * 3e13 / 1e14 / 3600)
    (unreachable,) = plan({"t": COMPONENTS}, COST, target=0.01, gpu_rate=None)
    assert unreachable["seeds"] is None and unreachable["best_reachable"] > 0.01
    assert "none within 50 x 10" in markdown([unreachable])


def test_the_study_refuses_uncommitted_changes_and_leaves_them(tmp_path, monkeypatch, capsys):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "params.yaml").write_text("seed: 1\n", encoding="utf-8")
    subprocess.run(["git", "add", "."], cwd=tmp_path, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], cwd=tmp_path, check=True)
    (tmp_path / "params.yaml").write_text("seed: 2\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert study.main(["study"]) == 2
    assert "params.yaml" in capsys.readouterr().err
    assert (tmp_path / "params.yaml").read_text(encoding="utf-8") == "seed: 2\n"  # the edit is kept
    assert study.main(["study", "--queue"]) == 2 and not (tmp_path / "reports").exists()
    assert json.loads(json.dumps(study.STUDIES["study"]))["compare"] == "[mlm,wwm,mac,electra]"


def test_a_study_with_invalid_overrides_is_refused_before_any_experiment(monkeypatch, capsys):
    monkeypatch.setattr(study, "uncommitted", lambda: [])
    monkeypatch.setattr(study, "_run", lambda *a: pytest.fail("an experiment ran"))
    assert study.main(["study", "-S", "finetune.tasks=[sentiment]", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert "finetune.baseline_tasks: 'lcqmc' is not in finetune.tasks" in err and "-S finetune.tasks=[sentiment]" in err
    reduced = {"finetune.tasks": "[sentiment]", "finetune.baseline_tasks": "[sentiment]", "curves.tasks": "[]",
               "ablation.models": "[]",
               "compression.tasks": "[sentiment]",
               "~sweep.settings.lr5e-4": None}
    study.check_params({**study.STUDIES["study"], **reduced})  # a valid reduced study passes
    # docs/running.md's reduced study (an emptied list after the study's lists: no second dump to break it)
    study.check_params({**study.STUDIES["study"], **reduced, "finetune.baselines": "[]", "pretrain.threads": "1"})


def test_a_study_warns_when_its_workers_threads_exceed_the_cores(monkeypatch, capsys):
    """``pretrain.threads`` fixes a pretraining's weights whatever --workers says (tests/test_pretrain.py);
    workers x threads over the cores thrash, and the study says so, with the count that fits, before it starts."""
    monkeypatch.setattr(study, "uncommitted", lambda: [])
    monkeypatch.setattr(study.os, "sched_getaffinity", lambda _: {0, 1})

    def stop(*args):
        raise SystemExit(0)

    monkeypatch.setattr(study, "run_study", stop)
    with pytest.raises(SystemExit):
        study.main(["study", "--workers", "2"])  # params.yaml: 2 threads
    err = capsys.readouterr().err
    assert "2 workers x pretrain.threads 2 > 2 cores" in err and "-S pretrain.threads=1 fits them" in err
    with pytest.raises(SystemExit):
        study.main(["study", "--workers", "2", "-S", "pretrain.threads=1"])
    assert "thrash" not in capsys.readouterr().err


def test_a_study_is_cut_into_units_each_recipe_then_seed_by_seed_then_the_baselines():
    checked = study.check_params({"compare": "[mlm,wwm]", "pretrain.seeds": "[43,42]", "curves.tasks": "[msra_ner]",
                                  "finetune.baseline_tasks": "[sentiment]"})
    units = plan_units(checked)
    assert [u.name for u in units] == ["recipe-mlm", "recipe-wwm", "mlm-43", "wwm-43", "random-43", "mlm-42", "wwm-42",
                                       "random-42", "albert_tiny"]
    assert units[0].stages == ("pretraining_data@mlm-42", "sweep@mlm")  # the sweep trains on sweep.seed's data
    mlm = units[2].stages
    assert mlm[:3] == ("pretraining_data@mlm-43", "pretrain@mlm-43", "curves@mlm-43") and \
        "finetune@mlm-43-msra_ner" in mlm and "finetune_snapshot@mlm-43@0.125-msra_ner" in mlm
    assert units[4].stages == ("init_random@43", *(f"finetune_random@43-{t}" for t in checked.finetune.tasks))
    assert units[-1].stages == ("finetune_baseline@albert_tiny-sentiment",)  # the study's finetune.baseline_tasks
    # a stage is in one unit, but for the data the sweeps train on (its recipe's and its seed's: either may run first)
    stages = [s for u in units for s in u.stages if s not in ("pretraining_data@mlm-42", "pretraining_data@wwm-42")]
    assert len(stages) == len(set(stages))


def test_a_unit_is_estimated_from_the_finished_units_of_its_procedure_else_of_its_kind(tmp_path):
    units = plan_units(study.check_params({"compare": "[mlm,wwm,electra]", "pretrain.seeds": "[42,43,44]"}))
    (tmp_path / "units").mkdir()
    for name, seconds in (("mlm-42", 600), ("electra-42", 1200)):
        (tmp_path / "units" / f"{name}.yaml").write_text(  # a record as run_unit writes it, one stage
            f"unit: {name}\nwall_sec: {seconds}\nstages:\n  s:\n    cmd: c\n    deps: []\n"
            "    outs: [{path: o, md5: 0}]\n")
    minutes = {u.name: estimate_minutes(u, tmp_path, units, None) for u in units if u.kind == "pretrained"}
    assert minutes["electra-43"] == 20 and minutes["mlm-44"] == 10  # an ELECTRA pretraining costs about twice
    assert minutes["wwm-42"] == 15  # none of its own finished: the mean of its kind


def test_the_planners_costs_are_numbers_when_a_pretraining_recorded_no_flops(tmp_path):
    """Its GPU column was NaN: the mean of a pretraining's FLOPs took one metrics file without them as NaN."""
    metrics = ROOT / "metrics"
    (tmp_path / "metrics" / "pretrain").mkdir(parents=True)
    for name in ("mlm-42", "wwm-42"):  # a second pretraining, from the committed one: the one without FLOPs
        shutil.copy(metrics / "pretrain" / "mlm-42.json", tmp_path / "metrics" / "pretrain" / f"{name}.json")
    shutil.copytree(metrics / "finetune", tmp_path / "metrics" / "finetune")
    shutil.copytree(metrics / "downstream", tmp_path / "metrics" / "downstream")
    old = json.loads((tmp_path / "metrics" / "pretrain" / "wwm-42.json").read_text())
    del old["flops"]
    (tmp_path / "metrics" / "pretrain" / "wwm-42.json").write_text(json.dumps(old))
    cost = costs(tmp_path)
    flops = json.loads((metrics / "pretrain" / "mlm-42.json").read_text())["flops"]
    assert cost["pretrain_flops"] == flops and cost["pretrain_min"] > 0
    (row,) = plan({"msra_ner": COMPONENTS}, cost, target=5.0, gpu_rate=1e14)
    assert row["gpu_hours"] == pytest.approx(2 * row["seeds"] * flops / 1e14 / 3600)


def test_a_one_seed_study_gets_a_plan_that_says_it_cannot_plan_seeds(tmp_path):
    """``make compare`` (one pretraining seed) crashed the planner: an MDE of NaN went into plan.json."""
    from tasks.report.planner import main

    for part in ("pretrain", "finetune", "downstream"):
        shutil.copytree(ROOT / "metrics" / part, tmp_path / "metrics" / part)
    one_seed = {**COMPONENTS, "seeds": 1, "finetune_seeds": 2, "pretraining_seed": None}
    (tmp_path / "variance.json").write_text(json.dumps({"sentiment": one_seed}))
    assert main([str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "plan.json").read_text())
    assert row["unplanned"] == "one pretraining seed: its variance is not estimated" and row["seeds"] is None
    assert row["mde_study_design_full_test"] is None
    assert "one pretraining seed" in (tmp_path / "plan.md").read_text()
    # two seeds: the components plan designs, but the study's own (2 replicates) has no MDE, as compare gives none
    (row,) = plan({"t": {**COMPONENTS, "seeds": 2}}, COST, target=2.0, gpu_rate=None)
    assert row["mde_study_design_full_test"] is None and row["seeds"] >= 3


def test_the_gpu_column_names_the_gpu_its_rate_was_measured_on():
    from tasks.report.planner import GPU_CHECK, gpu_flops_per_sec

    gpu, rate = gpu_flops_per_sec(ROOT / GPU_CHECK)
    assert gpu and rate > 1e12
    assert f"GPU hours ({gpu}, lower bound)" in markdown([], gpu)
    assert gpu_flops_per_sec(ROOT / "no-such-file.json") == (None, None)



@pytest.mark.parametrize("override, reason", [
    ("pretrain.nosuchkey=3", "Could not override 'pretrain.nosuchkey'"),
    ("pretrain.learning_rate=[1", "no viable alternative at input '[1'"),
])
def test_a_study_override_with_an_unknown_key_or_bad_syntax_is_one_line_naming_it(monkeypatch, capsys, override,
                                                                                   reason):
    monkeypatch.setattr(study, "uncommitted", lambda: [])
    monkeypatch.setattr(study, "_run", lambda *a: pytest.fail("an experiment ran"))
    assert study.main(["study", "-S", override]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"study: -S {override}: {reason}")


def test_a_study_with_no_workers_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        study.main(["study", "--workers", "0"])
    assert stop.value.code == 2 and "'0' is not a number of workers" in capsys.readouterr().err


def test_a_stopped_full_run_leaves_no_temporary_workspace(tmp_path, monkeypatch):
    """Every stopped `make full` (SIGTERM or Ctrl-C) left `.dvc/tmp/exps/standalone/tmp*/` behind (4 of 4)."""
    import os
    import signal
    monkeypatch.chdir(tmp_path)
    kept = tmp_path / study.EXP_TEMPS / "tmpolder"  # another run's: not the study's to remove
    kept.mkdir(parents=True)
    monkeypatch.setattr(study, "uncommitted", lambda: [])
    monkeypatch.setattr(study, "check_params", lambda params: load_params(ROOT / "params.yaml"))

    def killed_while_running(cmd, log, env=None):
        (tmp_path / study.EXP_TEMPS / "tmpabc123" / "params.yaml").parent.mkdir()
        os.kill(os.getpid(), signal.SIGTERM)  # what `kill <study>` sends
        pytest.fail("SIGTERM did not stop the study")

    monkeypatch.setattr(study, "_run", killed_while_running)
    with pytest.raises(KeyboardInterrupt):
        study.main(["full"])
    assert [p.name for p in (tmp_path / study.EXP_TEMPS).iterdir()] == ["tmpolder"]
    assert signal.getsignal(signal.SIGTERM) is not study._stop


def test_a_recipe_that_chose_as_before_leaves_its_seeds_committed_units_done(tmp_path, monkeypatch):
    """After the recipes ran again (a changed sweep param), DVC is asked again which units are done: a seed's
    committed unit whose recipe output came out the same is not run (nor its record rewritten)."""
    import contextlib
    import io

    from tasks.orchestration import units as u

    units = plan_units(study.check_params({"compare": "[mlm,wwm]"}))
    ran = []
    monkeypatch.setattr(u, "workspace", lambda path, *args: contextlib.nullcontext(path))
    monkeypatch.setattr(u, "prefix", lambda space, all_units: [])
    monkeypatch.setattr(u, "run_unit", lambda space, out, unit, *a, **k: ran.append(unit.name) or {"wall_sec": 60})
    monkeypatch.setattr(u, "done", lambda space, out, all_units: {x.name: x.name in ("mlm-42", "random-42")
                                                                  for x in all_units})
    log = io.StringIO()
    todo = [x for x in units if x.name != "random-42"]  # random-42 was done before; mlm-42 waited for its recipe
    u.run_units(tmp_path, todo, units, [], 1, log)
    assert ran == ["recipe-mlm", "recipe-wwm", "wwm-42", "albert_tiny"]
    assert "the recipes chose as before: mlm-42 still done; 4 of 6 units done" in log.getvalue()


def test_two_workers_seeds_train_with_every_recipe_whichever_worker_chose_it(tmp_path, monkeypatch):
    """With ``--workers 2`` each recipe was chosen in one workspace, and a seed that landed in the other found no
    ``data/recipes/<objective>.json`` (the first seed of each objective failed so). Real DVC, in two real
    workspaces: each seed reads both recipes, so a workspace missing either fails it whatever the scheduling."""
    import io
    import sys

    from tasks.orchestration import units as u

    repo, python = tmp_path / "repo", sys.executable
    repo.mkdir()
    (repo / "write.py").write_text("import pathlib, sys\nout = pathlib.Path(sys.argv[1])\n"  # OUT, then texts or files
                                   "out.parent.mkdir(parents=True, exist_ok=True)\n"
                                   "out.write_text(''.join(open(a).read() if '/' in a else a for a in sys.argv[2:]))\n")
    one = lambda out, *args, **stage: {"cmd": " ".join([python, "write.py", out, *args]), **stage}  # noqa: E731
    (repo / "dvc.yaml").write_text(yaml.safe_dump({"stages": {
        "base": one("data/base.txt", "base", outs=["data/base.txt"]),
        "sweep": {"foreach": ["a", "b"], "do": one("data/recipes/${item}.json", "${item}", deps=["data/base.txt"],
                                                   outs=["data/recipes/${item}.json"])},
        "train": {"foreach": ["a", "b"], "do": one("metrics/${item}.txt", "data/recipes/a.json", "data/recipes/b.json",
                                                   deps=["data/recipes/a.json", "data/recipes/b.json"],
                                                   outs=[{"metrics/${item}.txt": {"cache": False}}])}}}))
    (repo / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")  # a study's workspace starts from the committed lock
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([python, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    units = [u.Unit("recipe-a", "recipe", ("sweep@a",)), u.Unit("recipe-b", "recipe", ("sweep@b",)),
             u.Unit("a-1", "pretrained", ("train@a",)), u.Unit("b-1", "pretrained", ("train@b",))]
    monkeypatch.chdir(repo)
    log = io.StringIO()
    records = u.run_units(repo / "studies" / "s", units, units, [], 2, log)
    assert sorted(r["unit"] for r in records) == ["a-1", "b-1", "recipe-a", "recipe-b"], log.getvalue()
    assert [(repo / "studies" / "s" / "metrics" / f"{x}.txt").read_text() for x in "ab"] == ["ab", "ab"]
    assert "4 of 4 units done" in log.getvalue()


def test_a_workers_unit_never_changes_the_process_cwd(tmp_path, monkeypatch):
    """``--workers N`` runs units in threads of one process, whose cwd they share: a ``chdir`` in one made another's
    relative workspace path name the wrong folder (the first two-worker study failed so). Reading a workspace's
    stages (:func:`units.keep`, :func:`units.prefix`) works from any cwd, without ``chdir``, in a thread."""
    import threading

    from tasks.orchestration import units

    space, study_dir, elsewhere = tmp_path / "space", tmp_path / "study", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (space / ".dvc").mkdir(parents=True)  # what `dvc init --no-scm` writes (its logger is not the test's)
    (space / ".dvc" / "config").write_text("[core]\n    no_scm = True\n")
    (space / "dvc.yaml").write_text("stages:\n  first:\n    cmd: echo\n    outs: [{data/a.txt: {cache: false}}]\n"
                                    "  second:\n    cmd: echo\n    deps: [data/a.txt]\n"
                                    "    outs: [{metrics/b.json: {cache: false}}]\n")
    for path, text in (("data/a.txt", "a"), ("metrics/b.json", "{}")):
        (space / path).parent.mkdir(parents=True, exist_ok=True)
        (space / path).write_text(text)
    monkeypatch.chdir(elsewhere)
    chdir, chdirs = os.chdir, []

    def watched(path):  # the main thread's (monkeypatch's own) go through
        if threading.current_thread() is not threading.main_thread():
            chdirs.append(path)
        chdir(path)

    monkeypatch.setattr(os, "chdir", watched)
    found = {}
    worker = threading.Thread(target=lambda: found.update(
        prefix=units.prefix(space, [units.Unit("u", "pretrained", ("second",))]),
        kept=units.keep(space, study_dir, ["second"])))
    worker.start()
    worker.join()
    assert found == {"prefix": ["first"], "kept": None} and chdirs == [] and Path.cwd() == elsewhere
    assert (study_dir / "metrics" / "b.json").read_text() == "{}" and not (study_dir / "data").exists()


def test_a_workspace_fingerprints_its_own_code_so_a_stale_committed_fingerprint_reruns_its_units(tmp_path):
    """A code edit committed without `code_deps --write` left the committed fingerprints stale, and every unit
    whose stages that code runs still read "done": the workspace now writes the fingerprints of its own code."""
    import sys

    from tasks.orchestration import units as u

    repo, git = tmp_path / "repo", ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    repo.mkdir()
    for folder in ("tasks", "flows", "fingerprints"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for file in ("dvc.yaml", "dvc.lock", "params.yaml"):
        shutil.copy(ROOT / file, repo / file)
    (repo / "fingerprints" / "pretrain.txt").write_text("stale: the code changed after this was written\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([sys.executable, "-m", "dvc", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    space = tmp_path / "space"
    u._fill(space, repo, tmp_path / "study", [], [])
    assert (space / "fingerprints" / "pretrain.txt").read_text() == (ROOT / "fingerprints" / "pretrain.txt").read_text()


CUT = (ROOT / "reports/study/units/albert_tiny.yaml").read_text(encoding="utf-8")
CUT = CUT[:CUT.index("md5:", len(CUT) // 2)]  # a committed record cut inside one of its outs


@pytest.mark.parametrize("text", [CUT, "\x00\x9f garbage", "[1, 2", "just a line\n", "stages: 3\n"])
def test_a_damaged_unit_record_is_one_error_naming_the_file_and_the_way_back(tmp_path, text):
    """A cut, garbage or bad-YAML unit file stopped `make study` with a YAML or TypeError traceback naming no file."""
    from tasks.core.errors import SourceError
    from tasks.orchestration import units as u

    (tmp_path / "units").mkdir()
    (tmp_path / "units" / "mlm-42.yaml").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(SourceError, match=r"units/mlm-42.yaml: not a unit record \(.+\): restore it \(`git checkout "
                                          r"-- .+mlm-42.yaml`\) or delete it to run the unit again$"):
        u.read_unit(tmp_path, u.Unit("mlm-42", "pretrained", ("pretrain@mlm-42",)))
