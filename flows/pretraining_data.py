"""Stage ``pretraining_data@<objective>``: pack the tokenized corpus into sequences and
mask them with the objective's scheme (static masking, ``dupe_factor`` copies)."""

import sys

import numpy as np
import pyarrow.parquet as pq
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks import paths
from tasks.io import atomic_outputs, write_json
from tasks.masking import MaskingConfig
from tasks.params import load_params
from tasks.pretraining_data import pack_documents, write_masked_shards
from tasks.stage import run_stage, stage_task
from tasks.tokenization import random_token_ids


@stage_task
def pack(max_seq_length: int, cls_id: int, sep_id: int):
    table = pq.read_table(paths.TOKENS)
    ids = [np.asarray(x, dtype=np.int32) for x in table.column("input_ids").to_pylist()]
    words = [np.asarray(x, dtype=np.int32) for x in table.column("word_ids").to_pylist()]
    return pack_documents(table.column("doc_id").to_pylist(), ids, words, max_seq_length, cls_id, sep_id)


@flow(name="pretraining-data")
def pretraining_data(objective: str) -> None:
    params = load_params()
    spec, cfg = params.objective(objective), params.pretraining_data
    masking = MaskingConfig(scheme=spec.masking, masked_lm_prob=cfg.masked_lm_prob,
                            max_predictions=cfg.max_predictions_per_seq, mask=cfg.replacement.mask,
                            random=cfg.replacement.random)
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    packed = pack(cfg.max_seq_length, tokenizer.cls_token_id, tokenizer.sep_token_id)
    with atomic_outputs(paths.PRETRAINING / objective,
                        paths.stage_metrics("pretraining_data", objective)) as (out, metrics):
        stats = stage_task(write_masked_shards)(
            packed, masking, out, objective=objective, seed=params.seed, dupe_factor=cfg.dupe_factor,
            shard_size=cfg.shard_size, mask_token_id=tokenizer.mask_token_id,
            random_token_ids=random_token_ids(tokenizer), workers=cfg.workers)
        get_run_logger().info(f"{objective}: {stats}")
        write_json(metrics, stats)


if __name__ == "__main__":
    run_stage(pretraining_data, *sys.argv[1:])
