"""DDP and gradient accumulation (tasks/training/distributed.py, tasks/pretraining/pretrain.py):
with the same global batch and seed, 2 processes under torchrun (gloo, CPU) and 1 process with
2 accumulation steps give the loss curve of 1 process over 60 steps; a DDP run killed with
SIGKILL and rerun resumes from rank 0's checkpoint to the uninterrupted run's exact weights."""

import os
import subprocess
import sys

import numpy as np

import pytest
import torch

from tasks.core.errors import ParamsError
from tasks.core.params import Distributed
from tasks.pretraining.examples import micro_batches
from tasks.training.distributed import Ranks, torchrun_command
from tests import distributed_worker as worker
from tests.conftest import ROOT
from tests.test_pretrain import tiny_data

# Losses are means over the global batch computed from per-micro-batch sums: float32 rounding
# differs from the single-batch order (measured: weights within 3e-8 after 93 steps).
LOSS_RTOL = 1e-5
WEIGHT_ATOL = 1e-6


def torchrun(tmp_path, name, *args, check=True):
    """The worker under ``torchrun`` with 2 processes (gloo); its saved result when ``check``."""
    out = tmp_path / f"{name}.pt"
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "tests.distributed_worker", str(out), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if not check:
        return proc
    assert proc.returncode == 0, proc.stderr[-3000:]
    return torch.load(out, weights_only=True)


def assert_same_curve(a, b, rtol=LOSS_RTOL):
    assert len(a["rows"]) == len(b["rows"]) >= 12  # over 60 steps, a row every 5
    for ra, rb in zip(a["rows"], b["rows"]):
        assert ra["step"] == rb["step"] and ra["tokens"] == rb["tokens"]
        for key in ("loss", "sentence_loss"):
            if ra[key] is not None:
                assert rb[key] == pytest.approx(ra[key], rel=rtol), (key, ra, rb)
    for k, v in a["model"].items():
        torch.testing.assert_close(b["model"][k], v, atol=WEIGHT_ATOL, rtol=0, msg=k)


@pytest.fixture(scope="module")
def ddp_static(tmp_path_factory):
    return torchrun(tmp_path_factory.mktemp("ddp"), "static")


@pytest.mark.parametrize("case", ["static", "dynamic_sop", "perlm_sop"])
def test_two_processes_and_accumulation_follow_the_single_process_curve(tmp_path, case, ddp_static):
    single = worker.run(str(tmp_path / "single.pt"), case)
    assert single["rows"][-1]["step"] >= 50
    assert single["rows"][-1]["loss"] < single["rows"][0]["loss"]  # it learns
    assert_same_curve(single, worker.run(str(tmp_path / "accumulated.pt"), case, accumulation=2))
    ddp = ddp_static if case == "static" else torchrun(tmp_path, "ddp", "--case", case)
    assert ddp["world"] == 2
    assert_same_curve(single, ddp)


def test_ddp_resume_after_kill_reproduces_the_uninterrupted_run(tmp_path, ddp_static):
    ckpt = tmp_path / "ckpt.pt"
    killed = torchrun(tmp_path, "killed", "--checkpoint", str(ckpt), "--kill-at", "25", check=False)
    assert killed.returncode != 0 and ckpt.is_file()  # rank 0 died after the checkpoint of step 20
    assert torch.load(ckpt, weights_only=True)["step"] == 20
    resumed = torchrun(tmp_path, "resumed", "--checkpoint", str(ckpt))
    assert [r["loss"] for r in resumed["rows"]] == [r["loss"] for r in ddp_static["rows"]]
    for k, v in ddp_static["model"].items():
        assert torch.equal(resumed["model"][k], v), k


@pytest.mark.parametrize("head", ["token", "mean_pool"])
def test_fine_tuning_under_ddp_follows_the_single_process_run(tmp_path, head):
    """Token labels: each rank's mean loss is weighted by its labelled tokens, not its examples.
    Mean pooling: the encoder's pooler gets no gradient, and DDP must not wait for one."""
    single = worker.finetune(str(tmp_path / "single.pt"), head=head)
    ddp = torchrun(tmp_path, "ddp", "--case", "finetune" if head == "token" else f"finetune_{head}")
    assert single["steps"] == ddp["steps"] >= 50 and ddp["world"] == 2
    assert ddp["train_loss"] == pytest.approx(single["train_loss"], rel=LOSS_RTOL)
    for k, v in single["model"].items():
        torch.testing.assert_close(ddp["model"][k], v, atol=WEIGHT_ATOL, rtol=0, msg=k)


def test_global_batch_must_split_over_processes_and_accumulation():
    with pytest.raises(ParamsError, match="batch_size 6 .* 4 processes x 1 accumulation_steps"):
        micro_batches(tiny_data(), np.arange(6), 0, Ranks(0, 4, 0), 1)


def test_torchrun_command_for_one_and_several_nodes():
    one = torchrun_command("flows.pretrain", ["mlm"], Distributed(nproc_per_node=2, nnodes=1, rdzv_endpoint=None,
                                                                   rdzv_id="x"))
    assert one[1:] == ["-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1", "--standalone",
                       "-m", "flows.pretrain", "mlm"]
    many = torchrun_command("flows.pretrain", ["mlm"], Distributed(nproc_per_node=8, nnodes=4,
                                                                    rdzv_endpoint="node0:29400", rdzv_id="run7"))
    assert "--rdzv_endpoint=node0:29400" in many and "--rdzv_id=run7" in many and "--standalone" not in many
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        Distributed(nproc_per_node=1, nnodes=2, rdzv_endpoint=None, rdzv_id="x")
