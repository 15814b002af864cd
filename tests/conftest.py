"""Shared fixtures: a Prefect test server, and a small self-contained project directory."""

import os
import shutil
import time
from pathlib import Path

import pytest
import yaml

# make test runs two workers on two cores, and each stage a test starts inherits this: a test model
# (hidden size 32) gains nothing from intra-op threads, and two workers' threads would thrash
os.environ.setdefault("OMP_NUM_THREADS", "1")

import tasks  # noqa: F401  (offline environment before Prefect is imported)

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def alive(pid: int) -> bool:
    """Process ``pid`` exists and is no zombie."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def gone_within(pids: list[int], seconds: float = 10) -> bool:
    """Every one of ``pids`` has ended within ``seconds``."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory):
    """One temporary Prefect server for the whole session; yields its API URL so that
    subprocesses (stage scripts, dvc) can use it instead of starting their own."""
    os.environ["PREFECT_HOME"] = str(tmp_path_factory.mktemp("prefect-home"))
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield PREFECT_API_URL.value()


def small_params() -> dict:
    """The repository's params.yaml, shrunk to run in seconds on the test excerpts
    (tests/data): every task family, the default compared objectives, no hub model."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))
    params["sources"] = {
        "peoples_daily": {"type": "local", "path": str(DATA / "peoples_daily_sample.txt"), "licence": "MIT"},
        "sentiment": {"type": "local", "path": str(DATA / "sentiment"), "licence": "MIT"},
        "lcqmc": {"type": "local", "path": str(DATA / "lcqmc.csv"), "licence": "research use"},
        "msra_ner": {"type": "local", "path": str(DATA / "msra_ner"), "licence": "research use"},
        "sts_b": {"type": "local", "path": str(DATA / "sts_b.csv"), "licence": "see tests/data/README.md"},
        "synonyms": {"type": "local", "path": str(DATA / "word_vectors_sample.model"), "licence": "MIT"},
        **{name: {"type": "local", "path": str(DATA / "multilingual" / name), "licence": "see tests/data/README.md"}
           for name in ("bert_vocab", "udhr", "cantonese", "korean", "uyghur_proverbs")},
    }
    params["similar_words"]["file"] = "word_vectors_sample.model"
    task = params["tasks"]
    task["lcqmc"]["data"].update(source="lcqmc", files={"all": "lcqmc.csv"}, split={"dev": 0.1, "test": 0.1})
    task["lcqmc"]["data"].pop("limit")
    task["sts_b"]["data"].update(files={"all": "sts_b.csv"})
    for name in ("msra_mrc", "msra_ner"):
        task[name]["data"]["limit"] = {"train": 120, "dev": 30, "test": 40}
    task["msra_ner"]["training"]["max_seq_length"] = 48
    task["msra_mrc"]["training"].update(max_seq_length=80, doc_stride=16)
    params["hub_models"] = {}
    params["tokenizer"].update(vocab="train", train_vocab_size=1500)
    # a preset of its own, not overrides under `model`, so that the stages read their size where they declare it
    params["model_presets"]["test"] = {**params["model_presets"]["tiny"], "hidden_size": 32, "num_hidden_layers": 1,
                                       "num_attention_heads": 2, "intermediate_size": 64, "local_attention_layers": 1}
    params["model"] = {"preset": "test"}
    params["pretraining_data"].update(shard_size=300)
    params["pretrain"].update(token_budget=6000, batch_size=8, log_every=5, checkpoint_every=10, threads=1)
    # the default run has no sweep (its recipes are params); the study's, two settings, runs here
    params["sweep"]["settings"] = {"lr5e-4": {"learning_rate": 0.0005}, "lr1e-3": {"learning_rate": 0.001}}
    params["sweep"]["learned_only"] = False  # 1,500 tokens a setting: no model learns, the choice is still made
    # the seeds in turn in the stage's process: a spawned worker imports torch and the stage's modules (about
    # 10 s) for a test run of a second; map_seeds' workers are tested on their own (test_seeds, test_faults)
    params["finetune"].update(baselines=[], seeds=[1, 2], seed_workers=1)
    params["curves"].update(heldout_sequences=40, tasks=["sentiment"])
    params["finetune"]["training"].update(epochs=1, max_seq_length=32)
    for spec in task.values():  # one epoch everywhere (the tasks' own epochs are the default run's)
        spec["training"].pop("epochs", None)
    task["sentiment"]["training"]["max_seq_length"] = 32
    params["multilingual"].update(total_tokens=20000, heldout_max_documents=20, pretrain={"token_budget": 3000,
                                                                                          "learning_rate": 0.001})
    params["multilingual"]["vocab"].update(new_vocab_size=400)
    params["probe"].update(pos_file="peoples_daily_sample.txt", sentences={"train": 60, "test": 20})
    params["attributions"].update(steps=10)
    # narrower than the 1-layer teacher, so it is smaller and its hidden_mse goes through a projection
    params["compression"]["students"] = {"l1": {
        "num_hidden_layers": 1, "hidden_size": 16, "num_attention_heads": 2, "intermediate_size": 32,
        "init": "random", "matches": [{"kind": "hidden_mse", "student": 1, "teacher": 1},
                                      {"kind": "attention_mse", "student": 1, "teacher": 1}]}}
    params["compression"]["prune"].update(heads=1, ffn=32, n_iters=2, importance_examples=64)
    params["compression"]["latency_repeats"] = 4
    return params


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project directory (params.yaml, dvc.yaml) using the test excerpts; the cwd during the test."""
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(small_params(), allow_unicode=True), encoding="utf-8")
    shutil.copy(ROOT / "dvc.yaml", tmp_path / "dvc.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path
