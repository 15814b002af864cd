"""The evaluation report: Markdown for people and git (and, through :mod:`tasks.report.html`,
a self-contained HTML page).

The report is built only from the pipeline's metrics files (``metrics/``), the validated
params, ``params.yaml`` (shown verbatim), ``dvc.lock`` and git, so it can be regenerated
at any commit. Each section is a module of this package that computes its numbers and
renders its template (``templates/<section>.md.j2``); ``templates/report.md.j2`` lays the
sections out. Plots are PNG files next to the Markdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tasks.core import paths
from tasks.core.io import write_json
from tasks.core.params import PARAMS_FILE, Params
from tasks.core.stage import stage_task
from tasks.report.curves import curves_section
from tasks.report.compression import compression_section
from tasks.report.corpus import corpus_section
from tasks.report.errors import errors_section
from tasks.report.findings import comparison_section, findings_section, load_outcomes, variance_components
from tasks.report.finetune import finetune_results, finetune_section
from tasks.report.interpretability import interpretability_section
from tasks.report.multilingual import multilingual_section
from tasks.report.pretraining import pretraining_section
from tasks.report.provenance import changes_section, data_versions, provenance
from tasks.report.runtime import runtime_section
from tasks.report.templating import render

TITLE = "zhplm pipeline report"


@dataclass(frozen=True)
class Inputs:
    """Where the report reads from (the pipeline's paths unless a test says otherwise)."""

    metrics: Path = paths.METRICS
    predictions: Path | None = paths.PREDICTIONS
    """None: no predictions at hand (a study's report, from its committed units): no wrong-prediction examples."""
    data: Path = paths.DOWNSTREAM
    attributions: Path = paths.ATTRIBUTIONS
    params_file: Path = Path(PARAMS_FILE)  # shown verbatim, comments included


@stage_task
def build_report(params: Params, figures: Path, report_dir: Path = paths.REPORTS, inputs: Inputs = Inputs(),
                 variance: Path | None = None) -> str:
    """The pipeline report as Markdown; figures are written into ``figures`` (linked as
    ``figures/...``). ``report_dir``: where the Markdown will live (links to pages are
    relative to it). ``variance``: where to write each task's variance components as JSON
    (:func:`tasks.report.findings.variance_components`, what the MDE planner reads)."""
    figures.mkdir(parents=True, exist_ok=True)
    metrics, models, tasks = inputs.metrics, params.finetune_models, params.finetune.tasks
    results = finetune_results(metrics, models, tasks)
    outcomes = load_outcomes(params, metrics)
    if variance is not None:
        write_json(variance, variance_components(params, outcomes))
    prov = provenance()
    return render(
        "report.md.j2", title=TITLE, prov=prov,
        findings=findings_section(params, outcomes, metrics),
        corpus=corpus_section(metrics, tasks),
        pretraining=pretraining_section(metrics, params.compare, params.pretrain.seeds, params.objectives,
                                        params.pretrain, figures),
        curves=curves_section(params, metrics, figures),
        comparison=comparison_section(params, outcomes),
        finetune=finetune_section(results, models, tasks, figures),
        errors=errors_section(results, models, tasks, inputs.predictions, inputs.data) if inputs.predictions else "",
        multilingual=multilingual_section(metrics, list(params.multilingual.mixtures), figures),
        interpretability=interpretability_section(params, metrics, inputs.attributions, figures, report_dir),
        compression=compression_section(metrics, params.compression.tasks, list(params.compression.students),
                                        params.compression.prune.models, figures),
        changes=changes_section(results, metrics),
        runtime=runtime_section(metrics, params.pretrained_models, results),
        params_text=inputs.params_file.read_text(encoding="utf-8").strip(),
        data_versions=data_versions(prov))
