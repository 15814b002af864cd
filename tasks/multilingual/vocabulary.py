"""Vocabulary adaptation for new languages: coverage and extension (the model side, embedding
resize and vocabulary pruning, is :mod:`tasks.multilingual.embeddings`).

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
"""

from __future__ import annotations

import numpy as np
from transformers import BertTokenizerFast, PreTrainedTokenizerBase

from tasks.core.stage import stage_task
from tasks.corpus.wordpiece import train_wordpiece, word_counts


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


def used_token_ids(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> np.ndarray:
    """Ascending ids that tokenizing ``texts`` produces, plus every special token's id."""
    # split_special_tokens: a literal "[MASK]" in the text counts its pieces "[", "mask", "]", as the
    # text is tokenized everywhere else (tasks.corpus.tokenize); unchanged for text without such strings.
    ids = tokenizer(texts, add_special_tokens=False, split_special_tokens=True,
                    return_attention_mask=False)["input_ids"]
    used = {i for row in ids for i in row} | set(tokenizer.all_special_ids)
    return np.array(sorted(used), dtype=np.int64)
