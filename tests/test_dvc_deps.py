"""dvc.yaml declares every project module each stage runs: derived from the flows' import
closures, so editing any module a stage imports makes DVC rerun that stage."""

import textwrap

import yaml

from tasks.orchestration.code_deps import import_closure, missing_code_deps
from tests.conftest import ROOT


def test_every_stage_declares_the_code_it_imports():
    assert missing_code_deps(ROOT) == {}


def test_a_module_dropped_from_a_stage_is_reported(tmp_path):
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
    deps = spec["stages"]["finetune"]["deps"]
    deps.remove("tasks/training")  # the optimizer, LR schedule and batching of fine-tuning
    incomplete = tmp_path / "dvc.yaml"
    incomplete.write_text(yaml.safe_dump(spec), encoding="utf-8")
    missing = missing_code_deps(ROOT, incomplete)
    assert set(missing) == {"finetune", "finetune_baseline"}  # the baseline shares finetune's definition
    assert {"tasks/training/optim.py", "tasks/training/batching.py", "tasks/training/device.py"} <= set(
        missing["finetune"])


def test_closure_follows_function_level_and_package_imports(tmp_path):
    files = {
        "flows/__init__.py": "import tasks\n",
        "flows/x.py": "from tasks.a import b\n\ndef run():\n    from tasks.c.d import e  # lazy\n",
        "tasks/__init__.py": "",
        "tasks/a.py": "b = 1\n",
        "tasks/c/__init__.py": "",
        "tasks/c/d.py": "from tasks.c import f\ne = 2\n",
        "tasks/c/f.py": "",
        "tasks/unused.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    closure = {str(p) for p in import_closure(tmp_path, "flows.x")}
    assert closure == set(files) - {"tasks/unused.py"}
    (tmp_path / "dvc.yaml").write_text(textwrap.dedent("""\
        stages:
          x:
            cmd: python -m flows.x
            deps: [flows/__init__.py, flows/x.py, tasks/__init__.py, tasks/a.py, tasks/c/__init__.py, tasks/c/d.py]
        """))
    assert missing_code_deps(tmp_path) == {"x": ["tasks/c/f.py"]}


def test_bytecode_caches_do_not_change_code_folder_hashes():
    ignored = (ROOT / ".dvcignore").read_text().split()
    assert "__pycache__/" in ignored and "*.pyc" in ignored


def test_only_the_report_depends_on_metrics():
    """Metrics files carry timings (wall seconds, tokens/s), which change on every run: a stage
    depending on one would rerun after any rerun upstream, even one that gave the same bytes
    (e.g. in every fresh clone). Results a stage needs come from outputs, which are reproducible."""
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))["stages"]
    on_metrics = {name for name, stage in stages.items()
                  for dep in stage.get("do", stage).get("deps", []) if str(dep).split("/")[0] == "metrics"}
    assert on_metrics == {"report"}
