"""Unpadded attention on CUDA: does removing [PAD] from bert-base pretraining pay with PyTorch's own kernels?

The pipeline's loop (:func:`tasks.pretraining.pretrain.train`, bf16, fused AdamW, length-grouped
batches padded to a multiple of 8) on its data, three ways in this process on the same GPU, each
for ``--steps`` steps of ``--batch-size`` sequences:

* ``padded``: today's encoder (transformers' SDPA over the padded batch);
* ``jagged``: :func:`benchmarks.unpadded_bert.unpad`, attention per sequence on jagged nested tensors;
* ``varlen``: the same with FlashAttention's variable-length kernel (``torch.nn.attention.varlen``).

FlashAttention's varlen kernel has no attention dropout, so all three run with
``attention_probs_dropout_prob = 0`` here (MosaicBERT's choice, Portes et al. 2023): a throughput
comparison, not the pipeline's recipe. Steady tokens/s (real tokens) and MFU as
``benchmarks/gpu_check.py`` counts them. Needs CUDA (prints "skipped" otherwise); writes
``benchmarks/results/unpadded.json``::

    python benchmarks/unpadded.py [--steps 150] [--batch-size 256]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from tasks.core.params import load_params
from tasks.pretraining.modeling import bert_config

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import load_data, peak_flops, run_pipeline  # noqa: E402
from results import write_results  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--preset", default="bert-base")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: skipped")
        return 0
    device, params = torch.device("cuda"), load_params()
    size = params.model_presets[args.preset]
    data, vocab, pad_id, described = load_data(params, "mlm-42", False, args.steps * args.batch_size)
    config = bert_config(size, vocab, params.pretraining_data.max_seq_length, pad_id)
    config.attention_probs_dropout_prob = 0.0
    gpu, peak = peak_flops(device)
    run = argparse.Namespace(steps=args.steps, batch_size=args.batch_size, lr=1e-4, compile=False,
                             activation_checkpointing=False)
    sides = {kernel: run_pipeline(params, config, size, data, run, device, unpadded=kernel)
             for kernel in (None, "jagged", "varlen")}
    sides["padded"] = sides.pop(None)
    fpt = sides["padded"]["flops_per_token"]
    print(f"{args.preset} on {gpu}, {described}, {args.steps} steps x {args.batch_size}, no attention dropout")
    for name, side in sides.items():
        side.pop("flops_per_token")
        side["mfu"] = round(side["tokens_per_sec"] * fpt / peak, 4) if peak else None
        side["tokens_per_sec"] = round(side["tokens_per_sec"], 1)
        print(f"{name:8} {side['tokens_per_sec']:>12,.0f} tokens/s  MFU {side['mfu']}  loss {side['final_loss']}")
    figures = {**sides, "jagged_vs_padded": round(sides["jagged"]["tokens_per_sec"] / sides["padded"]["tokens_per_sec"], 3),
               "varlen_vs_padded": round(sides["varlen"]["tokens_per_sec"] / sides["padded"]["tokens_per_sec"], 3)}
    write_results("unpadded", {"preset": args.preset, "steps": args.steps, "batch_size": args.batch_size,
                               "data": described, "attention_dropout": 0.0, "peak_bf16_flops": peak}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
