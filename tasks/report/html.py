"""The report as a self-contained HTML page: Markdown rendered into ``templates/report.html.j2``
(the shared stylesheet inlined), figures inlined as base64 PNG data URIs, so the page
works offline and with no CDN."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import markdown

from tasks.report.templating import render

_IMG = re.compile(r'<img alt="([^"]*)" src="([^"]+)"')


def to_html(md_text: str, base: Path, title: str) -> str:
    """Self-contained HTML: Markdown rendered, images (paths relative to ``base``) inlined."""
    body = markdown.markdown(md_text, extensions=["tables", "fenced_code"])

    def inline(m: re.Match) -> str:
        data = base64.b64encode((base / m.group(2)).read_bytes()).decode()
        return f'<img alt="{m.group(1)}" src="data:image/png;base64,{data}"'

    return render("report.html.j2", title=title, wide=False, body=_IMG.sub(inline, body))
