"""Stage ``pretraining_data@<objective>-<seed>``: the tokenized corpus packed into sequences (paired for NSP/SOP) and
masked with the objective's scheme under pretraining seed ``seed`` (static: ``dupe_factor`` masked copies; dynamic:
masked at batch time), in memory-mappable Arrow IPC shards; the corpus streams through, the packed rows wait on disk."""

import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
from prefect import flow, get_run_logger
from transformers import BertTokenizerFast  # not AutoTokenizer, which imports torch

from tasks.core import paths
from tasks.core.io import atomic_outputs, process_tag, remove_orphans
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.pretraining import PretrainingDataMetrics
from tasks.core.params import load_params
from tasks.core.rng import named_rng
from tasks.core.stage import run_stage
from tasks.corpus.similar_words import similar_words_from_table
from tasks.corpus.tokenize import random_token_ids
from tasks.pretraining.objectives import build
from tasks.pretraining.packing import pack_corpus
from tasks.pretraining.pretraining_data import write_shards


@flow(name="pretraining_data")
def pretraining_data(objective: str, seed: str) -> None:
    params, seed = load_params(), int(seed)
    pretraining, cfg, name = build(params, objective), params.pretraining_data, paths.seeded(objective, seed)
    tokenizer = BertTokenizerFast.from_pretrained(paths.TOKENIZER)
    masking = pretraining.masking(tokenizer)
    lexicon = pq.read_table(paths.LEXICON) if pretraining.needs_lexicon else None
    stats = {"objective": objective, "seed": seed}
    paths.PRETRAINING.mkdir(parents=True, exist_ok=True)
    remove_orphans(paths.PRETRAINING, f".{name}.packed-")  # a killed run's scratch folder
    # packed rows spill to a scratch folder beside the output (same disk), not to memory
    with atomic_outputs(paths.PRETRAINING / name, paths.stage_metrics("pretraining_data", name)) as (out, metrics), \
            tempfile.TemporaryDirectory(prefix=f".{name}.packed-{process_tag()}-", dir=paths.PRETRAINING) as scratch:
        packed = pack_corpus(paths.TOKENS, Path(scratch) / "packed", cfg.max_seq_length, tokenizer.cls_token_id,
                             tokenizer.sep_token_id, reserve=pretraining.reserve,
                             cross_documents=cfg.packing == "full_sentences",
                             words=paths.SEGMENTED if lexicon is not None else None, lexicon=lexicon)
        packed, made_over = pretraining.rows(packed, seed, tokenizer, Path(scratch))  # NSP/SOP: segment pairs
        stats.update(made_over)
        stats.update(write_shards(
            packed, masking, out, objective=objective, seed=seed, dynamic=pretraining.spec.dynamic,
            dupe_factor=cfg.dupe_factor, shard_size=cfg.shard_size, mask_token_id=tokenizer.mask_token_id,
            random_token_ids=random_token_ids(tokenizer), executor=params.executor,
            similar=similar_words_from_table(lexicon) if lexicon is not None else None))
        stats.update(packing=cfg.packing, fill_rate=round(stats["tokens"] / (stats["sequences"] * cfg.max_seq_length), 4))
        get_run_logger().info(f"{name}: {stats}")
        write_metrics(metrics, PretrainingDataMetrics(**stats))


if __name__ == "__main__":
    run_stage(pretraining_data, *sys.argv[1:])
