"""The Jinja2 environment of the report and HTML page templates (``templates/``).

Markdown templates are not escaped (they carry inline HTML such as attribution spans);
``*.html.j2`` templates are. Undefined names raise, so a template can never silently
print an empty value. Kept free of plotting and Markdown imports because the
``attributions`` stage renders its page with it too.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

TEMPLATES = Path(__file__).parent / "templates"


def _num(value: float, spec: str) -> str:
    """``format(value, spec)`` as a filter: ``{{ gap | num("+.2f") }}``."""
    return format(value, spec)


ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(TEMPLATES),
    undefined=jinja2.StrictUndefined,
    autoescape=jinja2.select_autoescape(["html.j2"], default_for_string=False, default=False),
    keep_trailing_newline=True,
    trim_blocks=True,  # a line holding only a {% tag %} leaves no blank line behind
    lstrip_blocks=True,
)
ENV.filters["num"] = _num


def render(name: str, **context) -> str:
    """Template ``name`` rendered with ``context``, exactly as written (trailing newline kept)."""
    return ENV.get_template(name).render(context)


def render_blocks(name: str, **context) -> str:
    """A section template rendered to Markdown blocks separated by blank lines, with no
    leading or trailing newline, so sections join into the document the same way."""
    return render(name, **context).strip("\n")
