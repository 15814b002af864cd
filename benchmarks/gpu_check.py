"""GPU check: pretrain a model-size preset (default ``bert-base``) for a few hundred steps
with the pipeline's loop, then with Hugging Face ``BertForMaskedLM`` + ``transformers.Trainer``
on the same data, batch, steps, learning-rate schedule and GPU, in this process, and compare.

For each: tokens/s (non-padding tokens; steady state, from the first log point to the end, so
start-up and compilation are left out), MFU and peak CUDA memory; then the ratio pipeline / HF.

* Data: the pipeline's pretraining data ``data/pretraining/<objective>-<seed>`` when it exists
  (``dvc repro pretraining_data@mlm``), else (or with ``--synthetic``) random token ids of
  ``pretraining_data.max_seq_length`` tokens with 15% of positions to predict; the output says which.
* The pipeline side is :func:`tasks.pretraining.pretrain.train` (bf16 autocast, fused AdamW,
  predictions at the masked positions only, length-grouped batches padded to a multiple of 8)
  after :func:`tasks.pretraining.modeling.prepare_model` (TF32; ``--compile``,
  ``--activation-checkpointing``), twice: padded, and unpadded (``pipeline_unpadded``: the encoder on
  the real tokens only, attention per sequence on jagged tensors, :mod:`benchmarks.unpadded_bert`,
  what ``pretrain`` does on CUDA). The HF side is what a Trainer user
  writes: ``bf16=True``, fused AdamW (Trainer's default), the same options, vocabulary logits at
  every position (``BertForMaskedLM.forward``) and labels -100 elsewhere; its batches are random
  (``group_by_length`` off, the default), so on the pipeline's data part of the ratio is padding.
* MFU (model FLOPs utilisation, PaLM, Chowdhery et al. 2022, appendix B): tokens/s x model
  FLOPs per token / the GPU's peak dense bf16 FLOP/s (:data:`PEAK_BF16`), with the model FLOPs
  the pretrain metrics count (:meth:`tasks.pretraining.modeling.PretrainingModel.flops`: the
  encoder's matmuls and attention over each row's own tokens, the MLM head at the masked
  positions, times 3 for the backward pass) per token of the pipeline's run. The same model
  FLOPs count for both sides, so the MFU ratio is the throughput ratio. Unknown GPU: MFU n/a.

Figures go to ``benchmarks/results/gpu_check.json`` (CUDA runs only), one entry per
configuration (preset, data, eager or compiled, batch): a run replaces its own entry and keeps the
others taken on the same GPU. Without a CUDA device it
prints "no CUDA device: skipped" and exits 0; ``--device cpu --preset tiny --steps 3`` is a
smoke test of the whole script on CPU (nothing written)::

    make gpu-check                       # = python benchmarks/gpu_check.py (300 steps, bert-base)
    python benchmarks/gpu_check.py --steps 500 --batch-size 64 --compile
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from tasks.core import paths
from tasks.core.params import load_params
from tasks.pretraining.modeling import PretrainingModel, bert_config, new_masked_lm, prepare_model
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.pretrain import train
from tasks.pretraining.objectives import build
from tasks.pretraining.pretraining_data import read_shards

sys.path.insert(0, str(Path(__file__).parent))
from results import RESULTS, write_results  # noqa: E402  (benchmarks/results.py)
from unpadded_bert import unpad  # noqa: E402  (benchmarks/unpadded_bert.py)

# Peak dense bf16 tensor-core FLOP/s (no sparsity), from NVIDIA's data sheets; matched in order
# against torch.cuda.get_device_name() (the H100 SXM reports "NVIDIA H100 80GB HBM3").
PEAK_BF16 = [("H200 NVL", 835e12), ("H200", 989e12), ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12),
             ("A100", 312e12)]
SYNTHETIC_VOCAB = 21128  # the Chinese BERT vocabulary's size


def peak_flops(device: torch.device) -> tuple[str, float | None]:
    """The GPU's name and its peak dense bf16 FLOP/s from :data:`PEAK_BF16` (None: unknown, or CPU)."""
    if device.type != "cuda":
        return "cpu", None
    name = torch.cuda.get_device_name(device)
    return name, next((peak for key, peak in PEAK_BF16 if key in name), None)


