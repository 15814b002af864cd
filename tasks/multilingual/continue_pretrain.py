"""Continued MLM pretraining on a multilingual mixture, and per-language MLM evaluation.

Documents are tokenized with the extended tokenizer and packed into sequences
of one language each (consecutive documents of a language share a sequence, as
XLM-R's text streams do; a long document is cut), then trained with dynamic
BERT masking (token-level MLM, 80/10/10; :class:`tasks.pretraining.examples.DynamicMasker`)
by the project's pretraining loop (:func:`tasks.pretraining.pretrain.train`), with the full
softmax or CINO's fast MLM (:mod:`tasks.multilingual.fast_mlm`: each language's masked
tokens predicted over that language's vocabulary only).

Evaluation masks 15% of the tokens of every held-out sequence (at most
``max_predictions`` per sequence), all as [MASK], with a generator seeded by the
language alone, so every model sees exactly the same masked positions; it
reports accuracy and perplexity exp(mean cross-entropy) over those positions.
:func:`evaluate_heldout` (a Prefect task) evaluates every held-out language;
:func:`resized_base_model`, :func:`mixture_examples` and :func:`continue_checkpoint` give
stage ``continue_pretrain`` its model, training data and checkpoint.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import pyarrow as pa
import torch.nn.functional as F
from prefect import get_run_logger
from transformers import BertForMaskedLM, PreTrainedTokenizerBase

from tasks.core import paths
from tasks.core.rng import named_rng
from tasks.core.stage import stage_task
from tasks.corpus.tokenize import random_token_ids
from tasks.multilingual.fast_mlm import GroupedExamples
from tasks.multilingual.embeddings import resize_embeddings
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.checkpoint import checkpoint_fingerprint, world_size
from tasks.pretraining.examples import DynamicMasker
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


def concat_sequences(seqs: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The sequences of every language of :func:`pack_by_language`, one after the other, in flat layout."""
    ids = np.concatenate([ids for ids, _ in seqs.values()])
    offsets = np.concatenate([[0], np.cumsum(np.concatenate([np.diff(off) for _, off in seqs.values()]))])
    return ids, offsets


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


@stage_task(task_run_name="evaluate-{when}")
def evaluate_heldout(when: str, model: BertForMaskedLM, sequences: dict[str, tuple[np.ndarray, np.ndarray]],
                     data_cfg, *, seed: int, mask_token_id: int, device: torch.device,
                     before: dict | None = None) -> dict:
    """:func:`evaluate_mlm` of ``model`` on each language's held-out ``sequences`` (``when``
    names the run: ``before``, ``after``); given the scores ``before``, logs the change."""
    scores = {lang: evaluate_mlm(model, ids, offsets, lang=lang, seed=seed, mask_token_id=mask_token_id,
                                 masked_lm_prob=data_cfg.masked_lm_prob,
                                 max_predictions=data_cfg.max_predictions_per_seq, device=device)
              for lang, (ids, offsets) in sequences.items()}
    for lang in scores if before is not None else ():
        get_run_logger().info(f"{lang}: held-out MLM accuracy {before[lang]['accuracy']} -> "
                              f"{scores[lang]['accuracy']}, perplexity {before[lang]['perplexity']} -> "
                              f"{scores[lang]['perplexity']}")
    return scores


def pack_table(tokenizer: PreTrainedTokenizerBase, docs: pa.Table, max_seq_length: int) -> dict:
    """:func:`pack_by_language` of a table of documents (columns ``lang``, ``text``)."""
    return pack_by_language(tokenizer, docs.column("lang").to_pylist(), docs.column("text").to_pylist(),
                            max_seq_length)


def mixture_examples(tokenizer: PreTrainedTokenizerBase, mix: pa.Table, mixture: str, data_cfg,
                     seed: int) -> tuple[GroupedExamples, list[str]]:
    """The documents of a resampled mixture packed by language, with dynamic token-level MLM
    masking (named ``continue-<mixture>``), and the languages: ``groups`` indexes them."""
    by_lang = pack_table(tokenizer, mix, data_cfg.max_seq_length)
    ids, offsets = concat_sequences(by_lang)
    groups = np.repeat(np.arange(len(by_lang)), [len(off) - 1 for _, off in by_lang.values()])
    masking = MaskingConfig(scheme="mlm", masked_lm_prob=data_cfg.masked_lm_prob,
                            max_predictions=data_cfg.max_predictions_per_seq)
    masker = DynamicMasker(masking, seed, f"continue-{mixture}", tokenizer.mask_token_id, random_token_ids(tokenizer))
    return GroupedExamples(ids, offsets, word_ids=word_ids_for(ids, offsets), masker=masker, groups=groups), list(by_lang)


def resized_base_model(model_dir, vocab_size: int, seed: int) -> tuple[BertForMaskedLM, int]:
    """The masked LM in ``model_dir`` with its embeddings resized to ``vocab_size``
    (:func:`tasks.multilingual.embeddings.resize_embeddings`), and its old vocabulary size."""
    model = BertForMaskedLM.from_pretrained(model_dir)
    old_vocab = model.config.vocab_size
    resize_embeddings(model, vocab_size, seed)
    return model, old_vocab


def continue_checkpoint(params, mixture: str, cfg) -> tuple[Path, str]:
    """The rolling checkpoint file of ``continue_pretrain@<mixture>`` and its fingerprint: a
    checkpoint is reused only by a run with the same training knobs (``cfg``: ``pretrain`` with
    ``multilingual.pretrain``'s overrides), masking knobs and inputs."""
    spec, data = params.multilingual, params.pretraining_data
    fingerprint = checkpoint_fingerprint(
        "continue_pretrain", mixture, cfg.model_dump(exclude={"init_from"}), spec.pretrain.fast_mlm, spec.base_model,
        params.seed, world_size(params.distributed),
        [data.max_seq_length, data.masked_lm_prob, data.max_predictions_per_seq],
        data=[paths.MIXTURES / f"{mixture}.parquet", paths.MODELS / spec.base_model, paths.MULTILINGUAL_TOKENIZER])
    return paths.CHECKPOINTS / "continue_pretrain" / mixture / "last.pt", fingerprint
