"""dvc.yaml's code deps are exactly each flow's import closure, as one fingerprint per stage: a module a
stage imports but its fingerprint misses would leave a stale artifact; one it holds but the stage never
imports reruns it for nothing. The packages of tasks/ import each other without a cycle."""

import ast
import shutil
import textwrap
from pathlib import Path

import networkx as nx
import yaml

from tasks.orchestration.code_deps import code_dep_problems, import_closure, main, write_code_deps, write_fingerprints
from tests.conftest import ROOT


def test_every_stage_declares_exactly_the_code_it_imports():
    assert code_dep_problems(ROOT) == {}


def _doctored(tmp_path: Path, edit) -> Path:
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    out = tmp_path / "dvc.yaml"
    out.write_text(edit(text), encoding="utf-8")
    return out


def _copy(tmp_path: Path) -> Path:
    """A copy of the project's code, dvc.yaml and fingerprints in ``tmp_path``."""
    for name in ("tasks", "flows", "fingerprints"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "dvc.yaml", tmp_path)
    return tmp_path


def test_an_edit_makes_stale_the_fingerprints_of_exactly_the_stages_that_import_the_file(tmp_path):
    root = _copy(tmp_path)
    with (root / "tasks" / "downstream" / "ner.py").open("a") as f:
        f.write("# an edit\n")
    stale = {stage for stage, found in code_dep_problems(root).items() if found["stale"]}
    importing = {f.stem for f in (root / "fingerprints").glob("*.txt") if "  tasks/downstream/ner.py\n" in f.read_text()}
    assert stale == importing
    assert {"finetune", "finetune_random", "probe", "distill", "prune"} <= stale
    assert not stale & {"ingest", "segment", "tokenize", "acquire", "pretrain"}  # they never import ner.py
    assert write_code_deps(root) == []  # dvc.yaml's lines stay; only the fingerprints change


def test_a_code_file_as_a_dep_or_a_missing_fingerprint_is_reported(tmp_path):
    # ingest reads no model: a training module listed among its deps is over-broad
    doctored = _doctored(tmp_path, lambda t: t.replace("      - fingerprints/ingest.txt\n",
                                                       "      - fingerprints/ingest.txt\n      - tasks/training/optim.py\n",
                                                       1).replace("      - fingerprints/segment.txt\n", "", 1))
    problems = code_dep_problems(ROOT, doctored)
    assert problems["ingest"]["over_broad"] == ["tasks/training/optim.py"]
    assert problems["segment"]["missing"] == ["fingerprints/segment.txt"]
    assert set(problems) == {"ingest", "segment"}