def synthetic_examples(n: int, length: int, vocab: int, seed: int) -> PretrainingExamples:
    """``n`` random sequences of ``length`` tokens ([CLS] ... [SEP] in the BERT layout) with
    15% of the inner positions masked (id 103) and their labels, as static pretraining data."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(106, vocab, (n, length))
    ids[:, 0], ids[:, -1] = 101, 102
    k = max(1, round(0.15 * (length - 2)))
    pos = np.sort(np.argsort(rng.random((n, length - 2)), axis=1)[:, :k] + 1, axis=1)
    labels = np.take_along_axis(ids, pos, axis=1)
    np.put_along_axis(ids, pos, 103, axis=1)
    table = pa.table({"input_ids": ids.tolist(), "masked_positions": pos.tolist(), "masked_labels": labels.tolist()})
    return PretrainingExamples.from_table(table)


def load_data(params, name: str, synthetic: bool, n_synthetic: int):
    """``(examples, vocab_size, pad_id, description)``: the pipeline's data of ``name``
    (``<objective>-<seed>``), else synthetic tokens."""
    folder = paths.PRETRAINING / name
    if not synthetic and folder.is_dir() and paths.TOKENIZER.is_dir():
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
        objective, seed = paths.procedure_of(name)
        masker = build(params, objective).masker(seed, tokenizer, paths.LEXICON)
        data = PretrainingExamples.from_table(read_shards(folder), masker)
        return data, len(tokenizer), tokenizer.pad_token_id, f"pipeline data {folder} ({len(data):,} sequences)"
    why = "--synthetic" if synthetic else f"{folder} not found"
    length = params.pretraining_data.max_seq_length
    data = synthetic_examples(n_synthetic, length, SYNTHETIC_VOCAB, params.seed)
    return data, SYNTHETIC_VOCAB, 0, f"synthetic random tokens ({why}; {n_synthetic:,} x {length} tokens)"


def steady_rate(points: list[tuple[int, float]]) -> float:
    """Tokens/s between the first and the last ``(tokens, seconds)`` point (all of them if only one)."""
    (t0, s0), (t1, s1) = (points[0], points[-1]) if len(points) > 1 else ((0, 0.0), points[-1])
    return (t1 - t0) / (s1 - s0) if s1 > s0 else float("nan")


def run_pipeline(params, config, size, data, args, device, unpadded: str | None = None) -> dict:
    """The pipeline's loop on ``data``: steady tokens/s, peak memory (MiB), final loss; ``unpadded``:
    the encoder on the real tokens only with this attention kernel (:func:`benchmarks.unpadded_bert.unpad`)."""
    mean = float(data.lengths.mean())
    log_every = max(1, args.steps // 10)
    cfg = params.pretrain.model_copy(update=dict(
        token_budget=int(args.steps * args.batch_size * mean), batch_size=args.batch_size, learning_rate=args.lr,
        log_every=log_every, checkpoint_every=args.steps + 1, device=str(device), compile=args.compile,
        activation_checkpointing=args.activation_checkpointing))
    model = PretrainingModel(new_masked_lm(config, params.seed, size))
    prepare_model(model, cfg, device)
    restore = unpad(model.hf.bert, unpadded) if unpadded else lambda: None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    with tempfile.TemporaryDirectory() as tmp:
        summary = train.fn(model, data, cfg, seed=params.seed, device=device, checkpoint=Path(tmp) / "last.pt",
                           fingerprint="gpu_check",
                           log=lambda line: print(f"  pipeline{' unpadded' if unpadded else ''}: {line}"))
    restore()  # the config is shared with the other sides
    rows = summary["rows"]
    return {"steps": summary["steps"], "tokens_per_sec": steady_rate([(r["tokens"], r["elapsed_sec"]) for r in rows]),
            "peak_memory_mb": _peak_mb(device), "final_loss": summary["final_loss"],
            "flops_per_token": summary["flops"] / summary["tokens"]}


def run_hf(params, config, data, args, device) -> dict:
    """``BertForMaskedLM`` + ``Trainer`` on the same examples and settings."""
    from transformers import BertForMaskedLM, Trainer, TrainerCallback, TrainingArguments

    counts: list[int] = []  # non-padding tokens of each batch, in the order the collator built them
    marks: list[tuple[int, float]] = []

    def collate(items):
        index = np.array([i for (i,) in items])
        b = data.batch(index, len(counts))
        labels = torch.full(b["input_ids"].shape, -100)
        labels[b["rows"], b["cols"]] = b["labels"]
        counts.append(int(b["attention_mask"].sum()))
        return {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"],
                "token_type_ids": b["token_type_ids"], "labels": labels}

    first = max(1, args.steps // 10)

    class Clock(TrainerCallback):
        """(tokens, seconds) after the first log step and at the end (the accelerator synchronised)."""

        def on_step_end(self, _args, state, control, **kw):
            if state.global_step in (first, state.max_steps):
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                marks.append((sum(counts[:state.global_step]), time.perf_counter()))

    torch.manual_seed(params.seed)
    model = BertForMaskedLM(config)
    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(
            output_dir=tmp, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
            learning_rate=args.lr, warmup_steps=int(params.pretrain.warmup_fraction * args.steps),
            weight_decay=params.pretrain.weight_decay, max_grad_norm=params.pretrain.max_grad_norm,
            adam_epsilon=1e-6, bf16=device.type == "cuda", use_cpu=device.type == "cpu",
            optim="adamw_torch_fused" if device.type == "cuda" else "adamw_torch",
            torch_compile=args.compile, activation_checkpointing=args.activation_checkpointing,
            logging_steps=first, save_strategy="no", report_to="none", disable_tqdm=True,
            remove_unused_columns=False, seed=params.seed, dataloader_num_workers=0)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        trainer = Trainer(model=model, args=targs, train_dataset=_Indices(len(data)), data_collator=collate,
                          callbacks=[Clock()])
        out = trainer.train()
    rate = (marks[-1][0] - marks[0][0]) / (marks[-1][1] - marks[0][1]) if len(marks) > 1 else float("nan")
    return {"steps": out.global_step, "tokens_per_sec": rate, "peak_memory_mb": _peak_mb(device),
            "final_loss": round(out.training_loss, 5)}


class _Indices(torch.utils.data.Dataset):
    """Example numbers ``0 .. n-1`` (each a 1-tuple): the collator builds the batch from them."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[int]:
        return (i,)


