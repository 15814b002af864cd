"""Stage ``similar_words``: the lexicon of corpus words and their similar words (nearest
neighbours by word-vector cosine) that Mac, MLM as correction, replaces words with."""

import sys
import time

from prefect import flow, get_run_logger
from transformers import BertTokenizerFast  # not AutoTokenizer, which imports torch

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_parquet
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.corpus import SimilarWordsMetrics
from tasks.core.params import load_params
from tasks.core.paths import source_file
from tasks.core.stage import run_stage
from tasks.corpus.similar_words import build_lexicon, corpus_word_counts, load_word_vectors


@flow(name="similar_words")
def similar_words() -> None:
    spec = load_params().similar_words
    start = time.perf_counter()
    words, vectors = load_word_vectors(source_file(paths.RAW, spec.source, spec.file))
    tokenizer = BertTokenizerFast.from_pretrained(paths.TOKENIZER)
    table, stats = build_lexicon(corpus_word_counts(paths.SEGMENTED), words, vectors, tokenizer, spec.neighbours)
    stats["wall_sec"] = round(time.perf_counter() - start, 2)
    get_run_logger().info(f"similar words: {stats}")
    with atomic_outputs(paths.LEXICON, paths.stage_metrics("similar_words")) as (out, metrics):
        write_parquet(out, table)
        write_metrics(metrics, SimilarWordsMetrics(**stats))


if __name__ == "__main__":
    run_stage(similar_words, *sys.argv[1:])
