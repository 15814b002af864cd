"""Integrated Gradients attributions (completeness) and their HTML rendering and page."""

import torch
from transformers import BertConfig, BertModel

from tasks.downstream.mean_pool import MeanPoolForSequenceClassification
from tasks.interpretability.attributions import input_embeddings, integrated_gradients
from tasks.report.attributions import attention_html, attribution_html, attributions_page
from tasks.report.templating import TEMPLATES


def test_integrated_gradients_are_complete_and_ignore_special_tokens():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=16, max_position_embeddings=16, hidden_dropout_prob=0.0)
    model = MeanPoolForSequenceClassification(config, BertModel(config)).eval()
    assert input_embeddings(model) is model.encoder.embeddings.word_embeddings
    batch = {"input_ids": torch.tensor([[2, 7, 8, 9, 3]]), "attention_mask": torch.ones(1, 5, dtype=torch.long),
             "token_type_ids": torch.zeros(1, 5, dtype=torch.long)}
    scores, delta = integrated_gradients(model, batch, target=1, pad_id=0, special_ids={0, 2, 3}, steps=200)
    baseline = {**batch, "input_ids": torch.tensor([[2, 0, 0, 0, 3]])}
    with torch.no_grad():
        gap = (model(**batch).logits[0, 1] - model(**baseline).logits[0, 1]).item()
    assert scores.shape == (5,) and scores[0] == 0 and scores[4] == 0  # [CLS]/[SEP] equal the baseline
    assert abs(scores.sum() - gap) < 1e-3 and abs(delta) < 1e-3


def test_html_is_escaped_and_coloured_by_sign():
    import numpy as np
    out = attribution_html(["<b>", "好"], np.array([-1.0, 0.5]))
    assert "&lt;b&gt;" in out and "<b>" not in out
    assert "rgba(220,38,38,1.00)" in out and "rgba(22,163,74,0.50)" in out
    table = attention_html(["a", "b"], np.array([[1.0, 0.0], [0.25, 0.75]]), "layer 0 head 1")
    assert table.count("<td") == 4 and "layer 0 head 1" in table and 'title="0.250"' in table


def test_page_uses_the_report_stylesheet_and_maps_one_example():
    import numpy as np
    example = {"id": "dev-<1>", "label": "1", "prediction": "0", "probability": 0.912, "convergence_delta": -0.0004,
               "tokens": ["[CLS]", "好", "[SEP]"], "attributions": [0.0, 0.5, 0.0],
               "attention": [np.full((2, 3, 3), 1 / 3)]}  # one layer, two heads
    page = attributions_page("wwm", "sentiment", [example, {**example, "id": "dev-2"}], mapped=1)
    assert page.startswith("<!DOCTYPE html>") and '<body class="wide">' in page
    assert (TEMPLATES / "style.css").read_text(encoding="utf-8").strip() in page
    assert "<h1>Attributions: wwm on sentiment</h1>" in page
    assert '<h2 id="dev-&lt;1&gt;">dev-&lt;1&gt;: wrong (gold 1, predicted 0, p = 0.91, IG delta -0.000)</h2>' in page
    assert page.count('<p class="tokens">') == 2 and "rgba(22,163,74,1.00)" in page
    assert page.count('<table class="attention">') == 2 and "layer 0 head 1" in page  # example dev-2 only
