"""Stage ``segment``: jieba word segmentation of the corpus, shard by shard on the executor."""

import sys
import time

import pyarrow.compute as pc
import pyarrow.parquet as pq
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, stream_parquet
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.corpus import SegmentMetrics
from tasks.core.params import load_params
from tasks.core.shards import remove_work, run_shards, write_output
from tasks.core.stage import run_stage
from tasks.corpus.segment import segment_step


@flow(name="segment")
def segment() -> None:
    params = load_params()
    step = segment_step(pq.read_schema(paths.CORPUS), hmm=params.segment.hmm, user_dict=params.segment.user_dict)
    start = time.perf_counter()
    run = run_shards(step, paths.CORPUS, paths.SEGMENTED, params.shards.rows, params.executor)
    wall = time.perf_counter() - start
    with atomic_outputs(paths.SEGMENTED, paths.stage_metrics("segment")) as (out, metrics):
        sentences = write_output(run, step.schema, out)
        chars = words = 0
        for batch in stream_parquet(out).iter_batches(batch_size=1 << 14, columns=["text", "words"]):
            chars += pc.sum(pc.utf8_length(batch.column("text"))).as_py() or 0
            words += pc.sum(pc.list_value_length(batch.column("words"))).as_py() or 0
        stats = {"sentences": sentences, "characters": chars, "words": words, "mean_word_chars": chars / words,
                 "workers": params.executor.workers, "shards": run.shards, "shards_run": run.processed,
                 "wall_sec": round(wall, 2), "chars_per_sec": round(chars / wall)}
        get_run_logger().info(f"segment: {stats}")
        write_metrics(metrics, SegmentMetrics(**stats))
    remove_work(run)


if __name__ == "__main__":
    run_stage(segment, *sys.argv[1:])
