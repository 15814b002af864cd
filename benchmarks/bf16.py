"""bf16 autocast against fp32 in pretraining on this CPU: whole pretraining runs of the pipeline's loop,
both precisions side by side in one process, each run's tokens/s and its held-out MLM loss at a quarter,
half and all of the same budget, with fp32's 95% interval; on the default model at the default budget and
on a wider one (H256 L4) where bf16's matmuls pay. On the default model also ``bf16_ragged``: bf16 with each
batch at its own width, as fp32 runs (the loop widens CPU bf16 batches to a multiple of
:data:`tasks.pretraining.pretrain.CPU_BF16_WIDTH_MULTIPLE`, for oneDNN's per-shape primitives).

* Runs: :func:`tasks.pretraining.pretrain.train` as stage ``pretrain@mlm-42`` calls it: the data
  ``data/pretraining/mlm-42`` (``dvc repro pretraining_data@mlm``), the recipe its sweep chose
  (``data/recipes/mlm.json``), the same seed and so the same initial weights and batches for both
  precisions; ``pretrain.bf16`` false for fp32, true for bf16 (``torch.autocast("cpu", bfloat16)``
  around the forward passes: matmuls in bf16, the losses and the optimizer in fp32).
* Held-out loss: :func:`tasks.pretraining.heldout.evaluate_mlm` on the ``curves.heldout_task``'s dev
  text (the same masked positions for every model), in fp32, at each point. Its interval is the
  variance-components t interval of :func:`tasks.report.statistics.interval` over held-out sequences
  (the loss a ratio of sums: nats over masked tokens). ``bf16_minus_fp32``: the paired difference at the
  end with its interval; two trainings apart by precision differ as two seeds do, so the paired test
  finds a difference of any size given enough positions: the question is its size, against fp32's
  interval and the seed spread of ``metrics/pretrain``.
* tokens/s: non-padding tokens over the training seconds, the held-out evaluations left out.

On a CPU without native bf16 (no ``avx512_bf16``/``amx_bf16``: AVX2 only, bf16 emulated at about
0.07x fp32) it says so and writes nothing. Writes ``benchmarks/results/bf16.json``::

    python benchmarks/bf16.py [--wide-fraction 0.25]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.params import load_params
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.heldout import evaluate_mlm
from tasks.pretraining.objectives import build
from tasks.pretraining import pretrain as pretrain_module
from tasks.pretraining.pretrain import train
from tasks.pretraining.pretraining_data import read_shards
from tasks.pretraining.recipe import recipe
from tasks.report.statistics import Outcomes, compare, interval, mean_of
from tasks.training.device import cpu_has_bf16

sys.path.insert(0, str(Path(__file__).parent))
from results import write_results  # noqa: E402  (benchmarks/results.py)

WIDE = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024}
POINTS = (0.25, 0.5)  # and the end


def heldout_loss(model, ids: np.ndarray, offsets: np.ndarray, masks: dict) -> Outcomes:
    """The held-out MLM loss of ``model`` as per-sequence counts (loss sum, masked positions)."""
    p = evaluate_mlm(model.hf, ids, offsets, positions=True, **masks)["positions"]
    n = len(offsets) - 1
    sums = np.stack([np.bincount(p["rows"], p["losses"], n), np.bincount(p["rows"], minlength=n)], 1)
    model.train()
    return Outcomes(sums[None, None], mean_of())


def point(o: Outcomes) -> dict:
    band = interval(o)
    return {"loss": round(o.estimate, 4), "low": round(float(band.low), 4), "high": round(float(band.high), 4)}


def pretrain(params, tokenizer, name: str, bf16: bool, budget: int, heldout: tuple) -> tuple[dict, Outcomes]:
    """One whole pretraining run at ``precision``; its tokens/s and held-out curve, and its final held-out loss."""
    pretraining, seed = build(params, "mlm"), params.pretrain.seeds[0]
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / paths.seeded("mlm", seed)),
                                          pretraining.masker(seed, tokenizer, paths.LEXICON))
    cfg, _ = recipe(params, "mlm", paths.RECIPES / "mlm.json")
    cfg = cfg.model_copy(update={"bf16": bf16, "token_budget": budget, "device": "cpu"})
    model = pretraining.model(params, tokenizer, seed)
    curve, evaluation = {}, [0.0]

    def measure(fraction: float, info: dict) -> None:
        t0 = time.perf_counter()
        curve[fraction] = point(heldout_loss(model, *heldout))
        evaluation[0] += time.perf_counter() - t0

    checkpoint = Path(f"checkpoints/bench-bf16-{name}.pt")
    summary = train.fn(model, data, cfg, seed=seed, device=torch.device("cpu"), checkpoint=checkpoint,
                       fingerprint=f"bench-bf16-{name}-{time.time()}", log=lambda _: None, snapshots=POINTS,
                       snapshot=measure)
    checkpoint.unlink(missing_ok=True)
    final = heldout_loss(model, *heldout)
    curve[1.0] = point(final)
    seconds = summary["wall_sec"] - evaluation[0]
    return {"precision": summary["precision"], "steps": summary["steps"], "tokens": summary["tokens"],
            "train_seconds": round(seconds, 1), "tokens_per_sec": round(summary["tokens"] / seconds, 1),
            "final_train_loss": summary["final_loss"], "heldout": {str(k): v for k, v in sorted(curve.items())}}, final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wide-fraction", type=float, default=0.25,
                        help="the wide model's budget, as a share of the default one (its fp32 run is 4x slower)")
    args = parser.parse_args(argv)
    if not cpu_has_bf16():
        print("bf16: this CPU has no native bf16 (avx512_bf16 or amx_bf16): bf16 would be emulated, at about "
              "0.07x fp32; nothing measured, nothing written")
        return 0
    params = load_params()
    torch.set_num_threads(params.pretrain.threads or torch.get_num_threads())
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    ids, offsets, masks = build(params, "mlm").heldout_inputs(params, tokenizer, torch.device("cpu"), split="dev")
    budget = params.pretrain.token_budget
    sizes = {"default": (params, budget),
             "wide": (params.model_copy(update={"model": params.model.model_copy(update=WIDE)}),
                      round(budget * args.wide_fraction))}
    figures = {}
    for size, (p, tokens) in sizes.items():
        runs, finals = {}, {}
        for precision in ("fp32", "bf16") + (("bf16_ragged",) if size == "default" else ()):
            multiple = pretrain_module.CPU_BF16_WIDTH_MULTIPLE
            pretrain_module.CPU_BF16_WIDTH_MULTIPLE = 1 if precision == "bf16_ragged" else multiple
            try:
                runs[precision], finals[precision] = pretrain(p, tokenizer, f"{size}-{precision}", precision != "fp32",
                                                              tokens, (ids, offsets, masks))
            finally:
                pretrain_module.CPU_BF16_WIDTH_MULTIPLE = multiple
            r = runs[precision]
            print(f"{size:>8} {precision}: {r['tokens_per_sec']:,.0f} tokens/s, {r['train_seconds']:.0f} s; held-out "
                  f"loss " + ", ".join(f"{k}: {v['loss']:.3f} [{v['low']:.3f}, {v['high']:.3f}]"
                                       for k, v in r["heldout"].items()), flush=True)
        diff = compare(finals["bf16"], finals["fp32"])
        m = p.model
        ratios = {f"{side}_vs_fp32_tokens_per_sec": round(r["tokens_per_sec"] / runs["fp32"]["tokens_per_sec"], 2)
                  for side, r in runs.items() if side != "fp32"}
        figures[size] = {
            "model": f"L{m.num_hidden_layers} H{m.hidden_size} A{m.num_attention_heads}", "token_budget": tokens,
            **runs, **ratios,
            "bf16_minus_fp32": {"loss": round(diff.difference, 4), "low": round(float(diff.low), 4),
                                "high": round(float(diff.high), 4)},
            "bf16_within_fp32_interval": runs["fp32"]["heldout"]["1.0"]["low"] <= runs["bf16"]["heldout"]["1.0"]["loss"]
            <= runs["fp32"]["heldout"]["1.0"]["high"]}
        f = figures[size]
        against = ", ".join(f"{k.split('_vs')[0]} x{v:.2f}" for k, v in ratios.items())
        print(f"{size:>8}: tokens/s against fp32 {against}; held-out loss bf16 - fp32 {diff.difference:+.3f} "
              f"[{diff.low:+.3f}, {diff.high:+.3f}], bf16 within fp32's interval: {f['bf16_within_fp32_interval']}",
              flush=True)
    write_results("bf16", {"objective": "mlm-42", "batch_size": params.pretrain.batch_size,
                           "heldout": f"{params.curves.heldout_task} dev, {len(offsets) - 1} sequences",
                           "wide": WIDE, "wide_fraction": args.wide_fraction}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
