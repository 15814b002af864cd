"""Stage ``pretrain@<objective>``: pretrain a BERT encoder from scratch on the objective's
data (static or dynamic masking; MLM or PerLM head, plus NSP/SOP); resumable; saves a
Hugging Face model + tokenizer to ``models/<objective>`` and the other heads beside it."""

import sys

import pyarrow.parquet as pq
import torch
from prefect import flow, get_run_logger
from safetensors.torch import save_file
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.params import load_params
from tasks.core.stage import run_stage, stage_task
from tasks.corpus.similar_words import similar_words_from_table
from tasks.corpus.tokenize import random_token_ids
from tasks.pretraining.modeling import PretrainingModel, bert_config, new_masked_lm
from tasks.pretraining.pretrain import DynamicMasker, PretrainingExamples, checkpoint_fingerprint, train, write_log
from tasks.pretraining.pretraining_data import masking_config, read_shards
from tasks.training.device import resolve_device

HEADS_FILE = "pretraining_heads.safetensors"  # PerLM / NSP / SOP heads, not part of the Hugging Face model


@flow(name="pretrain")
def pretrain(objective: str) -> None:
    params = load_params()
    spec = params.objective(objective)
    masking = masking_config(spec, params.pretraining_data)
    logger = get_run_logger()
    data_dir = paths.PRETRAINING / objective
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    masker = None
    if spec.dynamic:
        similar = similar_words_from_table(pq.read_table(paths.LEXICON)) if masking.similar else None
        masker = DynamicMasker(masking, params.seed, objective, tokenizer.mask_token_id,
                               random_token_ids(tokenizer), similar)
    data = PretrainingExamples.from_table(read_shards(data_dir), masker)
    config = bert_config(params.model, len(tokenizer), params.pretraining_data.max_seq_length,
                         tokenizer.pad_token_id)
    model = PretrainingModel(new_masked_lm(config, params.seed, params.model.sinusoidal_position_amplitude),
                             predicts_positions=masking.predicts_positions,
                             sentence_task=spec.sentence_task is not None)
    device = resolve_device(params.pretrain.device)
    # A checkpoint is reused only by a run with the same params and inputs: the masking
    # params (pretraining_data) act at batch time under dynamic masking.
    fingerprint = checkpoint_fingerprint(
        "pretrain", objective, params.model, params.pretrain, spec, params.pretraining_data, params.seed,
        data=[data_dir, paths.TOKENIZER] + ([paths.LEXICON] if spec.dynamic and masking.similar else []))
    checkpoint = paths.CHECKPOINTS / "pretrain" / objective / "last.pt"
    n_params = sum(p.numel() for p in model.mlm.parameters())
    logger.info(f"{objective}: {len(data)} examples ({'dynamic' if spec.dynamic else 'static'} masking), "
                f"{n_params:,} encoder+MLM parameters, device {device}, {torch.get_num_threads()} threads")
    summary = stage_task(train)(model, data, params.pretrain, seed=params.seed, device=device,
                                checkpoint=checkpoint, fingerprint=fingerprint, log=logger.info)
    rows = summary.pop("rows")
    summary.update(objective=objective, parameters=n_params, device=str(device), threads=torch.get_num_threads(),
                   dynamic=spec.dynamic, sentence_task=spec.sentence_task,
                   token_target="position" if masking.predicts_positions else "token")
    with atomic_outputs(paths.MODELS / objective, paths.stage_metrics("pretrain", objective),
                        paths.stage_metrics("pretrain", objective, ".csv")) as (out, metrics, log_csv):
        model.mlm.save_pretrained(out)
        tokenizer.save_pretrained(out)
        if heads := model.extra_heads():
            save_file({k: v.contiguous() for k, v in heads.items()}, out / HEADS_FILE)
        write_json(metrics, summary)
        write_log(log_csv, rows)
    checkpoint.unlink(missing_ok=True)


if __name__ == "__main__":
    run_stage(pretrain, *sys.argv[1:])
