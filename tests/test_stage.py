"""The stage entry point: user errors and an unreachable Prefect server give one
``error:`` line and a non-zero exit, never a traceback; ``--help`` gives the usage; runs are named."""

import os
import subprocess
import sys
import textwrap

from tests.conftest import ROOT

STAGE = textwrap.dedent("""
    import sys
    from prefect import flow
    from tasks.core.errors import ParamsError
    from tasks.core.stage import run_stage, stage_task

    @stage_task
    def allocate():
        import torch
        return torch.empty(2**40, dtype=torch.uint8)  # 1 TiB: torch's CPU allocator refuses it

    @flow(name="trivial")
    def trivial(what):
        if what == "bad":
            raise ParamsError("seed: must be >= 0")
        if what == "oom":
            allocate()
        print("ran")

    run_stage(trivial, *sys.argv[1:], memory="pretrain.batch_size")
""")


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"} | env
    return subprocess.run([sys.executable, "-c", STAGE, *args], cwd=ROOT, env=environ, capture_output=True,
                          text=True, timeout=300)


def test_unreachable_prefect_server_is_one_clear_line():
    url = "http://127.0.0.1:9/api"
    proc = run("good", PREFECT_API_URL=url)
    assert proc.returncode == 1 and "ran" not in proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"error: no Prefect server answers at {url} ") and "unset PREFECT_API_URL" in lines[0]


def test_stage_runs_and_reports_a_user_error_on_a_live_server(prefect_server):
    ok = run("good", PREFECT_API_URL=prefect_server)
    assert ok.returncode == 0 and "ran" in ok.stdout, ok.stderr
    bad = run("bad", PREFECT_API_URL=prefect_server)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert [line for line in bad.stderr.splitlines() if line.startswith("error:")] == ["error: seed: must be >= 0"]


def test_out_of_memory_is_one_line_with_the_stage_the_size_and_the_knob(prefect_server):
    proc = run("oom", PREFECT_API_URL=prefect_server, DVC_STAGE="pretrain@mlm-42")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("error: out of memory in stage pretrain@mlm-42: an allocation of 1,048,576.0 MiB "
                                "failed; ") and "MiB available now; lower pretrain.batch_size" in errors[0]


def test_the_flow_run_is_named_after_the_stage_and_its_arguments(prefect_server):
    import json
    import urllib.request

    assert run("good", PREFECT_API_URL=prefect_server).returncode == 0
    request = urllib.request.Request(f"{prefect_server}/flow_runs/filter", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        names = {run["name"] for run in json.load(answer)}
    assert "trivial good" in names, names


def test_help_and_wrong_arguments_print_the_usage_not_a_traceback():
    helped = subprocess.run([sys.executable, "-m", "flows.finetune", "--help"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert helped.returncode == 0 and "Traceback" not in helped.stderr, helped.stderr
    assert helped.stdout.startswith("usage: python -m flows.finetune MODEL_NAME TASK_NAME\n\nStages ``finetune@")
    wrong = run("good", "extra")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr and "ran" not in wrong.stdout
    assert wrong.stderr.splitlines()[:2] == ["error: too many positional arguments", "usage: -c WHAT"], wrong.stderr


def test_every_stage_module_prints_its_usage(capsys):
    import importlib

    import pytest
    from prefect import Flow

    from tasks.core.stage import run_stage

    for file in sorted((ROOT / "flows").glob("*.py")):
        if file.stem in ("__init__", "pipeline"):  # pipeline's own argparse has --help
            continue
        module = importlib.import_module(f"flows.{file.stem}")
        flows = [v for v in vars(module).values() if isinstance(v, Flow) and v.fn.__module__ == module.__name__]
        assert len(flows) == 1, (file, flows)
        with pytest.raises(SystemExit) as stopped:
            run_stage(flows[0], "--help")
        assert stopped.value.code == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: python -m flows.{file.stem}") and "\n\nStage" in out, (file, out)
