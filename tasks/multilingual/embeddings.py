"""The model side of vocabulary adaptation: embedding resize and vocabulary pruning
(the tokenizer side is :mod:`tasks.multilingual.vocabulary`).

- **Embedding resize**: new input/output embedding rows start at the mean of the
  old rows plus tiny noise from their covariance (Hewitt 2021, "Initializing new
  word embeddings for pretrained language models"; ``resize_token_embeddings(...,
  mean_resizing=True)`` in transformers), and the new output biases at the mean old
  bias, so a new token's initial log-probability is about the average one, not an
  outlier that would dominate the softmax.
- **Pruning** (the vocabulary pruner of TextPruner, Yang et al. 2022, ACL demo,
  §2.2): keep the special tokens and the tokens a corpus uses, slice the rows of
  the embedding, the tied MLM decoder and its bias, and renumber the vocabulary
  in the old order. Implemented here (a row selection) because TextPruner's
  package fails to install on Python 3.11 without ``--no-deps``. Stage ``prune_vocab``
  applies it with checks (:mod:`tasks.multilingual.prune`).
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import BertForMaskedLM

# The tensors of a BertForMaskedLM with one row per vocabulary entry (the decoder is tied to the embedding).
TOKEN_ROWS = ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias", "cls.predictions.decoder.weight",
              "cls.predictions.decoder.bias")


def resize_embeddings(model: BertForMaskedLM, vocab_size: int, seed: int) -> None:
    """Grow ``model``'s tied input/output embeddings to ``vocab_size`` rows in place
    (module docstring: mean initialisation); old rows are unchanged."""
    old = model.config.vocab_size
    mean_bias = float(model.cls.predictions.bias.detach().mean())
    torch.manual_seed(seed)
    model.resize_token_embeddings(vocab_size, mean_resizing=True)
    with torch.no_grad():
        model.cls.predictions.bias[old:] = mean_bias


def prune_masked_lm(model: BertForMaskedLM, keep: np.ndarray) -> BertForMaskedLM:
    """A copy of ``model`` whose vocabulary is the ids ``keep`` (ascending), renumbered 0..K-1.

    Its logits equal ``model``'s logits at the ``keep`` columns for any input
    written with kept ids (mapped to their new numbers).

    Args:
        keep: ``int [K]`` ascending old ids to keep.
    Raises:
        ValueError: ``keep`` is not strictly ascending or out of range.
    """
    keep = np.asarray(keep, dtype=np.int64)
    vocab_size = model.config.vocab_size
    if keep.size == 0 or (np.diff(keep) <= 0).any() or keep[0] < 0 or keep[-1] >= vocab_size:
        raise ValueError(f"keep must be strictly ascending ids in [0, {vocab_size})")
    index = torch.from_numpy(keep)
    state = {name: tensor.index_select(0, index) if name in TOKEN_ROWS else tensor
             for name, tensor in model.state_dict().items()}
    config = model.config.__class__.from_dict({**model.config.to_dict(), "vocab_size": int(keep.size)})
    pruned = BertForMaskedLM(config)
    pruned.load_state_dict(state)
    pruned.tie_weights()
    return pruned.eval()


def parameter_count(model: torch.nn.Module) -> int:
    """Distinct parameters (tied tensors counted once)."""
    return sum(p.numel() for p in model.parameters())
