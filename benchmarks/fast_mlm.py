"""CINO's fast MLM against the full softmax in continued multilingual pretraining.

Stage ``continue_pretrain``'s run, twice in this process on the same mixture, base model,
budget and seed: once with the softmax over the whole extended vocabulary, once with each
language's masked tokens predicted over that language's vocabulary only
(:mod:`tasks.multilingual.fast_mlm`, ``multilingual.pretrain.fast_mlm``). Prints the wall time
of training and the ratio, the share of the vocabulary each language's softmax covers, and
the held-out MLM accuracy and perplexity per language (always over the full vocabulary, the
stage's evaluation) of both models. The two runs are sequential, not alternated: compare
the ratio, and rerun when the machine is busy.

Writes ``benchmarks/results/fast_mlm.json``::

    python benchmarks/fast_mlm.py [--mixture resampled]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq
import torch

from tasks.core import paths
from tasks.core.params import load_params
from tasks.multilingual.continue_pretrain import evaluate_heldout, mixture_examples, pack_table, resized_base_model
from tasks.multilingual.fast_mlm import FastMLM, language_vocabularies
from tasks.multilingual.multilingual import read_documents
from tasks.pretraining.modeling import PretrainingModel
from tasks.pretraining.pretrain import train

sys.path.insert(0, str(Path(__file__).parent))
from results import write_results  # noqa: E402  (benchmarks/results.py)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mixture", default="resampled", help="a name under multilingual.mixtures")
    args = parser.parse_args(argv)
    needed = [paths.MULTILINGUAL_TOKENIZER, paths.MIXTURES / f"{args.mixture}.parquet"]
    if not all(p.exists() for p in needed):
        print(f"fast_mlm: run `dvc repro resample@{args.mixture}` first ({', '.join(map(str, needed))})")
        return 1
    from transformers import AutoTokenizer

    params = load_params()
    spec, data_cfg, seed = params.multilingual, params.pretraining_data, params.seed
    tokenizer = AutoTokenizer.from_pretrained(paths.MULTILINGUAL_TOKENIZER)
    heldout = pack_table(tokenizer, read_documents(paths.MULTILINGUAL, "heldout"), data_cfg.max_seq_length)
    data, langs = mixture_examples(tokenizer, pq.read_table(paths.MIXTURES / f"{args.mixture}.parquet"), args.mixture,
                                   data_cfg, seed)
    vocabularies = language_vocabularies(data, len(langs))
    cfg = params.pretrain.model_copy(update={**spec.pretrain.model_dump(exclude={"fast_mlm"}), "device": "cpu"})
    device, figures = torch.device("cpu"), {}
    for side in ("full_softmax", "fast_mlm"):
        model, _ = resized_base_model(paths.MODELS / spec.base_model, len(tokenizer), seed)
        trainee = FastMLM(model, vocabularies) if side == "fast_mlm" else PretrainingModel(model)
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            summary = train.fn(trainee, data, cfg, seed=seed, device=device, checkpoint=Path(tmp) / "last.pt",
                               fingerprint=side, log=lambda _: None)
            seconds = time.perf_counter() - t0
        scores = evaluate_heldout.fn(side, model, heldout, data_cfg, seed=seed, mask_token_id=tokenizer.mask_token_id,
                                     device=device)
        figures[side] = {"train_sec": round(seconds, 2), "tokens_per_sec": round(summary["tokens"] / seconds, 1),
                         "final_train_loss": summary["final_loss"],
                         "heldout": {lang: {k: s[k] for k in ("accuracy", "perplexity", "predictions")}
                                     for lang, s in scores.items()}}
    figures["speedup"] = round(figures["full_softmax"]["train_sec"] / figures["fast_mlm"]["train_sec"], 3)
    figures["vocabulary"] = {lang: len(v) for lang, v in zip(langs, vocabularies)}
    print(f"fast_mlm: mixture {args.mixture}, {len(data):,} sequences, {cfg.token_budget:,} tokens, vocabulary "
          f"{len(tokenizer):,}, model {spec.base_model}; {torch.get_num_threads()} threads")
    full, fast = figures["full_softmax"], figures["fast_mlm"]
    print(f"training: full softmax {full['train_sec']:.1f} s, fast MLM {fast['train_sec']:.1f} s: "
          f"x{figures['speedup']:.2f} ({100 * (1 - 1 / figures['speedup']):.0f}% of the time saved)")
    print(f"{'lang':>5} {'vocab':>7} {'share %':>8} {'acc full':>9} {'acc fast':>9} {'ppl full':>10} {'ppl fast':>10}")
    for lang in full["heldout"]:
        a, b, v = full["heldout"][lang], fast["heldout"][lang], figures["vocabulary"].get(lang, 0)
        print(f"{lang:>5} {v:>7,} {100 * v / len(tokenizer):>8.1f} {100 * (a['accuracy'] or 0):>9.2f} "
              f"{100 * (b['accuracy'] or 0):>9.2f} {a['perplexity'] or float('nan'):>10.1f} "
              f"{b['perplexity'] or float('nan'):>10.1f}")
    write_results("fast_mlm", {"mixture": args.mixture, "base_model": spec.base_model, "token_budget": cfg.token_budget,
                               "vocab_size": len(tokenizer), "sequences": len(data)}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
