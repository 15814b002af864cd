"""The report as a self-contained HTML page: Markdown rendered into ``templates/report.html.j2``
(the shared stylesheet inlined), figures inlined as base64 PNG data URIs, so the page
works offline and with no CDN."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import markdown

from tasks.report.templating import render

_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+\.png)\)")


def inline_figures(md_text: str, base: Path) -> str:
    """``md_text`` with each PNG image it links (``![alt](path)``, the path relative to ``base``) inlined as a
    base64 data URI: Markdown that shows its figures wherever it is read (the HTML page, a Prefect artifact)."""
    def inline(m: re.Match) -> str:
        return f"![{m.group(1)}](data:image/png;base64,{base64.b64encode((base / m.group(2)).read_bytes()).decode()})"

    return _IMAGE.sub(inline, md_text)


def to_html(md_text: str, base: Path, title: str) -> str:
    """Self-contained HTML: Markdown rendered, images (paths relative to ``base``) inlined."""
    body = markdown.markdown(inline_figures(md_text, base), extensions=["tables", "fenced_code"])
    return render("report.html.j2", title=title, wide=False, body=body)
