"""Cost of the attention-zone intervention (``tasks/interpretability/ablation.py``) at evaluation time.

Times forward passes of a randomly initialised BERT encoder with a QA head over MRC-shaped
features (``[CLS] question [SEP] passage [SEP]``), in four settings: the plain model (its
own sdpa attention), ``block(None)`` (the registered function, nothing blocked: should
cost nothing), one zone in every layer, and one zone in one head of one layer. Prints
tokens/s and peak memory (CUDA allocator on GPU, tracemalloc is blind to torch on CPU so
the resident-set high-water mark is printed there). Sizes: the pipeline's default model
and BERT-base::

    python benchmarks/attention_zones.py [--batch 32] [--length 128] [--repeats 3] [--device auto]
"""

from __future__ import annotations

import argparse
import resource
import time
from contextlib import nullcontext

import torch
from transformers import BertConfig, BertForQuestionAnswering

from tasks.interpretability.ablation import ZoneAblation
from tasks.training.device import resolve_device

from results import write_results  # benchmarks/results.py (scripts run from their folder)

SIZES = {"pipeline (2 x 128, 2 heads)": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                             intermediate_size=512),
         "BERT-base (12 x 768, 12 heads)": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                                intermediate_size=3072)}


def features(batch: int, length: int, vocab: int) -> dict[str, torch.Tensor]:
    """Random MRC features: a 16-token question, the passage, 8 padding positions in every other row."""
    ids = torch.randint(10, vocab, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[::2, -8:] = 0
    ids[:, 0], ids[:, 17] = 2, 3
    ends = mask.sum(1) - 1
    ids[torch.arange(batch), ends] = 3
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    device = resolve_device(args.device)
    torch.manual_seed(0)
    print(f"device {device}, batch {args.batch} x {args.length} tokens, best of {args.repeats}")
    figures: dict[str, dict] = {}
    for name, size in SIZES.items():
        model = BertForQuestionAnswering(BertConfig(vocab_size=8000, max_position_embeddings=512, **size))
        model.to(device).eval()
        batch = {k: v.to(device) for k, v in features(args.batch, args.length, 8000).items()}
        ablation = ZoneAblation(model, sep_id=3)
        tokens = int(batch["attention_mask"].sum())
        settings = {"plain model": nullcontext, "block(None)": lambda: ablation.block(None),
                    "P² in every layer": lambda: ablation.block("p2p"),
                    "P² in one head": lambda: ablation.block("p2p", layers={0}, heads={0})}
        print(f"\n{name}")
        for label, context in settings.items():
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            best = float("inf")
            with torch.no_grad():
                for _ in range(args.repeats):
                    with context():
                        t0 = time.perf_counter()
                        model(**batch)
                        if device.type == "cuda":
                            torch.cuda.synchronize(device)
                        best = min(best, time.perf_counter() - t0)
            print(f"  {label:<20} {tokens / best / 1e3:9.1f} k tokens/s   peak {peak_mb(device):8.0f} MiB")
            figures.setdefault(name, {})[label] = {"tokens_per_sec": round(tokens / best, 1),
                                                   "peak_mb": round(peak_mb(device), 1)}
        plain = figures[name]["plain model"]["tokens_per_sec"]
        for row in figures[name].values():
            row["vs_plain_model"] = round(row["tokens_per_sec"] / plain, 3)
    write_results("attention_zones", {"device": str(device), "batch": args.batch, "length": args.length,
                                      "repeats": args.repeats}, figures)


if __name__ == "__main__":
    main()
