"""Pretraining seeds side by side: does training two pretraining seeds at once, one thread each,
raise this CPU's throughput over training them in turn with all threads?

The pipeline's pretraining step (:func:`tasks.pretraining.pretrain.train` on
:class:`tasks.pretraining.modeling.PretrainingModel`, the default model size and batch) on the
pipeline's data (``data/pretraining/<name>``, else synthetic tokens as ``gpu_check.py`` makes them),
for ``--steps`` steps per seed:

* ``in_turn``: seed after seed in this process, with all of torch's threads (what ``dvc repro``
  does: one stage at a time);
* ``side_by_side``: one process per seed at once (spawned), one thread each (what
  ``finetune.seed_workers`` does for fine-tuning seeds).

Prints the aggregate tokens/s of each and their ratio. Writes
``benchmarks/results/seeds_side_by_side.json``::

    python benchmarks/seeds_side_by_side.py [--seeds 2] [--steps 300]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

import torch

from tasks.core.params import load_params
from tasks.pretraining.modeling import PretrainingModel, bert_config, new_masked_lm
from tasks.pretraining.pretrain import train

sys.path.insert(0, str(Path(__file__).parent))
from gpu_check import load_data  # noqa: E402  (benchmarks/gpu_check.py)
from results import write_results  # noqa: E402  (benchmarks/results.py)


def pretrain(seed: int, steps: int, name: str, threads: int) -> tuple[int, float]:
    """``(tokens, seconds)`` of ``steps`` pretraining steps of one seed with ``threads`` threads."""
    torch.set_num_threads(threads)
    params = load_params()
    data, vocab, pad_id, _ = load_data(params, name, False, 64 * params.pretrain.batch_size * steps)
    config = bert_config(params.model, vocab, params.pretraining_data.max_seq_length, pad_id)
    model = PretrainingModel(new_masked_lm(config, seed, params.model))
    budget = int(steps * params.pretrain.batch_size * float(data.lengths.mean()))
    cfg = params.pretrain.model_copy(update=dict(token_budget=budget, checkpoint_every=steps + 1,
                                                 log_every=steps + 1, device="cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = train.fn(model, data, cfg, seed=seed, device=torch.device("cpu"), checkpoint=Path(tmp) / "c.pt",
                           fingerprint=str(seed), log=lambda _: None)
        return summary["tokens"], time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="pretraining seeds (processes side by side)")
    parser.add_argument("--steps", type=int, default=300, help="steps per seed")
    parser.add_argument("--data", default="mlm-42", help="whose data/pretraining/<name> to read")
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    seeds = list(range(42, 42 + args.seeds))
    in_turn = [pretrain(s, args.steps, args.data, threads) for s in seeds]
    with mp.get_context("spawn").Pool(args.seeds) as pool:
        side = pool.starmap(pretrain, [(s, args.steps, args.data, max(1, threads // args.seeds)) for s in seeds])
    # training time only (start-up and data loading excluded on both sides): in turn the seeds' times
    # add up; side by side they overlap, and the slowest one ends the work
    in_turn_wall, side_wall = sum(sec for _, sec in in_turn), max(sec for _, sec in side)
    rates = {"in_turn": sum(t for t, _ in in_turn) / in_turn_wall, "side_by_side": sum(t for t, _ in side) / side_wall}
    ratio = rates["side_by_side"] / rates["in_turn"]
    print(f"{args.seeds} seeds x {args.steps} steps: in turn ({threads} threads) {rates['in_turn']:,.0f} tokens/s, "
          f"side by side ({max(1, threads // args.seeds)} thread each) {rates['side_by_side']:,.0f} tokens/s: "
          f"x{ratio:.2f}")
    write_results("seeds_side_by_side", {"seeds": args.seeds, "steps": args.steps, "data": args.data},
                  {"in_turn_tokens_per_sec": round(rates["in_turn"], 1),
                   "side_by_side_tokens_per_sec": round(rates["side_by_side"], 1), "speedup": round(ratio, 3),
                   "in_turn_wall_sec": round(in_turn_wall, 1), "side_by_side_wall_sec": round(side_wall, 1)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
