"""Stage ``segment``: jieba word segmentation of the corpus (every core)."""

import sys
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_parquet
from tasks.core.metrics import SegmentMetrics, write_metrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.corpus.segment import add_words


@flow(name="segment")
def segment() -> None:
    params = load_params().segment
    corpus = pq.read_table(paths.CORPUS)
    start = time.perf_counter()
    table = add_words(corpus, hmm=params.hmm, user_dict=params.user_dict, workers=params.workers)
    wall = time.perf_counter() - start
    chars = pc.sum(pc.utf8_length(corpus.column("text"))).as_py()
    words = pc.sum(pc.list_value_length(table.column("words"))).as_py()
    stats = {"sentences": table.num_rows, "characters": chars, "words": words, "mean_word_chars": chars / words,
             "workers": params.workers, "wall_sec": round(wall, 2), "chars_per_sec": round(chars / wall)}
    get_run_logger().info(f"segment: {stats}")
    with atomic_outputs(paths.SEGMENTED, paths.stage_metrics("segment")) as (out, metrics):
        write_parquet(out, table)
        write_metrics(metrics, SegmentMetrics(**stats))


if __name__ == "__main__":
    run_stage(segment, *sys.argv[1:])
