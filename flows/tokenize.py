"""Stage ``tokenize``: build the WordPiece tokenizer; sentences -> token ids and word ids, shard by shard."""

import sys

import pyarrow.parquet as pq
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.corpus import TokenizeMetrics
from tasks.core.params import load_params
from tasks.core.shards import remove_work, run_shards, write_output
from tasks.core.stage import run_stage
from tasks.corpus.tokenize import build_tokenizer, count_chars, tokens_step, vocab_stats


@flow(name="tokenize")
def tokenize() -> None:
    params = load_params()
    tokenizer = build_tokenizer(params.tokenizer, paths.SEGMENTED, paths.RAW)
    step = tokens_step(tokenizer, pq.read_schema(paths.SEGMENTED))
    run = run_shards(step, paths.SEGMENTED, paths.TOKENS, params.shards.rows, params.executor)
    with atomic_outputs(paths.TOKENIZER, paths.TOKENS, paths.stage_metrics("tokenize")) as (tok, out, metrics):
        tokenizer.save_pretrained(tok)
        write_output(run, step.schema, out)
        stats = {**vocab_stats(tokenizer, out, count_chars(paths.SEGMENTED)), "shards": run.shards,
                 "shards_run": run.processed}
        get_run_logger().info(f"tokens: {stats}")
        write_metrics(metrics, TokenizeMetrics(**stats))
    remove_work(run)


if __name__ == "__main__":
    run_stage(tokenize, *sys.argv[1:])
