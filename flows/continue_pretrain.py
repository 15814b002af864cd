"""Stage ``continue_pretrain@<mixture>``: continue MLM pretraining of ``multilingual.base_model``
on a resampled mixture with the extended vocabulary, and evaluate MLM accuracy and perplexity
per language on held-out text, before (base model, embeddings resized) and after."""

import sys

import numpy as np
import pyarrow.parquet as pq
import torch
from prefect import flow, get_run_logger
from transformers import AutoTokenizer, BertForMaskedLM

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.params import load_params
from tasks.core.stage import run_stage, stage_task
from tasks.corpus.tokenize import random_token_ids
from tasks.multilingual.continue_pretrain import evaluate_mlm, pack_by_language, word_ids_for
from tasks.multilingual.multilingual import read_documents
from tasks.multilingual.vocabulary import resize_embeddings
from tasks.pretraining.masking import MaskingConfig
from tasks.pretraining.modeling import PretrainingModel
from tasks.pretraining.pretrain import DynamicMasker, PretrainingExamples, checkpoint_fingerprint, train, write_log
from tasks.training.device import resolve_device


@flow(name="continue_pretrain")
def continue_pretrain(mixture: str) -> None:
    params = load_params()
    spec = params.multilingual
    spec.mixture(mixture)  # a ParamsError for an unknown name, before any work
    logger = get_run_logger()
    data_cfg = params.pretraining_data
    tokenizer = AutoTokenizer.from_pretrained(paths.MULTILINGUAL_TOKENIZER)
    model = BertForMaskedLM.from_pretrained(paths.MODELS / spec.base_model)
    old_vocab = model.config.vocab_size
    resize_embeddings(model, len(tokenizer), params.seed)
    device = resolve_device(params.pretrain.device)

    heldout = read_documents(paths.MULTILINGUAL, "heldout")
    heldout_seqs = pack_by_language(tokenizer, heldout.column("lang").to_pylist(), heldout.column("text").to_pylist(),
                                    data_cfg.max_seq_length)

    def evaluate(m: BertForMaskedLM) -> dict:
        return {lang: evaluate_mlm(m, ids, offsets, lang=lang, seed=params.seed, mask_token_id=tokenizer.mask_token_id,
                                   masked_lm_prob=data_cfg.masked_lm_prob, max_predictions=data_cfg.max_predictions_per_seq,
                                   device=device)
                for lang, (ids, offsets) in heldout_seqs.items()}

    before = stage_task(evaluate, name="evaluate-before")(model)

    mix = pq.read_table(paths.MIXTURES / f"{mixture}.parquet")
    seqs = pack_by_language(tokenizer, mix.column("lang").to_pylist(), mix.column("text").to_pylist(),
                            data_cfg.max_seq_length)
    ids = np.concatenate([ids for ids, _ in seqs.values()])
    offsets = np.concatenate([[0], np.cumsum(np.concatenate([np.diff(off) for _, off in seqs.values()]))])
    masking = MaskingConfig(scheme="mlm", masked_lm_prob=data_cfg.masked_lm_prob,
                            max_predictions=data_cfg.max_predictions_per_seq)
    masker = DynamicMasker(masking, params.seed, f"continue-{mixture}", tokenizer.mask_token_id,
                           random_token_ids(tokenizer))
    data = PretrainingExamples(ids, offsets, word_ids=word_ids_for(ids, offsets), masker=masker)
    cfg = params.pretrain.model_copy(update=spec.pretrain.model_dump())
    # A checkpoint is reused only by a run with the same params and inputs (masking params included).
    fingerprint = checkpoint_fingerprint(
        "continue_pretrain", mixture, params.pretrain, spec.pretrain, params.pretraining_data, spec.base_model,
        params.seed, data=[paths.MIXTURES / f"{mixture}.parquet", paths.MODELS / spec.base_model,
                           paths.MULTILINGUAL_TOKENIZER])
    checkpoint = paths.CHECKPOINTS / "continue_pretrain" / mixture / "last.pt"
    logger.info(f"{mixture}: {len(data)} sequences, vocabulary {old_vocab} -> {len(tokenizer)}, device {device}")
    summary = stage_task(train)(PretrainingModel(model), data, cfg, seed=params.seed, device=device,
                                checkpoint=checkpoint, fingerprint=fingerprint, log=logger.info)
    rows = summary.pop("rows")
    after = stage_task(evaluate, name="evaluate-after")(model)
    for lang in after:
        logger.info(f"{lang}: held-out MLM accuracy {before[lang]['accuracy']} -> {after[lang]['accuracy']}, "
                    f"perplexity {before[lang]['perplexity']} -> {after[lang]['perplexity']}")
    summary.update(mixture=mixture, base_model=spec.base_model, vocab_size_before=old_vocab,
                   vocab_size=len(tokenizer), sequences=len(data), threads=torch.get_num_threads(),
                   heldout={"before": before, "after": after})
    with atomic_outputs(paths.CONTINUED / mixture, paths.stage_metrics("continue_pretrain", mixture),
                        paths.stage_metrics("continue_pretrain", mixture, ".csv")) as (out, metrics, log_csv):
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        write_json(metrics, summary)
        write_log(log_csv, rows)
    checkpoint.unlink(missing_ok=True)


if __name__ == "__main__":
    run_stage(continue_pretrain, *sys.argv[1:])
