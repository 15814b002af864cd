"""Stage ``baseline@<task>``: the task's classic baseline (:meth:`tasks.downstream.families.base.Family.baseline`:
TF-IDF or overlap features + logistic regression, a CRF), trained on the same capped train split the
fine-tunes see, its setting chosen on dev, scored once on test. Writes ``metrics/baseline/<task>.json`` and the
per-example test outcomes ``metrics/outcomes/classic-<task>.parquet`` (:mod:`tasks.downstream.outcomes`), which the
report compares with every fine-tuned procedure (the competence verdict)."""

import sys

from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.downstream import BaselineMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.families import FAMILIES, read_splits
from tasks.downstream.outcomes import CLASSIC, write_outcomes


@flow(name="baseline")
def baseline(task_name: str) -> None:
    params = load_params()
    spec = params.task(task_name)
    family, headline = FAMILIES[spec.family], spec.metrics[0]
    tables = read_splits(task_name)
    fit, scores, predictions = family.baseline(tables, family.labels(tables), spec.metrics)
    get_run_logger().info(f"{task_name}: {fit.method}, {fit.setting} chosen on dev; dev {scores['dev']} "
                          f"test {scores['test']} ({fit.train_sec} s)")
    outcomes = {0: family.counts(headline, tables["test"], predictions)} if headline in family.counted else {}
    with atomic_outputs(paths.stage_metrics("baseline", task_name),
                        paths.stage_metrics("outcomes", paths.finetune_name(CLASSIC, task_name), ".parquet")) as (
            metrics_file, outcomes_file):
        write_metrics(metrics_file, BaselineMetrics(
            task=task_name, family=spec.family, headline=headline, method=fit.method, setting=fit.setting,
            search=fit.search, train_rows=tables["train"].num_rows, dev=scores["dev"], test=scores["test"],
            wall_sec=fit.train_sec, **({"details": fit.details} if fit.details else {})))
        write_outcomes(outcomes_file, spec.family, headline, outcomes)


if __name__ == "__main__":
    run_stage(baseline, *sys.argv[1:])
