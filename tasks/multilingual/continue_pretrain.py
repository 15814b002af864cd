"""Continued MLM pretraining on a multilingual mixture, and per-language MLM evaluation.

Documents are tokenized with the extended tokenizer and packed into sequences
of one language each (consecutive documents of a language share a sequence, as
XLM-R's text streams do; a long document is cut), then trained with dynamic
BERT masking (token-level MLM, 80/10/10; :class:`tasks.pretraining.pretrain.DynamicMasker`)
by the project's pretraining loop (:func:`tasks.pretraining.pretrain.train`).

Evaluation masks 15% of the tokens of every held-out sequence (at most
``max_predictions`` per sequence), all as [MASK], with a generator seeded by the
language alone, so every model sees exactly the same masked positions; it
reports accuracy and perplexity exp(mean cross-entropy) over those positions.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM, PreTrainedTokenizerBase

from tasks.core.rng import named_rng
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.pretraining_data import pack_documents
from tasks.training.batching import pad_batch


def pack_by_language(tokenizer: PreTrainedTokenizerBase, langs: list[str], texts: list[str],
                     max_seq_length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per language, its documents packed into ``[CLS] ... [SEP]`` sequences.

    Returns:
        ``{lang: (ids, offsets)}``: the sequences of ``lang`` in flat layout
        (:mod:`tasks.training.batching`), documents in the order given; languages in order of
        first appearance.
    """
    ids = tokenizer(texts, add_special_tokens=False, return_attention_mask=False)["input_ids"]
    by_lang: dict[str, list[int]] = {}
    for i, lang in enumerate(langs):
        by_lang.setdefault(lang, []).append(i)
    out = {}
    for lang, rows in by_lang.items():
        docs = [np.asarray(ids[i], dtype=np.int32) for i in rows if ids[i]]
        packed = pack_documents([lang] * len(docs), docs, [np.arange(len(d), dtype=np.int32) for d in docs],
                                max_seq_length, tokenizer.cls_token_id, tokenizer.sep_token_id)
        valid = np.arange(packed.input_ids.shape[1])[None, :] < packed.lengths[:, None]
        out[lang] = (packed.input_ids[valid], np.concatenate([[0], np.cumsum(packed.lengths)]).astype(np.int64))
    return out


def word_ids_for(ids: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Flat word ids for token-level MLM: each token its own word, -1 on [CLS] and [SEP]."""
    word = np.arange(len(ids), dtype=np.int32)
    word[offsets[:-1]] = -1
    word[offsets[1:] - 1] = -1
    return word


@torch.no_grad()
def evaluate_mlm(model: BertForMaskedLM, ids: np.ndarray, offsets: np.ndarray, *, lang: str, seed: int,
                 mask_token_id: int, masked_lm_prob: float, max_predictions: int, device: torch.device,
                 batch_size: int = 32) -> dict:
    """MLM accuracy and perplexity on held-out sequences (module docstring).

    Args:
        ids, offsets: the sequences in flat layout (:func:`pack_by_language`).
        lang: seeds the masks together with ``seed``.
    Returns:
        ``{"predictions", "loss", "accuracy", "perplexity"}`` (loss in nats per masked token).
    """
    config = MaskingConfig(scheme="mlm", masked_lm_prob=masked_lm_prob, max_predictions=max_predictions,
                           mask=1.0, random=0.0)
    rng = named_rng(seed, lang)
    words = word_ids_for(ids, offsets)
    model.to(device).eval()
    loss_sum, correct, count = 0.0, 0, 0
    for start in range(0, len(offsets) - 1, batch_size):
        index = np.arange(start, min(start + batch_size, len(offsets) - 1))
        batch_ids, valid = pad_batch(ids, offsets, index)
        batch_words, _ = pad_batch(words, offsets, index, pad_value=-1)
        masked = mask_batch(batch_ids, batch_words, config, rng, mask_token_id=mask_token_id,
                            random_token_ids=np.array([mask_token_id]))
        rows, cols = np.nonzero(masked.chosen)
        if not len(rows):
            continue
        hidden = model.bert(input_ids=torch.from_numpy(masked.input_ids.astype(np.int64)).to(device),
                            attention_mask=torch.from_numpy(valid.astype(np.int64)).to(device)).last_hidden_state
        logits = model.cls(hidden[torch.from_numpy(rows).to(device), torch.from_numpy(cols).to(device)]).float()
        labels = torch.from_numpy(masked.labels[rows, cols].astype(np.int64)).to(device)
        loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
        correct += int((logits.argmax(-1) == labels).sum())
        count += len(rows)
    if not count:
        return {"predictions": 0, "loss": None, "accuracy": None, "perplexity": None}
    return {"predictions": count, "loss": loss_sum / count, "accuracy": correct / count,
            "perplexity": math.exp(loss_sum / count)}
