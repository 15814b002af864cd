"""Stage ``continue_pretrain@<mixture>``: continue MLM pretraining of ``multilingual.base_model`` on a resampled
mixture with the extended vocabulary; MLM accuracy and perplexity per language on held-out text, before and after."""

import sys
from functools import partial

import pyarrow.parquet as pq
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.model_dir import save_model_folder
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.multilingual import ContinuePretrainMetrics
from tasks.core.params import load_params
from tasks.multilingual.continue_pretrain import (continue_checkpoint, evaluate_heldout, mixture_examples, pack_table,
                                                  resized_base_model, trainee_for)
from tasks.multilingual.multilingual import read_documents
from tasks.pretraining.checkpoint import clear_checkpoint
from tasks.pretraining.modeling import prepare_model
from tasks.pretraining.pretrain import train, write_log
from tasks.training.distributed import join_process_group, run_training_stage


@flow(name="continue_pretrain")
def continue_pretrain(mixture: str) -> None:
    params, logger = load_params(), get_run_logger()
    spec, data_cfg, seed = params.multilingual, params.pretraining_data, params.seed
    cfg = params.pretrain.model_copy(update=spec.pretrain.model_dump(exclude={"fast_mlm"}))
    checkpoint, fingerprint = continue_checkpoint(params, mixture, cfg)  # a ParamsError for an unknown mixture
    tokenizer = AutoTokenizer.from_pretrained(paths.MULTILINGUAL_TOKENIZER)
    model, old_vocab = resized_base_model(paths.MODELS / spec.base_model, len(tokenizer), seed)
    ranks, device = join_process_group(params.pretrain.device, "pretrain.device")  # a DDP rank under torchrun
    heldout = pack_table(tokenizer, read_documents(paths.MULTILINGUAL, "heldout"), data_cfg.max_seq_length)
    evaluate = partial(evaluate_heldout, model=model, sequences=heldout, data_cfg=data_cfg, seed=seed,
                       mask_token_id=tokenizer.mask_token_id, device=device)
    before = evaluate("before")
    data, langs = mixture_examples(tokenizer, pq.read_table(paths.MIXTURES / f"{mixture}.parquet"), mixture,
                                   data_cfg, seed)
    logger.info(f"{mixture}: {len(data)} sequences, vocabulary {old_vocab} -> {len(tokenizer)}, device {device}")
    trainee, vocabularies = trainee_for(model, data, len(langs), spec.pretrain.fast_mlm)
    summary = train(prepare_model(trainee, cfg, device), data, cfg, seed=seed, device=device, checkpoint=checkpoint,
                    fingerprint=fingerprint, log=logger.info, ranks=ranks)
    if not ranks.is_main:  # rank 0 evaluates and writes the outputs
        return
    heldout_scores = {"before": before, "after": evaluate("after", before=before)}
    with atomic_outputs(paths.CONTINUED / mixture, paths.stage_metrics("continue_pretrain", mixture),
                        paths.stage_metrics("continue_pretrain", mixture, ".csv")) as (out, metrics, log_csv):
        save_model_folder(model, tokenizer, out)
        write_log(log_csv, summary.pop("rows"))
        write_metrics(metrics, ContinuePretrainMetrics(
            **summary, mixture=mixture, base_model=spec.base_model, vocab_size_before=old_vocab,
            vocab_size=len(tokenizer), sequences=len(data), heldout=heldout_scores,
            **({"fast_mlm_vocab": dict(zip(langs, map(len, vocabularies)))} if vocabularies else {})))
    clear_checkpoint(checkpoint)


if __name__ == "__main__":
    run_training_stage(continue_pretrain, *sys.argv[1:], device="pretrain.device")
