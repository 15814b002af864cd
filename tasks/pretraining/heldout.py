"""The held-out measures: how well a masked LM predicts masked tokens of text it never saw, and
(ELECTRA) how well a discriminator tells its generator's samples there from the original tokens.

15% of the tokens of every held-out sequence (at most ``max_predictions`` per sequence) are
masked, all as [MASK], with a generator seeded by the run's seed and a name alone, so every
model sees exactly the same masked positions. The MLM measure is the accuracy and the mean
cross-entropy (and perplexity, its exponential) over those positions; the RTD measure fills them
with the generator's samples (drawn with a seeded generator too) and takes the discriminator's
binary cross-entropy and accuracy over every token (Clark et al. 2020, §2). The multilingual stages
measure each language's held-out documents with the MLM measure
(:mod:`tasks.multilingual.continue_pretrain`); the score-for-compute curves measure every
pretrained model and its snapshots (:func:`heldout_text`, stage ``curves``), the cheap measure
beside fine-tuning.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.rng import named_rng
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.modeling import replace_tokens
from tasks.pretraining.packing import pack_documents
from tasks.training.batching import pad_batch


def pack_by_language(tokenizer: PreTrainedTokenizerBase, langs: list[str], texts: list[str],
                     max_seq_length: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per language, its documents packed into ``[CLS] ... [SEP]`` sequences.

    Returns:
        ``{lang: (ids, offsets)}``: the sequences of ``lang`` in flat layout
        (:mod:`tasks.training.batching`), documents in the order given; languages in order of
        first appearance.
    """
    # split_special_tokens: a literal "[MASK]" in a document is word-pieced, never the mask id (as in
    # tasks.corpus.tokenize); documents without such strings (all packaged text) get the same ids.
    ids = tokenizer(texts, add_special_tokens=False, split_special_tokens=True,
                    return_attention_mask=False)["input_ids"]
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


def _masked_batches(ids: np.ndarray, offsets: np.ndarray, lang: str, seed: int, mask_token_id: int,
                    masked_lm_prob: float, max_predictions: int, batch_size: int, device: torch.device):
    """The held-out sequences in batches, masked the same way for every model: ``(input_ids,
    attention_mask, rows, cols, labels)`` tensors on ``device``, batches without a masked token left out."""
    config = MaskingConfig(scheme="mlm", masked_lm_prob=masked_lm_prob, max_predictions=max_predictions,
                           mask=1.0, random=0.0)
    rng = named_rng(seed, lang)
    words = word_ids_for(ids, offsets)
    for start in range(0, len(offsets) - 1, batch_size):
        index = np.arange(start, min(start + batch_size, len(offsets) - 1))
        batch_ids, valid = pad_batch(ids, offsets, index)
        batch_words, _ = pad_batch(words, offsets, index, pad_value=-1)
        masked = mask_batch(batch_ids, batch_words, config, rng, mask_token_id=mask_token_id,
                            random_token_ids=np.array([mask_token_id]))
        rows, cols = np.nonzero(masked.chosen)
        if len(rows):
            yield tuple(torch.from_numpy(np.asarray(x).astype(np.int64)).to(device)
                        for x in (masked.input_ids, valid, rows, cols, masked.labels[rows, cols]))


