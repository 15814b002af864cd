"""Continued MLM pretraining on a multilingual mixture, and per-language MLM evaluation.

Documents are tokenized with the extended tokenizer and packed into sequences
of one language each (consecutive documents of a language share a sequence, as
XLM-R's text streams do; a long document is cut), then trained with dynamic
BERT masking (token-level MLM, 80/10/10; :class:`tasks.pretraining.examples.DynamicMasker`)
by the project's pretraining loop (:func:`tasks.pretraining.pretrain.train`), with the full
softmax or CINO's fast MLM (:mod:`tasks.multilingual.fast_mlm`: each language's masked
tokens predicted over that language's vocabulary only).

Evaluation is the held-out MLM measure of :mod:`tasks.pretraining.heldout` on each language's
held-out documents; :func:`evaluate_heldout` (a Prefect task) evaluates every held-out language;
:func:`resized_base_model`, :func:`mixture_examples` and :func:`continue_checkpoint` give
stage ``continue_pretrain`` its model, training data and checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import pyarrow as pa
from prefect import get_run_logger
from transformers import BertForMaskedLM, PreTrainedTokenizerBase

from tasks.core import paths
from tasks.core.stage import stage_task
from tasks.corpus.tokenize import random_token_ids
from tasks.multilingual.fast_mlm import FastMLM, GroupedExamples, language_vocabularies
from tasks.multilingual.embeddings import resize_embeddings
from tasks.pretraining.masking import MaskingConfig
from tasks.pretraining.checkpoint import checkpoint_fingerprint, world_size
from tasks.pretraining.examples import DynamicMasker
from tasks.pretraining.heldout import evaluate_mlm, pack_by_language, word_ids_for
from tasks.pretraining.modeling import PretrainingModel


def concat_sequences(seqs: dict[str, tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """The sequences of every language of :func:`pack_by_language`, one after the other, in flat layout."""
    ids = np.concatenate([ids for ids, _ in seqs.values()])
    offsets = np.concatenate([[0], np.cumsum(np.concatenate([np.diff(off) for _, off in seqs.values()]))])
    return ids, offsets


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


def trainee_for(model: BertForMaskedLM, data: GroupedExamples, languages: int,
                fast_mlm: bool) -> tuple[PretrainingModel, list[np.ndarray] | None]:
    """What trains ``model`` on a mixture: its MLM (:class:`tasks.pretraining.modeling.PretrainingModel`),
    or with ``fast_mlm`` CINO's fast MLM over each language's vocabulary
    (:class:`tasks.multilingual.fast_mlm.FastMLM`; the vocabularies returned too, else None)."""
    vocabularies = language_vocabularies(data, languages) if fast_mlm else None
    return (FastMLM(model, vocabularies) if vocabularies else PretrainingModel(model)), vocabularies


def continue_checkpoint(params, mixture: str, cfg) -> tuple[Path, str]:
    """The rolling checkpoint file of ``continue_pretrain@<mixture>`` and its fingerprint: a
    checkpoint is reused only by a run with the same training knobs (``cfg``: ``pretrain`` with
    ``multilingual.pretrain``'s overrides), masking knobs and inputs.

    Raises:
        ParamsError: no mixture is called ``mixture`` (checked first: a stage fails before any work).
    """
    spec, data = params.multilingual, params.pretraining_data
    spec.mixture(mixture)
    fingerprint = checkpoint_fingerprint(
        "continue_pretrain", mixture, cfg.model_dump(exclude={"init_from", "seeds", "snapshots"}), spec.pretrain.fast_mlm,
        spec.base_model,
        params.seed, world_size(params.distributed),
        [data.max_seq_length, data.masked_lm_prob, data.max_predictions_per_seq],
        data=[paths.MIXTURES / f"{mixture}.parquet", paths.MODELS / spec.base_model, paths.MULTILINGUAL_TOKENIZER])
    return paths.CHECKPOINTS / "continue_pretrain" / mixture / "last.pt", fingerprint
