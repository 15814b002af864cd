"""The unigram plateau: why the default encoder predicted every masked token from token frequencies
alone for most of its budget, and what lifts it.

MLM on the pipeline's data (``data/pretraining/mlm-42``), the default size and recipe, for
``--fraction`` of the token budget (the schedule shortened to it), four ways, each measured on the
held-out text of stage ``curves`` (the same masked positions) against two peers that need no
training:

* ``bert_init``: BERT's initialisation with sinusoidal position embeddings of amplitude 0.03 (the
  recipe before the locality prior);
* ``fixed_local_bias``: the same, with a fixed attention bias of ``--bias`` towards the previous
  token in head 0 and the next in head 1 of every layer (the diagnosis: if the neighbours are
  what the plateau lacks, this leaves it at once; not a model a BERT checkpoint can hold);
* ``local_init``: the default, :mod:`tasks.pretraining.initialization` (the prior as an
  initialisation; the saved model is an ordinary BERT);
* peers: the unigram predictor (the plateau) and a left-and-right bigram predictor counted on the
  pretraining corpus (what the nearest neighbours alone give).

Writes ``benchmarks/results/plateau.json``::

    python benchmarks/plateau.py [--fraction 0.25] [--bias 4]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.params import load_params
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.heldout import masked_batches, corpus_unigram, evaluate_mlm, heldout_text
from tasks.pretraining.objectives import build
from tasks.pretraining.pretrain import train
from tasks.pretraining.pretraining_data import read_shards

sys.path.insert(0, str(Path(__file__).parent))
from results import write_results  # noqa: E402  (benchmarks/results.py)


class LocalBias:
    """While active, every scaled-dot-product attention adds ``strength`` to the logits of the
    previous token in head 0 and of the next token in head 1 (a fixed, ALiBi-like bias)."""

    def __init__(self, strength: float):
        self.strength, self.original = strength, F.scaled_dot_product_attention

    def __enter__(self):
        def biased(q, k, v, attn_mask=None, **kw):
            heads, length = q.shape[1], q.shape[2]
            bias = torch.zeros(heads, length, length, dtype=q.dtype)
            i = torch.arange(length)
            bias[0, i[1:], i[:-1]] = self.strength
            if heads > 1:
                bias[1, i[:-1], i[1:]] = self.strength
            if attn_mask is not None and attn_mask.dtype == torch.bool:
                attn_mask = torch.zeros(attn_mask.shape, dtype=q.dtype).masked_fill(~attn_mask, float("-inf"))
            return self.original(q, k, v, attn_mask=bias if attn_mask is None else attn_mask + bias, **kw)
        F.scaled_dot_product_attention = biased
        return self

    def __exit__(self, *exc):
        F.scaled_dot_product_attention = self.original


def bigram(tokenizer, unigram: np.ndarray, ids: np.ndarray, offsets: np.ndarray, masks: dict) -> dict:
    """Held-out accuracy and loss of ``p(x | left, right) ∝ p(x | left) p(right | x)``, counted on the
    pretraining corpus (add-0.1 smoothed towards the unigram), at the masked positions of ``masks``."""
    col = pq.read_table(paths.TOKENS, columns=["input_ids"]).column("input_ids").combine_chunks()
    values, starts = np.asarray(col.values), np.asarray(col.offsets)[:-1]
    inner = np.ones(len(values) - 1, bool)
    inner[starts[1:] - 1] = False  # no pair across sentences
    v = len(unigram)
    counts = sp.coo_matrix((np.ones(inner.sum()), (values[:-1][inner], values[1:][inner])), shape=(v, v)).tocsr()
    prior = 0.1 * np.exp(np.where(np.isfinite(unigram), unigram, -np.inf)) * 100
    skip = set(tokenizer.all_special_ids)
    correct = loss = n = 0
    for input_ids, _, rows, cols, labels, _, _ in masked_batches(ids, offsets, **masks, batch_size=32,
                                                                  device=torch.device("cpu")):
        x = input_ids.numpy()
        for r, c, y in zip(rows.tolist(), cols.tolist(), labels.tolist()):
            score = unigram.copy()
            left, right = x[r, c - 1], x[r, c + 1] if c + 1 < x.shape[1] else 0
            if left not in skip:
                row = counts[left].toarray().ravel() + prior
                score += np.log(row / row.sum()) - unigram
            if right not in skip and right != 0:
                score += np.log((counts[:, right].toarray().ravel() + prior) / np.exp(unigram))
            p = np.exp(score - score.max())
            correct, loss, n = correct + int(score.argmax() == y), loss - np.log(p[y] / p.sum() + 1e-12), n + 1
    return {"accuracy": correct / n, "loss": loss / n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fraction", type=float, default=0.25, help="share of the token budget each run trains for")
    parser.add_argument("--bias", type=float, default=4.0, help="logit bias of the fixed local heads")
    args = parser.parse_args(argv)
    params = load_params()
    mlm = build(params, "mlm")
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    data = PretrainingExamples.from_table(read_shards(paths.PRETRAINING / "mlm-42"))
    ids, offsets = heldout_text(params.curves.heldout_task, tokenizer, params.pretraining_data.max_seq_length,
                                params.curves.heldout_sequences)
    masks = dict(lang=params.curves.heldout_task, seed=params.seed, mask_token_id=tokenizer.mask_token_id,
                 masked_lm_prob=params.pretraining_data.masked_lm_prob,
                 max_predictions=params.pretraining_data.max_predictions_per_seq)
    unigram = corpus_unigram(paths.TOKENS, len(tokenizer))
    cfg = params.pretrain.model_copy(update={"token_budget": round(params.pretrain.token_budget * args.fraction),
                                             "snapshots": [], "checkpoint_every": 10 ** 9})
    old = params.model.model_copy(update={"sinusoidal_position_amplitude": 0.03, "local_attention_layers": 0})
    runs = {"bert_init": (old, None), "fixed_local_bias": (old, args.bias), "local_init": (params.model, None)}
    figures = {}
    for name, (size, bias) in runs.items():
        model = mlm.model(params.model_copy(update={"model": size}), tokenizer, 42)
        with tempfile.TemporaryDirectory() as tmp, LocalBias(bias) if bias else nullcontext():
            summary = train.fn(model, data, cfg, seed=42, device=torch.device("cpu"), checkpoint=Path(tmp) / "c.pt",
                               fingerprint=name, log=lambda _: None)
            scores = evaluate_mlm(model.hf, ids, offsets, **masks, device=torch.device("cpu"))
        figures[name] = {"accuracy": round(scores["accuracy"], 4), "loss": round(scores["loss"], 4),
                         "tokens": summary["tokens"], "tokens_per_sec": summary["tokens_per_sec"]}
        print(f"{name}: held-out accuracy {scores['accuracy']:.3f}, loss {scores['loss']:.3f}")
    labels = np.concatenate([b[4].numpy() for b in masked_batches(ids, offsets, **masks, batch_size=32,
                                                                  device=torch.device("cpu"))])
    figures["unigram"] = {"accuracy": round(float((labels == unigram.argmax()).mean()), 4),
                          "loss": round(float(-unigram[labels].mean()), 4)}
    figures["bigram"] = {k: round(v, 4) for k, v in bigram(tokenizer, unigram, ids, offsets, masks).items()}
    for name in ("unigram", "bigram"):
        print(f"{name} (no training): held-out accuracy {figures[name]['accuracy']:.3f}, loss {figures[name]['loss']:.3f}")
    figures["local_init_vs_bert_init_accuracy"] = round(figures["local_init"]["accuracy"]
                                                        / figures["bert_init"]["accuracy"], 2)
    write_results("plateau", {"fraction": args.fraction, "bias": args.bias, "data": "data/pretraining/mlm-42",
                              "heldout": f"{params.curves.heldout_task}, {len(offsets) - 1} sequences",
                              "model": params.model.model_dump(), "learning_rate": cfg.learning_rate,
                              "batch_size": cfg.batch_size}, figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
