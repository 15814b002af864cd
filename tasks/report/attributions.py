"""Token attributions and attention maps as self-contained HTML (no scripts, no CDN): the
``attributions`` stage's page (:func:`attributions_page`, on the report's page template and
stylesheet) and the report's attribution cells (:func:`attribution_html`)."""

from __future__ import annotations

import html

import numpy as np

from tasks.report.templating import render


def _colour(value: float, scale: float) -> str:
    """Green for evidence for the prediction, red against; alpha by magnitude."""
    alpha = min(1.0, abs(value) / scale) if scale > 0 else 0.0
    rgb = "22,163,74" if value >= 0 else "220,38,38"
    return f"rgba({rgb},{alpha:.2f})"


def attribution_html(tokens: list[str], scores: np.ndarray) -> str:
    """One example's tokens as coloured ``<span>`` s (title = the attribution)."""
    scale = float(np.abs(scores).max()) if len(scores) else 0.0
    return "".join(f'<span title="{s:+.3f}" style="background:{_colour(s, scale)};padding:0 1px">'
                   f"{html.escape(t)}</span>" for t, s in zip(tokens, scores))


def attention_html(tokens: list[str], attention: np.ndarray, title: str) -> str:
    """One head's attention ``[L, L]`` (rows: query tokens, columns: key tokens) as a heat-map table."""
    head = "".join(f"<th>{html.escape(t)}</th>" for t in tokens)
    rows = []
    for token, row in zip(tokens, attention):
        cells = "".join(f'<td title="{p:.3f}" style="background:rgba(37,99,235,{min(1.0, p):.2f})"></td>'
                        for p in row)
        rows.append(f"<tr><th>{html.escape(token)}</th>{cells}</tr>")
    return (f'<table class="attention"><caption>{html.escape(title)}</caption>'
            f"<tr><th></th>{head}</tr>{''.join(rows)}</table>")


def attributions_page(model_name: str, task: str, examples: list[dict], mapped: int) -> str:
    """The page of a model's explained ``examples`` (:func:`attribution_html` each) and every
    head's attention maps (:func:`attention_html`) of example number ``mapped``."""
    shown = [{**e, "tokens_html": attribution_html(e["tokens"], np.array(e["attributions"])),
              "maps": [[attention_html(e["tokens"], head, f"layer {layer} head {h}") for h, head in enumerate(heads)]
                       for layer, heads in enumerate(e["attention"] if i == mapped else [])]}
             for i, e in enumerate(examples)]
    return render("attributions.html.j2", title=f"Attributions: {model_name} on {task}", wide=True, examples=shown)