def test_the_check_fails_with_the_command_that_fixes_it(tmp_path, monkeypatch, capsys):
    root = _copy(tmp_path)
    _doctored(root, lambda t: t.replace("      - fingerprints/segment.txt\n", "", 1))
    (root / "fingerprints" / "tokenize.txt").unlink()
    monkeypatch.chdir(root)
    assert main([]) == 1
    out, err = capsys.readouterr()
    assert "segment: missing code deps fingerprints/segment.txt" in out and "--write" in err
    assert "tokenize: stale code deps fingerprints/tokenize.txt" in out
    assert main(["--write"]) == 0 and main([]) == 0  # written back, exact again
    assert (root / "dvc.yaml").read_text(encoding="utf-8") == (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    assert (root / "fingerprints" / "tokenize.txt").read_text() == (ROOT / "fingerprints" / "tokenize.txt").read_text()


def _project(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)


def test_closure_follows_function_level_and_package_imports_and_named_templates(tmp_path):
    files = {
        "flows/__init__.py": "import tasks\n",
        "flows/x.py": "from tasks.a import b\n\ndef run():\n    from tasks.c.d import e  # lazy\n    return render('page.md.j2')\n",
        "tasks/__init__.py": "",
        "tasks/a.py": "b = 1\n",
        "tasks/c/__init__.py": "",
        "tasks/c/d.py": "from tasks.c import f\ne = 2\n",
        "tasks/c/f.py": "",
        "tasks/c/templates/page.md.j2": '{% extends "base.md.j2" %}\n',
        "tasks/c/templates/base.md.j2": "",
        "tasks/c/templates/other.md.j2": "",
        "tasks/unused.py": "",
    }
    _project(tmp_path, files)
    closure = {str(p) for p in import_closure(tmp_path, "flows.x")}
    assert closure == set(files) - {"tasks/unused.py", "tasks/c/templates/other.md.j2"}


def test_a_stage_depends_on_the_schemas_of_the_params_it_reads_only(tmp_path):
    """Every stage imports every section's schema to validate params.yaml, but an edit to a section
    it does not read cannot change its results: its code deps hold the schemas of its declared
    keys and of the names it imports from the params package."""
    files = {
        "flows/__init__.py": "",
        "flows/x.py": "from tasks.core.params import load_params\nfrom tasks.y import z\n",
        "tasks/__init__.py": "", "tasks/core/__init__.py": "",
        "tasks/y.py": "from tasks.core.params import Gamma\nz = 1\n",
        "tasks/core/params/__init__.py": ("from tasks.core.params.base import Strict\n"
                                          "from tasks.core.params.a import Alpha\nfrom tasks.core.params.b import Beta\n"
                                          "from tasks.core.params.c import Gamma\n\n"
                                          "class Params(Strict):\n    seed: int\n    alpha: dict[str, Alpha]\n"
                                          "    beta: Beta\n    gamma: Gamma\n"),
        "tasks/core/params/base.py": "class Strict: ...\n",
        "tasks/core/params/a.py": "from tasks.core.params.base import Strict\nclass Alpha(Strict): ...\n",
        "tasks/core/params/b.py": "from tasks.core.params.base import Strict\nclass Beta(Strict): ...\n",
        "tasks/core/params/c.py": "from tasks.core.params.base import Strict\nclass Gamma(Strict): ...\n",
    }
    _project(tmp_path, files)
    closure = {str(p) for p in import_closure(tmp_path, "flows.x", {"seed", "alpha"})}
    assert closure == set(files) - {"tasks/core/params/b.py"}  # c.py: tasks/y.py imports Gamma
    assert {str(p) for p in import_closure(tmp_path, "flows.x")} == set(files)  # no keys given: every import


def test_write_replaces_only_the_code_deps_and_writes_the_fingerprints(tmp_path):
    _project(tmp_path, {"flows/__init__.py": "", "flows/x.py": "import tasks.a\n", "tasks/__init__.py": "",
                        "tasks/a.py": "", "tasks/b.py": ""})
    (tmp_path / "dvc.yaml").write_text(textwrap.dedent("""\
        stages:
          code:
            cmd: python -m tasks.orchestration.code_deps --fingerprint
            deps: [tasks, flows]
            outs:
              - fingerprints/old.txt: {cache: false}
          x: &x
            cmd: python -m flows.x
            deps:
              # code
              - tasks/b.py
              # data
              - data/in.txt
          y:
            <<: *x
            deps:
              # code
              # data
              - data/in.txt
        """))
    assert write_code_deps(tmp_path) == ["code", "x", "y"]
    spec = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    assert spec["x"]["deps"] == ["fingerprints/x.txt", "data/in.txt"]
    assert spec["code"]["outs"] == [{"fingerprints/x.txt": {"cache": False}}, {"fingerprints/y.txt": {"cache": False}}]
    assert set(code_dep_problems(tmp_path)) == {"x", "y"}  # no fingerprint written yet
    assert write_fingerprints(tmp_path) == ["fingerprints/x.txt", "fingerprints/y.txt"]
    text = (tmp_path / "fingerprints" / "x.txt").read_text()
    assert [line.split("  ")[1] for line in text.splitlines()] == ["flows/__init__.py", "flows/x.py",
                                                                    "tasks/__init__.py", "tasks/a.py"]
    assert code_dep_problems(tmp_path) == {} and write_code_deps(tmp_path) == []


def test_no_import_cycle_between_the_packages_of_tasks():
    """Package A imports package B (``tasks.a.*`` -> ``tasks.b.*``): the graph is acyclic, so each
    section of the pipeline can be read (and changed) without the ones that build on it."""
    graph = nx.DiGraph()
    for path in (ROOT / "tasks").rglob("*.py"):
        package = path.relative_to(ROOT / "tasks").parts[0]
        if package.endswith(".py"):
            continue
        graph.add_node(package)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "tasks" and len(parts) > 1 and parts[1] != package:
                    graph.add_edge(package, parts[1])
    assert list(nx.simple_cycles(graph)) == []
    assert "core" in graph and not list(graph.successors("core"))  # core builds on no section


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


def test_every_lock_entry_and_tracked_metrics_file_belongs_to_a_stage_of_dvc_yaml():
    """Nothing dead: each entry of dvc.lock is a stage dvc.yaml declares under the committed params, and
    each file git tracks under metrics/ is a metric or plot of one (a newcomer reading metrics/ sees
    one run, the current one)."""
    import subprocess

    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        stages = {s.addressing: s for s in repo.index.stages}
    lock = yaml.safe_load((ROOT / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    assert sorted(set(lock) - set(stages)) == []
    declared = {str(out.fs_path).removeprefix(str(ROOT) + "/") for s in stages.values() for out in s.outs}
    tracked = subprocess.run(["git", "ls-files", "metrics"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    assert sorted(t for t in set(tracked) - declared if not t.endswith("/.gitignore")) == []


def test_every_stage_but_the_code_fingerprints_and_acquire_can_be_restored_from_the_run_cache():
    """DVC keeps no run cache for a stage with an uncached out that is not a metric or plot
    (``no_cache_outs`` in ``dvc/stage/__init__.py``): such a stage, run again under params it ran
    with before, runs for real. Only the fingerprints (git-tracked by design, a second's work) and
    the corpora's manifest (acquire's, a copy of packaged files) may be such outs."""
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        uncached = {s.name.split("@")[0] for s in repo.index.stages
                    for out in s.outs if not (out.use_cache or out.is_metric or out.is_plot)}
    assert uncached <= {"code", "acquire"}
