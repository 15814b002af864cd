"""Pretraining step throughput on this machine: the pipeline's step next to Hugging Face
``BertForMaskedLM`` trained the way its docs show, same model size, vocabulary, batch and
sequence length, in this process, alternated block by block; achieved model GFLOP/s beside
this CPU's fp32 and bf16 matmul peaks, measured here.

* Data: the pipeline's pretraining data ``data/pretraining/<objective>-<seed>`` (``dvc repro
  pretraining_data@mlm``; else synthetic tokens, as ``gpu_check.py`` does), batches from
  :class:`tasks.training.batching.BatchSchedule`; every side sees the same batches in order.
* ``pipeline``: the step of :func:`tasks.pretraining.pretrain.train` on CPU as the stage runs
  it: :class:`tasks.pretraining.modeling.PretrainingModel` (the vocabulary projection at the
  M masked positions only), :func:`tasks.training.optim.optimizer_for` (AdamW, no decay on
  biases and LayerNorm, the fused kernel: ``pretrain.fused_adamw``), gradient clipping, the
  loss left on the device (no ``.item()``).
* ``hf``: ``BertForMaskedLM(input_ids, attention_mask, token_type_ids, labels)`` with labels
  -100 off the masked positions (logits at every position, ``[B, L, V]``),
  ``torch.optim.AdamW(model.parameters())``, ``clip_grad_norm_``: the docs' PyTorch loop.
* Levers on the pipeline's step, each its own side: AdamW without the fused kernel, as its
  per-tensor ``loop`` (PyTorch's default on CPU) or ``foreach`` (multi-tensor ops per
  parameter group), and a batch 4x larger (tokens/s only: sample efficiency is a separate
  question). bf16 autocast is measured over whole pretraining runs, the held-out loss beside it
  (``benchmarks/bf16.py``).
* Other objectives' steps on the same batches (a step's cost does not depend on which positions
  are masked): ``electra`` (:class:`tasks.pretraining.objectives.electra.ElectraPretrainingModel`: the
  generator of a quarter of the width, sampling, the discriminator on every token) and
  ``span_sbo`` (MLM plus SpanBERT's span boundary head), each with its tokens/s and its own
  model GFLOP/s beside MLM's.
* Model FLOPs per step: the count of the pretrain metrics (``model.flops``: the encoder over each
  row's own tokens, the heads where they predict, times 3 for the backward pass), MLM's for the
  MLM sides (the same count for each, so their GFLOP/s ratios are speed ratios), each other
  objective's own for its side. Peaks: the best of ``torch.mm`` on 2048 x 2048 matrices in fp32 and bf16.
* The ceiling: Hugging Face's step also projects every other position onto the vocabulary, so
  it executes ``hf_flops_ratio`` times the pipeline's FLOPs: the pipeline's speed-up at equal
  efficiency. ``fp32_peak_share_for_5x`` is the share of the fp32 peak the pipeline's whole step
  would need for 5x. ``profile``: where one block of the pipeline's steps spends its CPU time
  (``profiling.op_profile``: self time by operator group).

Writes ``benchmarks/results/pretrain_step.json``::

    python benchmarks/pretrain_step.py [--objective mlm-42] [--steps 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from tasks.core.params import Rtd, load_params
from tasks.pretraining.objectives.electra import new_electra
from tasks.pretraining.modeling import PretrainingModel, bert_config, new_masked_lm
from tasks.training.batching import BatchSchedule
from tasks.training.optim import optimizer_for

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import load_data  # noqa: E402  (benchmarks/gpu_check.py)
from profiling import op_profile  # noqa: E402  (benchmarks/profiling.py)
from results import write_results  # noqa: E402  (benchmarks/results.py)


def matmul_peak(dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    """Best FLOP/s of ``torch.mm`` on two ``n x n`` matrices of ``dtype`` on the CPU."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


