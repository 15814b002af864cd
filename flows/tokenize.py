"""Stage ``tokenize``: build the WordPiece tokenizer; sentences -> token ids and word ids."""

import sys

import pyarrow.parquet as pq
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_parquet
from tasks.core.metrics import TokenizeMetrics, write_metrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.corpus.tokenize import build_tokenizer, tokens_table, vocab_stats


@flow(name="tokenize")
def tokenize() -> None:
    params = load_params().tokenizer
    segmented = pq.read_table(paths.SEGMENTED)
    tokenizer = build_tokenizer(params, segmented.column("text").to_pylist(), paths.RAW)
    tokens = tokens_table(segmented, tokenizer)
    stats = vocab_stats(tokenizer, tokens.column("input_ids"), sum(map(len, segmented.column("text").to_pylist())))
    get_run_logger().info(f"tokens: {stats}")
    with atomic_outputs(paths.TOKENIZER, paths.TOKENS, paths.stage_metrics("tokenize")) as (tok, out, metrics):
        tokenizer.save_pretrained(tok)
        write_parquet(out, tokens)
        write_metrics(metrics, TokenizeMetrics(**stats))


if __name__ == "__main__":
    run_stage(tokenize, *sys.argv[1:])
