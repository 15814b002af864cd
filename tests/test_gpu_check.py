"""benchmarks/gpu_check.py: its CPU smoke path runs both sides end to end, and its MFU formula."""

import importlib.util

import pytest
import torch
from transformers import BertConfig

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


def test_model_flops_per_token_of_bert_base(gpu_check):
    """6 N + 12 L H T with N = 85.6 M non-embedding parameters of BERT-base (12 layers of 7.09 M, MLM transform)."""
    config = BertConfig(vocab_size=21128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                        intermediate_size=3072)
    n = 12 * 7_087_872 + 768 * 768 + 3 * 768
    assert gpu_check.flops_per_token(config, 128) == 6 * n + 12 * 12 * 768 * 128
    assert dict(gpu_check.PEAK_BF16)["H200"] == dict(gpu_check.PEAK_BF16)["H100"] == 989e12
