"""Stage ``downstream``: prepare the fine-tuning datasets and the evaluation text to keep
out of pretraining.

Sentiment: the review lines are normalised, exact duplicates collapsed, texts
seen with both labels dropped, and the rest split train/dev/test by a seeded
shuffle (``data/downstream/sentiment/{train,dev,test}.parquet``).
"""

import sys

import pyarrow as pa
from prefect import flow, get_run_logger

from tasks import paths
from tasks.acquire import source_file
from tasks.classification import deduplicate, read_polarity_lines, split_examples, split_table
from tasks.io import atomic_outputs, write_json, write_parquet
from tasks.params import load_params
from tasks.stage import run_stage, stage_task


@stage_task
def prepare_sentiment(source: str, dev_fraction: float, test_fraction: float, seed: int) -> tuple[dict, dict]:
    files = {1: source_file(paths.RAW, source, "pos.txt"), 0: source_file(paths.RAW, source, "neg.txt")}
    examples, stats = deduplicate(read_polarity_lines(files))
    splits = split_examples(examples, dev_fraction, test_fraction, seed)
    stats["splits"] = {name: len(rows) for name, rows in splits.items()}
    get_run_logger().info(f"sentiment: {stats}")
    return {name: split_table("sentiment", rows) for name, rows in splits.items()}, stats


@flow(name="downstream")
def downstream() -> None:
    params = load_params()
    tables, stats = prepare_sentiment(params.sentiment.source, params.sentiment.dev_fraction,
                                      params.sentiment.test_fraction, params.seed)
    eval_texts = pa.concat_tables(
        pa.table({"task": ["sentiment"] * len(tables[s]), "split": [s] * len(tables[s]),
                  "text": tables[s].column("text_a")}) for s in ("dev", "test"))
    with atomic_outputs(paths.DOWNSTREAM, paths.stage_metrics("downstream")) as (out, metrics):
        for split, table in tables.items():
            (out / "sentiment").mkdir(parents=True, exist_ok=True)
            write_parquet(out / "sentiment" / f"{split}.parquet", table)
        write_parquet(out / paths.EVAL_TEXTS.name, eval_texts)
        write_json(metrics, {"sentiment": stats})


if __name__ == "__main__":
    run_stage(downstream, *sys.argv[1:])
