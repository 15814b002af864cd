"""bf16 autocast against fp32 in pretraining on this CPU: whole pretraining runs of the pipeline's loop, side by
side in one process, over several initialisations: each side's tokens/s and its held-out MLM loss at a quarter,
half and all of the same budget, and the difference from fp32 with its 95% interval over the initialisations and
the held-out sequences. One run per side is no evidence: when a tiny model leaves its early loss plateau varies
from one initialisation to the next, by more than precision moves the loss.

* Sides: ``fp32``; ``bf16``, as the loop runs CPU bf16 (``pretrain.bf16: true``: ``torch.autocast("cpu",
  bfloat16)`` around the forward passes, matmuls in bf16, the losses and the optimizer in fp32; each batch at its
  own width); ``bf16_padded``, bf16 with each batch widened to a multiple of 16 (at most the longest example:
  :data:`tasks.pretraining.pretrain.CPU_WIDTH_MULTIPLE`), which gives oneDNN, which builds a bf16 primitive per
  shape, few shapes; the loop no longer pads on CPU, because that learned worse still.
* Runs: :func:`tasks.pretraining.pretrain.train` as stage ``pretrain@mlm-42`` calls it: the data
  ``data/pretraining/mlm-42`` (``dvc repro pretraining_data@mlm``), the recipe its sweep chose
  (``data/recipes/mlm.json``) and its batches; the initial weights of each seed of ``--seeds``, the same for every
  side. On the default model at the default budget, and on a wider one (H256 L4, where bf16's matmuls pay most)
  at ``--wide-fraction`` of it, fp32 and bf16 with the first seed, for tokens/s.
* Held-out loss: :func:`tasks.pretraining.heldout.evaluate_mlm` on the ``curves.heldout_task``'s dev text (the
  same masked positions for every model), in fp32. ``<side>_minus_fp32``:
  :func:`tasks.report.statistics.compare`, paired over initialisations and held-out sequences (the loss a ratio
  of sums: nats over masked tokens).
* tokens/s: non-padding tokens over the training seconds of all of a side's runs, the evaluations left out.

On a CPU without native bf16 (no ``avx512_bf16``/``amx_bf16``: AVX2 only, bf16 emulated at about
0.07x fp32) it says so and writes nothing. Writes ``benchmarks/results/bf16.json``::

    python benchmarks/bf16.py [--seeds 42,43,44] [--sides fp32,bf16,bf16_padded] [--wide-fraction 0.125]
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
SIDES = {"fp32": (False, 1), "bf16": (True, 1), "bf16_padded": (True, 16)}  # bf16, CPU width multiple


def heldout_loss(model, ids: np.ndarray, offsets: np.ndarray, masks: dict) -> np.ndarray:
    """The held-out MLM loss of ``model`` as per-sequence counts ``[N, 2]`` (loss sum, masked positions)."""
    p = evaluate_mlm(model.hf, ids, offsets, positions=True, **masks)["positions"]
    n = len(offsets) - 1
    model.train()
    return np.stack([np.bincount(p["rows"], p["losses"], n), np.bincount(p["rows"], minlength=n)], 1)


def outcomes(counts: list[np.ndarray], seeds: list[int]) -> Outcomes:
    """Per-initialisation held-out counts as :class:`Outcomes` (initialisations as pretraining seeds)."""
    return Outcomes(np.stack(counts)[:, None], mean_of(), seeds=tuple(seeds))


def point(o: Outcomes) -> dict:
    """``o``'s held-out loss and its 95% interval."""
    band = interval(o)
    return {"loss": round(o.estimate, 4), "low": round(float(band.low), 4), "high": round(float(band.high), 4)}


def pretrain(params, tokenizer, name: str, side: str, init: int, budget: int,
             heldout: tuple) -> tuple[dict, np.ndarray]:
    """One whole pretraining run of ``side`` from initialisation ``init``: its tokens, seconds and held-out curve,
    and its final held-out counts."""
    pretraining, seed = build(params, "mlm"), params.pretrain.seeds[0]
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / paths.seeded("mlm", seed)),
                                          pretraining.masker(seed, tokenizer, paths.LEXICON))
    cfg, _ = recipe(params, "mlm", paths.RECIPES / "mlm.json")
    bf16, multiple = SIDES[side]
    cfg = cfg.model_copy(update={"bf16": bf16, "token_budget": budget, "device": "cpu"})
    model = pretraining.model(params, tokenizer, init)
    curve, evaluation = {}, [0.0]

    def measure(fraction: float, info: dict) -> None:
        t0 = time.perf_counter()
        curve[fraction] = point(outcomes([heldout_loss(model, *heldout)], [init]))
        evaluation[0] += time.perf_counter() - t0

    checkpoint = Path(f"checkpoints/bench-bf16-{name}.pt")
    default_multiple, pretrain_module.CPU_WIDTH_MULTIPLE = pretrain_module.CPU_WIDTH_MULTIPLE, multiple
    try:
        summary = train.fn(model, data, cfg, seed=seed, device=torch.device("cpu"), checkpoint=checkpoint,
                           fingerprint=f"bench-bf16-{name}-{time.time()}", log=lambda _: None, snapshots=POINTS,
                           snapshot=measure)
    finally:
        pretrain_module.CPU_WIDTH_MULTIPLE = default_multiple
    checkpoint.unlink(missing_ok=True)
    final = heldout_loss(model, *heldout)
    curve[1.0] = point(outcomes([final], [init]))
    return {"init": init, "precision": summary["precision"], "steps": summary["steps"], "tokens": summary["tokens"],
            "train_seconds": round(summary["wall_sec"] - evaluation[0], 1), "final_train_loss": summary["final_loss"],
            "heldout": {str(k): v for k, v in sorted(curve.items())}}, final


