"""Stage ``ingest``: corpus files -> normalised, deduplicated sentences without evaluation text."""

import sys

from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json, write_parquet
from tasks.core.params import load_params
from tasks.core.paths import source_file
from tasks.core.stage import run_stage, stage_task
from tasks.corpus.ingest import build_corpus, load_eval_sentences, read_documents


@stage_task
def ingest_corpus(params, eval_sentences: set[str]):
    inputs = [(item.source, item.lang,
               read_documents(source_file(paths.RAW, item.source, item.file), item.format, item.text_field))
              for item in params.corpus.inputs]
    table, stats = build_corpus(inputs, eval_sentences, params.corpus.min_sentence_chars)
    get_run_logger().info(f"corpus: {stats.to_dict()}")
    return table, stats


@flow(name="ingest")
def ingest() -> None:
    params = load_params()
    eval_sentences = load_eval_sentences(paths.DOWNSTREAM, paths.EVAL_TEXTS_FILE)
    table, stats = ingest_corpus(params, eval_sentences)
    with atomic_outputs(paths.CORPUS, paths.stage_metrics("corpus")) as (corpus, metrics):
        write_parquet(corpus, table)
        write_json(metrics, stats.to_dict())


if __name__ == "__main__":
    run_stage(ingest, *sys.argv[1:])
