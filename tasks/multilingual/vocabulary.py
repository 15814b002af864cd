"""Vocabulary adaptation for new languages: coverage, extension, embedding resize, pruning.

- **Coverage**: per language, the [UNK] rate and tokens per character of a tokenizer.
- **Extension** (as CINO extended XLM-R's vocabulary for Chinese minority languages,
  Yang et al. 2022, §3.1): a WordPiece vocabulary is trained on the text of the
  poorly covered languages (:func:`tasks.corpus.wordpiece.train_wordpiece`, the algorithm
  of Hugging Face ``tokenizers``' WordPiece trainer, made deterministic) and its
  tokens that the base vocabulary lacks are *appended*, so every old id keeps its
  meaning. The extended tokenizer keeps combining marks (``strip_accents=False``):
  BERT's lower-casing normaliser strips them, which deletes Tibetan vowel signs
  (``འགྲོ་བ་མིའི་ཁྱིམ``, 16 characters, becomes ``འག་བ་མའ་ཁམ``, 10) and decomposes
  Hangul syllables into jamo; no vocabulary could repair that.
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
from transformers import BertForMaskedLM, BertTokenizerFast, PreTrainedTokenizerBase

from tasks.core.stage import stage_task
from tasks.corpus.wordpiece import train_wordpiece, word_counts


# The tensors of a BertForMaskedLM with one row per vocabulary entry (the decoder is tied to the embedding).
TOKEN_ROWS = ("bert.embeddings.word_embeddings.weight", "cls.predictions.bias", "cls.predictions.decoder.weight",
              "cls.predictions.decoder.bias")


def multilingual_tokenizer(tokens: list[str]) -> BertTokenizerFast:
    """A BERT WordPiece tokenizer over ``tokens`` (id = position) that lower-cases but keeps
    combining marks (module docstring)."""
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True,
                             strip_accents=False, tokenize_chinese_chars=True)


def vocabulary(tokenizer: PreTrainedTokenizerBase) -> list[str]:
    """The tokens of ``tokenizer`` in id order (ids must be 0..V-1)."""
    vocab = tokenizer.get_vocab()
    tokens = [""] * len(vocab)
    for token, i in vocab.items():
        tokens[i] = token
    return tokens


def coverage(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> dict:
    """[UNK] rate (share of tokens that are [UNK]) and tokens per character of ``texts``.

    Returns:
        ``{"characters", "tokens", "unk_rate", "tokens_per_char"}``.
    """
    # split_special_tokens: a literal "[MASK]" in the text is word-pieced like other text, never the mask
    # id (as in tasks.corpus.tokenize); text without such strings (all packaged text) gets the same ids.
    ids = tokenizer(texts, add_special_tokens=False, split_special_tokens=True,
                    return_attention_mask=False)["input_ids"]
    flat = np.fromiter((i for row in ids for i in row), dtype=np.int64)
    chars = sum(map(len, texts))
    return {"characters": chars, "tokens": int(flat.size),
            "unk_rate": float((flat == tokenizer.unk_token_id).mean()) if flat.size else 0.0,
            "tokens_per_char": float(flat.size / chars) if chars else 0.0}


@stage_task
def extension_tokens(base: list[str], texts: list[str], vocab_size: int, min_frequency: int) -> list[str]:
    """WordPiece tokens learnt on ``texts`` that ``base`` lacks, in training order.

    Args:
        base: the base vocabulary (tokens in id order).
        texts: text of the languages to extend for.
        vocab_size: size of the WordPiece vocabulary trained on ``texts`` (its
            alphabet is always kept whole, so new characters are never [UNK]).
    """
    counts = word_counts(texts, lowercase=True, strip_accents=False)
    have = set(base)
    return [t for t in train_wordpiece(counts, vocab_size, min_frequency) if t not in have]


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


def used_token_ids(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> np.ndarray:
    """Ascending ids that tokenizing ``texts`` produces, plus every special token's id."""
    # split_special_tokens: a literal "[MASK]" in the text counts its pieces "[", "mask", "]", as the
    # text is tokenized everywhere else (tasks.corpus.tokenize); unchanged for text without such strings.
    ids = tokenizer(texts, add_special_tokens=False, split_special_tokens=True,
                    return_attention_mask=False)["input_ids"]
    used = {i for row in ids for i in row} | set(tokenizer.all_special_ids)
    return np.array(sorted(used), dtype=np.int64)


def parameter_count(model: torch.nn.Module) -> int:
    """Distinct parameters (tied tensors counted once)."""
    return sum(p.numel() for p in model.parameters())