def side_by_side(params, tokenizer, size: str, sides: list[str], seeds: list[int], budget: int, heldout: tuple) -> dict:
    """Every side from every initialisation (seeds outermost, so a stop leaves whole seeds); the figures."""
    runs, finals = {side: [] for side in sides}, {side: [] for side in sides}
    for init in seeds:
        for side in sides:
            run, final = pretrain(params, tokenizer, f"{size}-{side}-{init}", side, init, budget, heldout)
            runs[side].append(run)
            finals[side].append(final)
            print(f"{size:>8} {side} init {init}: {run['tokens'] / run['train_seconds']:,.0f} tokens/s, "
                  f"{run['train_seconds']:.0f} s; held-out loss " + ", ".join(
                      f"{k}: {v['loss']:.3f}" for k, v in run["heldout"].items()), flush=True)
    m = params.model
    figures = {"model": f"L{m.num_hidden_layers} H{m.hidden_size} A{m.num_attention_heads}", "token_budget": budget,
               "inits": seeds}
    rate = {side: sum(r["tokens"] for r in rs) / sum(r["train_seconds"] for r in rs) for side, rs in runs.items()}
    for side in sides:
        figures[side] = {"tokens_per_sec": round(rate[side], 1), "runs": runs[side],
                         "heldout_end": point(outcomes(finals[side], seeds))}
    for side in sides[1:]:
        diff = compare(outcomes(finals[side], seeds), outcomes(finals["fp32"], seeds))
        figures[f"{side}_vs_fp32_tokens_per_sec"] = round(rate[side] / rate["fp32"], 2)
        figures[f"{side}_minus_fp32"] = {"loss": round(diff.difference, 4), "low": round(float(diff.low), 4),
                                         "high": round(float(diff.high), 4), "verdict": diff.verdict}
        print(f"{size:>8}: {side} against fp32: tokens/s x{rate[side] / rate['fp32']:.2f}; held-out loss "
              f"{diff.difference:+.3f} [{diff.low:+.3f}, {diff.high:+.3f}] ({diff.verdict})", flush=True)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="42,43,44", help="initialisations of the default model (comma-separated)")
    parser.add_argument("--sides", default=",".join(SIDES), help=f"of {', '.join(SIDES)}; fp32 first")
    parser.add_argument("--wide-fraction", type=float, default=0.125,
                        help="the wide model's budget, as a share of the default one (its fp32 run is 4x slower)")
    args = parser.parse_args(argv)
    if not cpu_has_bf16():
        print("bf16: this CPU has no native bf16 (avx512_bf16 or amx_bf16): bf16 would be emulated, at about "
              "0.07x fp32; nothing measured, nothing written")
        return 0
    seeds, sides = [int(s) for s in args.seeds.split(",")], args.sides.split(",")
    if sides[0] != "fp32" or not set(sides) <= set(SIDES):
        parser.error(f"--sides: fp32 first, then any of {', '.join(SIDES)}")
    params = load_params()
    torch.set_num_threads(params.pretrain.threads or torch.get_num_threads())
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    ids, offsets, masks = build(params, "mlm").heldout_inputs(params, tokenizer, torch.device("cpu"), split="dev")
    budget, heldout = params.pretrain.token_budget, (ids, offsets, masks)
    wide = params.model_copy(update={"model": params.model.model_copy(update=WIDE)})
    figures = {"default": side_by_side(params, tokenizer, "default", sides, seeds, budget, heldout),
               "wide": side_by_side(wide, tokenizer, "wide", ["fp32", "bf16"], seeds[:1],
                                    round(budget * args.wide_fraction), heldout)}
    write_results("bf16", {"objective": "mlm-42", "batch_size": params.pretrain.batch_size,
                           "heldout": f"{params.curves.heldout_task} dev, {len(offsets) - 1} sequences",
                           "sides": sides, "wide": WIDE, "wide_fraction": args.wide_fraction}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
