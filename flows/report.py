"""Stage ``report``: the evaluation report (Markdown + self-contained HTML + PNG figures), also
published as a Prefect markdown artifact, and each task's variance components (``variance.json``,
what ``python -m tasks.report.planner`` plans a study from). It refuses to run while an output of ``dvc.yaml``
that it reads is missing (:func:`tasks.report.common.missing_inputs`)."""

import sys

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from tasks.core import paths
from tasks.core.errors import PipelineError
from tasks.core.io import atomic_outputs
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.report.common import missing_inputs
from tasks.report.html import inline_figures, to_html
from tasks.report.report import TITLE, build_report


@flow(name="report")
def report() -> None:
    params = load_params()
    if missing := missing_inputs():
        raise PipelineError(f"report: {len(missing)} input(s) of dvc.yaml missing, first {missing[0]}; run "
                            f"`dvc repro` (or the named stage) first: a report without them would drop their findings")
    out = paths.REPORTS
    with atomic_outputs(out / "report.md", out / "report.html", out / "figures", out / "variance.json") as (
            md_file, html_file, figures, variance):
        text = build_report(params, figures, out, variance=variance)
        # The Markdown refers to figures/...; render the HTML against the temporary folder.
        md_file.write_text(text, encoding="utf-8")
        html_file.write_text(to_html(text.replace("](figures/", f"]({figures.name}/"), out, TITLE),
                             encoding="utf-8")
    # the figures inlined: the Prefect UI cannot follow the report's relative figures/ links
    create_markdown_artifact(markdown=inline_figures(text, out), key="zhplm-report", description=TITLE)


if __name__ == "__main__":
    run_stage(report, *sys.argv[1:])
