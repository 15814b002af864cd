"""The page ``dvc plots show`` fills (``.dvc/plots/offline.html``): Vega inlined at the versions dvc-render's
own page loads from its CDN, so that the plots render with no network."""

import re

import pytest
from dvc_render.html import render_html
from dvc_render.vega import VegaRenderer

from tasks.orchestration import plots_page
from tests.conftest import ROOT


def test_the_dvc_config_points_at_the_offline_page_and_it_is_current():
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        assert repo.config["plots"]["html_template"] == "plots/offline.html"
    text = (ROOT / ".dvc" / "plots" / "offline.html").read_text(encoding="utf-8")
    versions = plots_page.cdn_versions()  # what dvc-render would load from its CDN
    assert ", ".join(f"{n} {versions[n]}" for n in plots_page.BUILDS) in text, "rebuild: python -m " \
        "tasks.orchestration.plots_page"
    assert "{plot_divs}" in text and "{scripts}" not in text and not re.search(r"<script[^>]+src=", text)
    assert text.count("<script>") == 3 and 'vega={})' in text and "vegaEmbed" in text


def test_a_plot_rendered_on_the_page_loads_nothing_from_the_network(tmp_path):
    datapoints = [{"step": s, "loss": 7 - s / 10, "rev": "workspace"} for s in range(5)]
    renderer = VegaRenderer(datapoints, "metrics/pretrain/mlm-42.csv", x="step", y="loss")
    out = render_html([renderer], tmp_path / "index.html", html_template=str(ROOT / ".dvc" / "plots" / "offline.html"))
    html = out.read_text(encoding="utf-8")
    assert "vegaEmbed(" in html and "mlm-42" in html
    assert "cdn.jsdelivr" not in html and not re.search(r"<script[^>]+src=", html)


def test_a_build_that_would_end_the_inline_script_is_refused():
    scripts = {name: "var x = 1;" for name in plots_page.BUILDS}
    scripts["vega"] = "var s = '</SCRIPT>';"
    with pytest.raises(SystemExit, match="vega's build holds"):
        plots_page.page(scripts, {name: "1.0" for name in plots_page.BUILDS})