class Side:
    """One way of taking a training step, with its own model and optimizer, timed per block."""

    def __init__(self, name: str, config, size, params, *, hf: bool = False, adamw: str = "fused",
                 batch_scale: int = 1, objective: str = "mlm"):
        self.name, self.hf, self.batch_scale = name, hf, batch_scale
        self.own_flops = objective != "mlm"  # GFLOP/s by its own count, not MLM's
        pre = params.pretrain
        if hf:
            torch.manual_seed(params.seed)
            from transformers import BertForMaskedLM

            self.model = BertForMaskedLM(config)
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=pre.learning_rate,
                                         weight_decay=pre.weight_decay)
        else:
            self.model = (new_electra(size, Rtd(), config.vocab_size, config.max_position_embeddings,
                                      config.pad_token_id, params.seed) if objective == "electra" else
                          PretrainingModel(new_masked_lm(config, params.seed, size),
                                           sbo=objective == "span_sbo"))
            self.opt = optimizer_for(self.model, pre.learning_rate, pre.weight_decay, fused=adamw == "fused")
            if adamw == "foreach":
                for group in self.opt.param_groups:
                    group["foreach"] = True
        self.model.train()
        self.max_grad_norm = pre.max_grad_norm
        self.rates: list[float] = []
        self.loss = torch.zeros(())

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        if self.hf:
            labels = torch.full(batch["input_ids"].shape, -100)
            labels[batch["rows"], batch["cols"]] = batch["labels"]
            loss = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                              token_type_ids=batch["token_type_ids"], labels=labels).loss
        else:
            loss, _ = self.model(batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.loss = loss.detach()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objective", default="mlm-42", help="whose data/pretraining/<objective>-<seed> to read")
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--rounds", type=int, default=5, help="blocks per side, alternated (the first is warm-up)")
    args = parser.parse_args(argv)
    params = load_params()
    size = params.model  # the model.preset row with its overrides
    batch = params.pretrain.batch_size
    data, vocab, pad_id, described = load_data(params, args.objective, False, 64 * batch * args.steps)
    config = bert_config(size, vocab, params.pretraining_data.max_seq_length, pad_id)
    peaks = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    sides = [Side("pipeline", config, size, params), Side("hf", config, size, params, hf=True),
             Side("pipeline_adamw_loop", config, size, params, adamw="loop"),
             Side("pipeline_adamw_foreach", config, size, params, adamw="foreach"),
             Side("pipeline_batch_x4", config, size, params, batch_scale=4),
             Side("electra", config, size, params, objective="electra"),
             Side("span_sbo", config, size, params, objective="span_sbo")]
    schedules = {scale: BatchSchedule(data.lengths, batch * scale, params.seed) for scale in (1, 4)}
    print(f"pretrain_step: model L{size.num_hidden_layers} H{size.hidden_size} A{size.num_attention_heads}, "
          f"vocabulary {vocab:,}, batch {batch} x {params.pretraining_data.max_seq_length}, {described}; "
          f"{torch.get_num_threads()} threads; matmul peaks fp32 {peaks['fp32'] / 1e9:,.0f} GFLOP/s, "
          f"bf16 {peaks['bf16'] / 1e9:,.0f} GFLOP/s")
    work: dict[str, list[float]] = {s.name: [0.0, 0.0, 0.0] for s in sides}  # tokens, FLOPs, seconds
    executed = [0.0, 0.0]  # FLOPs of the pipeline's step and of HF's on the pipeline's batches
    for r in range(args.rounds):
        for side in sides:
            block = [data.batch(schedules[side.batch_scale](r * args.steps + i)) for i in range(args.steps)]
            t0 = time.perf_counter()
            for b in block:
                side.step(b)
            seconds = time.perf_counter() - t0
            if r == 0:
                continue  # warm-up: allocator, kernels
            tokens = sum(int(b["attention_mask"].sum()) for b in block)
            counter = side.model if side.own_flops else sides[0].model
            flops = sum(counter.flops(b["attention_mask"].sum(1).numpy(), len(b["labels"])) for b in block)
            if side.name == "pipeline":  # HF's step on the same batches projects every position, not only the masked
                executed[0] += flops
                executed[1] += flops + sum(3 * 2 * (config.hidden_size ** 2 + config.hidden_size * vocab)
                                           * (b["input_ids"].numel() - len(b["labels"])) for b in block)
            side.rates.append(tokens / seconds)
            for k, v in enumerate((tokens, flops, seconds)):
                work[side.name][k] += v
    figures = {}
    base = statistics.median(sides[0].rates)
    for side in sides:
        tokens, flops, seconds = work[side.name]
        figures[side.name] = {"tokens_per_sec": round(statistics.median(side.rates), 1),
                              "gflops_per_sec": round(flops / seconds / 1e9, 2),
                              "loss_after": round(float(side.loss), 4)}
    hf = figures["hf"]["tokens_per_sec"]
    print(f"{'side':>22} {'tokens/s':>10} {'GFLOP/s':>9} {'% fp32 peak':>12} {'vs hf':>7} {'vs pipeline':>12} "
          f"{'loss':>7}")
    for name, f in figures.items():
        f["vs_hf"] = round(f["tokens_per_sec"] / hf, 2)
        f["vs_pipeline"] = round(f["tokens_per_sec"] / base, 2)
        f["fraction_of_fp32_peak"] = round(f["gflops_per_sec"] * 1e9 / peaks["fp32"], 4)
        print(f"{name:>22} {f['tokens_per_sec']:>10,.0f} {f['gflops_per_sec']:>9.1f} "
              f"{f['fraction_of_fp32_peak']:>12.1%} {f['vs_hf']:>6.2f}x {f['vs_pipeline']:>11.2f}x {f['loss_after']:>7}")
    print(f"pipeline / hf: x{figures['pipeline']['vs_hf']:.2f}  (target >= 5); per token, electra costs "
          f"x{figures['pipeline']['tokens_per_sec'] / figures['electra']['tokens_per_sec']:.2f} and span_sbo "
          f"x{figures['pipeline']['tokens_per_sec'] / figures['span_sbo']['tokens_per_sec']:.2f} the time of mlm")
    ratio = executed[1] / executed[0]
    need = 5 * figures["hf"]["tokens_per_sec"] * executed[0] / work["pipeline"][0] / peaks["fp32"]
    figures["ceiling"] = {"hf_flops_ratio": round(ratio, 2), "fp32_peak_share_for_5x": round(need, 3)}
    print(f"ceiling: HF's step executes x{ratio:.2f} the pipeline's FLOPs (the speed-up at equal efficiency); "
          f"5x would need the pipeline's whole step at {need:.0%} of the fp32 matmul peak")
    block = [data.batch(schedules[1](args.rounds * args.steps + i)) for i in range(args.steps)]
    figures["profile"] = op_profile(lambda: [sides[0].step(b) for b in block], len(block))
    print(f"profile of the pipeline's step ({figures['profile']['op_ms_per_step']} ms of operators a step): "
          + ", ".join(f"{k} {v:.0%}" for k, v in figures["profile"]["shares"].items()))
    write_results("pretrain_step", {"objective": args.objective, "model": size.model_dump(), "batch_size": batch,
                                    "max_seq_length": params.pretraining_data.max_seq_length, "vocab": vocab,
                                    "steps_per_block": args.steps, "rounds": args.rounds, "data": described},
                  {"matmul_peak_gflops": {k: round(v / 1e9, 1) for k, v in peaks.items()}, **figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