def previous_runs(results: Path, gpu: str) -> dict:
    """The configurations the results file ``results`` already holds for GPU ``gpu`` (none if it
    was taken on another GPU: timings compare only on the same one)."""
    if not results.exists():
        return {}
    old = json.loads(results.read_text(encoding="utf-8"))
    if old["machine"].get("gpu") != gpu:
        return {}
    return {label: run for label, run in old["figures"].items() if isinstance(run, dict) and "pipeline" in run}


def _peak_mb(device: torch.device) -> float | None:
    return round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if device.type == "cuda" else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per side (default 300)")
    parser.add_argument("--preset", default="bert-base", help="a model_presets name of params.yaml")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences per step, both sides")
    parser.add_argument("--lr", type=float, default=1e-4, help="peak learning rate (BERT-base: 1e-4)")
    parser.add_argument("--objective", default="mlm-42", help="whose data/pretraining/<objective>-<seed> to read")
    parser.add_argument("--synthetic", action="store_true", help="random tokens even if pipeline data exist")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke test)")
    parser.add_argument("--compile", action="store_true", help="torch.compile both models")
    parser.add_argument("--activation-checkpointing", action="store_true", help="on both models")
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: skipped (smoke test on CPU: --device cpu --preset tiny --steps 3)")
        return 0
    params = load_params()
    if args.preset not in params.model_presets:
        parser.error(f"--preset: unknown preset {args.preset!r}; model_presets declares: "
                     f"{', '.join(params.model_presets)}")
    size = params.model_presets[args.preset]
    data, vocab, pad_id, described = load_data(params, args.objective, args.synthetic,
                                               max(args.steps * args.batch_size, 64))
    config = bert_config(size, vocab, params.pretraining_data.max_seq_length, pad_id)
    gpu, peak = peak_flops(device)
    mean_len = float(data.lengths.mean())
    print(f"gpu_check: preset {args.preset} (L{size.num_hidden_layers} H{size.hidden_size} "
          f"A{size.num_attention_heads}), {args.steps} steps x {args.batch_size} sequences on {gpu}; "
          f"data: {described}; mean length {mean_len:.1f} tokens")

    sides = {"pipeline": run_pipeline(params, config, size, data, args, device),
             "pipeline_unpadded": run_pipeline(params, config, size, data, args, device, unpadded="jagged"),
             "hf_trainer": run_hf(params, config, data, args, device)}
    # the pipeline's model FLOPs (PretrainingModel.flops, the count of the pretrain metrics) for both sides
    fpt = sides["pipeline"].pop("flops_per_token")
    sides["pipeline_unpadded"].pop("flops_per_token")
    print(f"model FLOPs per token: {fpt / 1e9:.3f} G (the pipeline's count of its step)")
    for side in sides.values():
        side["mfu"] = round(side["tokens_per_sec"] * fpt / peak, 4) if peak else None
        side["tokens_per_sec"] = round(side["tokens_per_sec"], 1)
    print(f"{'':18} {'tokens/s':>12} {'MFU':>8} {'peak MiB':>10} {'final loss':>11}")
    for name, s in sides.items():
        mfu = f"{s['mfu']:.1%}" if s["mfu"] is not None else "n/a"
        mem = f"{s['peak_memory_mb']:,.0f}" if s["peak_memory_mb"] is not None else "n/a"
        print(f"{name:18} {s['tokens_per_sec']:>12,.0f} {mfu:>8} {mem:>10} {s['final_loss']:>11}")
    ratio = sides["pipeline"]["tokens_per_sec"] / sides["hf_trainer"]["tokens_per_sec"]
    unpadded = sides["pipeline_unpadded"]["tokens_per_sec"] / sides["hf_trainer"]["tokens_per_sec"]
    print(f"pipeline / HF Trainer tokens/s: x{ratio:.2f}, unpadded x{unpadded:.2f}"
          + ("" if math.isfinite(ratio) else " (too few steps)"))
    if device.type != "cuda":
        print("smoke run on CPU: figures not written")
        return 0
    # one entry per configuration (preset, data, mode, batch), kept beside the others taken on the same GPU
    label = (f"{args.preset}, {'synthetic' if described.startswith('synthetic') else 'pipeline data'}, "
             f"{'compile' if args.compile else 'eager'}, batch {args.batch_size}"
             + (", activation checkpointing" if args.activation_checkpointing else ""))
    runs = previous_runs(RESULTS / "gpu_check.json", gpu)
    runs[label] = {"steps": args.steps, "lr": args.lr, "data": described, "mean_length": round(mean_len, 1),
                   "flops_per_token": fpt, **sides, "speedup_vs_hf": round(ratio, 3),
                   "unpadded_speedup_vs_hf": round(unpadded, 3)}
    write_results("gpu_check", {"peak_bf16_flops": peak}, dict(sorted(runs.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
