"""Stage ``ingest``: corpus files -> normalised, deduplicated sentences without evaluation text."""

import sys

from prefect import flow

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.corpus import CorpusMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.corpus.ingest import ingest_corpus, load_eval_sentences


@flow(name="ingest")
def ingest() -> None:
    params = load_params()
    eval_sentences = load_eval_sentences(paths.EVAL_TEXTS)
    with atomic_outputs(paths.CORPUS, paths.stage_metrics("corpus")) as (corpus, metrics):
        stats = ingest_corpus(params.corpus, paths.RAW, eval_sentences, corpus, params.shards.rows)
        write_metrics(metrics, CorpusMetrics(**stats.to_dict()))


if __name__ == "__main__":
    run_stage(ingest, *sys.argv[1:])