@torch.no_grad()
def evaluate_mlm(model: PreTrainedModel, ids: np.ndarray, offsets: np.ndarray, *, lang: str, seed: int,
                 mask_token_id: int, masked_lm_prob: float, max_predictions: int, device: torch.device,
                 batch_size: int = 32) -> dict:
    """MLM accuracy and perplexity on held-out sequences (module docstring).

    Args:
        model: a masked LM (its ``bert`` encoder and ``cls`` head are used).
        ids, offsets: the sequences in flat layout (:func:`pack_by_language`).
        lang: seeds the masks together with ``seed``: the same positions for every model.
    Returns:
        ``{"predictions", "loss", "accuracy", "perplexity"}`` (loss in nats per masked token; None
        without a prediction).
    """
    model.to(device).eval()
    loss_sum, correct, count = 0.0, 0, 0
    for input_ids, valid, rows, cols, labels in _masked_batches(ids, offsets, lang, seed, mask_token_id,
                                                                masked_lm_prob, max_predictions, batch_size, device):
        hidden = model.bert(input_ids=input_ids, attention_mask=valid).last_hidden_state
        logits = model.cls(hidden[rows, cols]).float()
        loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
        correct += int((logits.argmax(-1) == labels).sum())
        count += len(rows)
    if not count:
        return {"predictions": 0, "loss": None, "accuracy": None, "perplexity": None}
    return {"predictions": count, "loss": loss_sum / count, "accuracy": correct / count,
            "perplexity": math.exp(loss_sum / count)}


@torch.no_grad()
def evaluate_rtd(discriminator: PreTrainedModel, generator: PreTrainedModel, ids: np.ndarray, offsets: np.ndarray,
                 *, lang: str, seed: int, mask_token_id: int, masked_lm_prob: float, max_predictions: int,
                 device: torch.device, batch_size: int = 32) -> dict:
    """ELECTRA's held-out measure (module docstring): the masks of :func:`evaluate_mlm`, filled with
    ``generator``'s samples (an ``ElectraForMaskedLM``; drawn from a generator seeded by ``seed``),
    scored by ``discriminator`` (an ``ElectraForPreTraining``) on every token.

    Returns:
        ``{"tokens", "rtd_loss", "rtd_accuracy"}`` (binary cross-entropy in nats per token; None
        without a masked token).
    """
    discriminator.to(device).eval()
    generator.to(device).eval()
    draws = torch.Generator(device=device).manual_seed(seed)
    loss_sum, correct, count = 0.0, 0, 0
    for input_ids, valid, rows, cols, labels in _masked_batches(ids, offsets, lang, seed, mask_token_id,
                                                                masked_lm_prob, max_predictions, batch_size, device):
        hidden = generator.electra(input_ids=input_ids, attention_mask=valid).last_hidden_state
        logits = generator.generator_lm_head(generator.generator_predictions(hidden[rows, cols])).float()
        sampled = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=draws).squeeze(1)
        corrupted, replaced = replace_tokens(input_ids, rows, cols, sampled, labels)
        scores = discriminator(input_ids=corrupted, attention_mask=valid).logits[valid.bool()].float()
        target = replaced[valid.bool()].float()
        loss_sum += float(F.binary_cross_entropy_with_logits(scores, target, reduction="sum"))
        correct += int(((scores > 0) == target.bool()).sum())
        count += len(target)
    if not count:
        return {"tokens": 0, "rtd_loss": None, "rtd_accuracy": None}
    return {"tokens": count, "rtd_loss": loss_sum / count, "rtd_accuracy": correct / count}


def heldout_text(task: str, tokenizer: PreTrainedTokenizerBase, max_seq_length: int,
                 sequences: int) -> tuple[np.ndarray, np.ndarray]:
    """The evaluation text of ``task`` (its dev and test text, which ingest kept out of the
    pretraining corpus: ``data/downstream/<task>/eval_texts.parquet``), packed into at most
    ``sequences`` sequences, in flat layout.

    Raises:
        SourceError: the task's data is missing (stage ``downstream@<task>`` makes it).
    """
    path = paths.DOWNSTREAM / task / paths.EVAL_TEXTS_FILE
    if not path.is_file():
        raise SourceError(f"{path} is missing: stage downstream@{task} makes it")
    texts = pq.read_table(path).column("text").to_pylist()
    ids, offsets = pack_by_language(tokenizer, [task] * len(texts), texts, max_seq_length)[task]
    n = min(sequences, len(offsets) - 1)
    return ids[:offsets[n]], offsets[:n + 1]
