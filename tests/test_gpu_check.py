"""benchmarks/gpu_check.py: its CPU smoke path runs both sides end to end, and its model FLOPs (the pretrain metrics' count, PaLM's for BERT)."""

import importlib.util
import json

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_smoke_on_cpu(gpu_check, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # params.yaml; --synthetic: no pipeline artifacts needed
    results = ROOT / "benchmarks" / "results" / "gpu_check.json"
    before = results.read_bytes() if results.exists() else None
    assert gpu_check.main(["--device", "cpu", "--preset", "tiny", "--steps", "3", "--batch-size", "4",
                           "--synthetic"]) == 0
    out = capsys.readouterr().out
    assert "data: synthetic random tokens (--synthetic" in out
    assert "pipeline / HF Trainer tokens/s: x" in out and "smoke run on CPU: figures not written" in out
    assert (results.read_bytes() if results.exists() else None) == before


def test_no_cuda_is_a_clean_skip(gpu_check, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 0
    assert "no CUDA device: skipped" in capsys.readouterr().out


def test_a_run_keeps_the_other_configurations_of_the_same_gpu(gpu_check, tmp_path):
    results = tmp_path / "gpu_check.json"
    assert gpu_check.previous_runs(results, "NVIDIA H100 80GB HBM3") == {}
    run = {"pipeline": {"tokens_per_sec": 1.0}, "hf_trainer": {"tokens_per_sec": 1.0}}
    results.write_text(json.dumps({"machine": {"gpu": "NVIDIA H100 80GB HBM3"},
                                   "figures": {"bert-base, synthetic, eager, batch 256": run}}))
    assert gpu_check.previous_runs(results, "NVIDIA H100 80GB HBM3") == {"bert-base, synthetic, eager, batch 256": run}
    assert gpu_check.previous_runs(results, "NVIDIA H200") == {}


def test_model_flops_of_bert_base_are_palms_count(gpu_check):
    """The pipeline's model FLOPs (PretrainingModel.flops, which MFU uses) of a BERT-base encoder on
    one 128-token row are PaLM's 6 N + 12 L H T per token (N = 12 layers of 7.08 M weights), plus
    the MLM head at the predicted positions."""
    from tasks.pretraining.modeling import PretrainingModel

    config = BertConfig(vocab_size=21128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072)
    with torch.device("meta"):
        model = PretrainingModel(BertForMaskedLM(config))
    n = 12 * (4 * 768 * 768 + 2 * 768 * 3072)
    head = 6 * (768 * 768 + 768 * 21128)
    assert model.flops(np.array([128]), 20) == 128 * (6 * n + 12 * 12 * 768 * 128) + 20 * head
    assert dict(gpu_check.PEAK_BF16)["H200"] == dict(gpu_check.PEAK_BF16)["H100"] == 989e12
