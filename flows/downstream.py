"""Stage ``downstream@<task>``: read, split and cap one downstream task's data.

Writes ``data/downstream/<task>/{train,dev,test}.parquet`` (schemas in
:mod:`tasks.downstream.families`; ``datasets.load_dataset("parquet", data_dir=...)`` reads the folder as is),
the evaluation text that ingest keeps out of the pretraining corpus (``data/eval_texts/<task>.parquet``),
and ``metrics/downstream/<task>.json``
(rows per split, label or entity counts, malformed records and what was done).
"""

import sys

import pyarrow as pa
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_parquet
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.downstream import DownstreamMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.downstream import prepare_task
from tasks.downstream.families import FAMILIES


@flow(name="downstream")
def downstream(task: str) -> None:
    params = load_params()
    spec = params.task(task)
    tables, stats = prepare_task(task, spec, paths.RAW, params.seed)
    get_run_logger().info(f"{task}: {stats['rows']}; malformed: {stats['malformed']['counts']}")
    texts = {split: FAMILIES[spec.family].eval_texts(tables[split]) for split in ("dev", "test")}
    with atomic_outputs(paths.DOWNSTREAM / task, paths.eval_texts(task),
                        paths.stage_metrics("downstream", task)) as (out, eval_texts, metrics):
        out.mkdir(parents=True)
        for split, table in tables.items():
            write_parquet(out / f"{split}.parquet", table)
        write_parquet(eval_texts, pa.table({
            "text": pa.array([t for split in texts.values() for t in split], pa.string()),
            "split": pa.array([split for split, ts in texts.items() for _ in ts], pa.string())}))
        write_metrics(metrics, DownstreamMetrics(**stats))


if __name__ == "__main__":
    run_stage(downstream, *sys.argv[1:])
