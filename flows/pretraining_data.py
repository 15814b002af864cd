"""Stage ``pretraining_data@<objective>``: pack the tokenized corpus into sequences, pair
segments for NSP/SOP, and mask them with the objective's scheme (static: ``dupe_factor``
masked copies; dynamic: the sequences, masked later at batch time)."""

import sys

import numpy as np
import pyarrow.parquet as pq
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.params import load_params
from tasks.core.rng import named_rng
from tasks.core.stage import run_stage, stage_task
from tasks.corpus.similar_words import lexicon_ids, similar_words_from_table
from tasks.corpus.tokenize import random_token_ids
from tasks.pretraining.pretraining_data import masking_config, pack_documents, sentence_pairs, write_shards


@stage_task
def pack(max_seq_length: int, cls_id: int, sep_id: int, with_lexicon: bool, reserve: int):
    table = pq.read_table(paths.TOKENS)
    ids = [np.asarray(x, dtype=np.int32) for x in table.column("input_ids").to_pylist()]
    words = [np.asarray(x, dtype=np.int32) for x in table.column("word_ids").to_pylist()]
    lex = None
    if with_lexicon:  # the segmented and tokenized tables hold the same sentences in the same order
        segmented = pq.read_table(paths.SEGMENTED, columns=["words"])
        lex = lexicon_ids(segmented.column("words"), table.column("word_ids"), pq.read_table(paths.LEXICON))
    return pack_documents(table.column("doc_id").to_pylist(), ids, words, max_seq_length, cls_id, sep_id,
                          lex_ids=lex, reserve=reserve)


@flow(name="pretraining_data")
def pretraining_data(objective: str) -> None:
    params = load_params()
    spec, cfg = params.objective(objective), params.pretraining_data
    masking = masking_config(spec, cfg)
    logger = get_run_logger()
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    packed = pack(cfg.max_seq_length, tokenizer.cls_token_id, tokenizer.sep_token_id, masking.similar > 0,
                  reserve=1 if spec.sentence_task else 0)
    stats = {"objective": objective}
    if spec.sentence_task:
        packed, pair_stats = sentence_pairs(packed, spec.sentence_task, named_rng(params.seed, f"{objective}/pairs"),
                                            tokenizer.cls_token_id, tokenizer.sep_token_id)
        stats.update(sentence_task=spec.sentence_task, **pair_stats)
    similar = similar_words_from_table(pq.read_table(paths.LEXICON)) if masking.similar else None
    with atomic_outputs(paths.PRETRAINING / objective,
                        paths.stage_metrics("pretraining_data", objective)) as (out, metrics):
        stats.update(stage_task(write_shards)(
            packed, masking, out, objective=objective, seed=params.seed, dynamic=spec.dynamic,
            dupe_factor=cfg.dupe_factor, shard_size=cfg.shard_size, mask_token_id=tokenizer.mask_token_id,
            random_token_ids=random_token_ids(tokenizer), similar=similar, workers=cfg.workers))
        logger.info(f"{objective}: {stats}")
        write_json(metrics, stats)


if __name__ == "__main__":
    run_stage(pretraining_data, *sys.argv[1:])
