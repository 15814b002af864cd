"""Packing: how full the pretraining sequences are, and what filling them buys per step.

The real tokenized corpus (``data/tokens/sentences.parquet``, stage ``tokenize``) is packed
both ways of ``pretraining_data.packing`` (:mod:`tasks.pretraining.pretraining_data`):

* ``doc_sentences`` (BERT's, the default): sentences of one document per sequence;
* ``full_sentences`` (RoBERTa §4.2): a sequence goes on into the next document after a [SEP].

For each: sequences, fill rate (non-padding share of ``sequences x max_seq_length``), tokens
per optimizer step at ``pretrain.batch_size``, and the steps ``pretrain.token_budget`` takes.
Then the pipeline's training step (:class:`tasks.pretraining.modeling.PretrainingModel`,
AdamW, clipping, dynamic MLM masks; the default model size) runs on batches of each,
alternated block by block, each side its own model from the same seed: tokens/s, and the
minutes the budget would take at that rate (steps x seconds per step). Whether the science
holds is a pipeline run (``dvc exp run -S pretraining_data.packing=full_sentences``), not this.

Writes ``benchmarks/results/packing.json``::

    python benchmarks/packing.py [--steps 20] [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tasks.core import paths
from tasks.core.params import load_params
from tasks.corpus.tokenize import random_token_ids
from tasks.pretraining.modeling import PretrainingModel, bert_config, new_masked_lm
from tasks.pretraining.examples import DynamicMasker, PretrainingExamples
from tasks.pretraining.pretrain import total_steps_for
from tasks.pretraining.masking import masking_config
from tasks.pretraining.packed import Packed
from tasks.pretraining.packing import pack_stream
from tasks.training.batching import BatchSchedule
from tasks.training.optim import optimizer_for

sys.path.insert(0, str(Path(__file__).parent))
from results import write_results  # noqa: E402  (benchmarks/results.py)

PACKINGS = ("doc_sentences", "full_sentences")


def examples(packed: Packed, masker: DynamicMasker) -> PretrainingExamples:
    """Dynamic-masking examples of packed rows (flat layout, padding dropped)."""
    valid = np.arange(packed.input_ids.shape[1])[None, :] < packed.lengths[:, None]
    offsets = np.concatenate([[0], np.cumsum(packed.lengths, dtype=np.int64)])
    return PretrainingExamples(packed.input_ids[valid], offsets, word_ids=packed.word_ids[valid], masker=masker)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="steps per block")
    parser.add_argument("--rounds", type=int, default=6, help="blocks per side, alternated (the first is warm-up)")
    args = parser.parse_args(argv)
    if not paths.TOKENS.is_file():
        print(f"packing: {paths.TOKENS} not found; run `dvc repro tokenize` first")
        return 1
    from transformers import AutoTokenizer

    params = load_params()
    cfg, pre, width = params.pretraining_data, params.pretrain, params.pretraining_data.max_seq_length
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    masker = DynamicMasker(masking_config(params.objective("mlm"), cfg), params.seed, "mlm",
                           tokenizer.mask_token_id, random_token_ids(tokenizer))
    config = bert_config(params.model, len(tokenizer), width, tokenizer.pad_token_id)
    sides, figures = {}, {}
    for packing in PACKINGS:
        t0 = time.perf_counter()
        packed = Packed.concat(list(pack_stream(paths.TOKENS, width, tokenizer.cls_token_id, tokenizer.sep_token_id,
                                                cross_documents=packing == "full_sentences")), width)
        seconds = time.perf_counter() - t0
        data = examples(packed, masker)
        mean = float(data.lengths.mean())
        steps = total_steps_for(pre.token_budget, pre.batch_size, mean)
        figures[packing] = {"sequences": len(data), "fill_rate": round(mean / width, 4),
                            "tokens_per_sequence": round(mean, 2), "tokens_per_step": round(pre.batch_size * mean, 1),
                            "steps_for_budget": steps, "pack_sec": round(seconds, 2)}
        model = PretrainingModel(new_masked_lm(config, params.seed, params.model))
        model.train()
        sides[packing] = {"data": data, "model": model, "schedule": BatchSchedule(data.lengths, pre.batch_size, params.seed),
                          "opt": optimizer_for(model, pre.learning_rate, pre.weight_decay), "rates": [], "step_sec": []}
    for r in range(args.rounds):
        for packing, side in sides.items():
            block = [side["data"].batch(side["schedule"](r * args.steps + i), r * args.steps + i)
                     for i in range(args.steps)]
            t0 = time.perf_counter()
            for b in block:
                loss, _ = side["model"](b)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(side["model"].parameters(), pre.max_grad_norm)
                side["opt"].step()
                side["opt"].zero_grad(set_to_none=True)
            seconds = time.perf_counter() - t0
            if r:  # the first round warms up the allocator and kernels
                side["rates"].append(sum(int(b["attention_mask"].sum()) for b in block) / seconds)
                side["step_sec"].append(seconds / args.steps)
    base = figures["doc_sentences"]
    print(f"packing: {paths.TOKENS}, max_seq_length {width}, batch {pre.batch_size}, budget {pre.token_budget:,} "
          f"tokens; model L{params.model.num_hidden_layers} H{params.model.hidden_size}; {torch.get_num_threads()} threads")
    print(f"{'packing':>15} {'sequences':>10} {'fill %':>7} {'tokens/step':>12} {'steps':>7} {'tokens/s':>9} "
          f"{'s/step':>7} {'budget min':>11} {'vs doc':>7}")
    for packing, side in sides.items():
        f = figures[packing]
        f["tokens_per_sec"] = round(statistics.median(side["rates"]), 1)
        f["sec_per_step"] = round(statistics.median(side["step_sec"]), 5)
        f["budget_minutes"] = round(f["steps_for_budget"] * f["sec_per_step"] / 60, 2)
        f["speedup_vs_doc_sentences"] = round(base["budget_minutes"] / f["budget_minutes"], 2)
        print(f"{packing:>15} {f['sequences']:>10,} {100 * f['fill_rate']:>7.1f} {f['tokens_per_step']:>12,.0f} "
              f"{f['steps_for_budget']:>7,} {f['tokens_per_sec']:>9,.0f} {f['sec_per_step']:>7.4f} "
              f"{f['budget_minutes']:>11.2f} {f['speedup_vs_doc_sentences']:>6.2f}x")
    write_results("packing", {"corpus": str(paths.TOKENS), "max_seq_length": width, "batch_size": pre.batch_size,
                              "token_budget": pre.token_budget, "model": params.model.model_dump(),
                              "steps_per_block": args.steps, "rounds": args.rounds}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
