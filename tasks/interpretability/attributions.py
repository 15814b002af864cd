"""Token attributions (Integrated Gradients) and attention maps of classification predictions,
rendered as self-contained HTML for people by :mod:`tasks.report.attributions`.

Integrated Gradients (Sundararajan et al. 2017, "Axiomatic attribution for deep
networks", §3) integrates the gradient of the predicted class's logit along the
straight path from a baseline input to the real one; here the path runs in the
word-embedding space (Captum's ``LayerIntegratedGradients`` on the input embeddings)
from a baseline that keeps [CLS]/[SEP] and replaces every other token by [PAD], as
in Captum's BERT tutorial. A token's attribution is the sum over embedding
dimensions. Completeness (the attributions sum to f(x) − f(baseline)) is reported as
the convergence delta.

:func:`explain_predictions` picks the most confident correct and wrong short dev
predictions and explains each with :func:`explain` (a Prefect task).
"""

from __future__ import annotations

import numpy as np
import torch
from captum.attr import LayerIntegratedGradients

from tasks.core.stage import stage_task
from tasks.downstream.finetune import predict


def input_embeddings(model: torch.nn.Module) -> torch.nn.Module:
    """The word-embedding layer of a classifier built on a Hugging Face encoder."""
    base = getattr(model, "encoder", None) or model.base_model
    return base.get_input_embeddings()


def integrated_gradients(model: torch.nn.Module, batch: dict[str, torch.Tensor], target: int, pad_id: int,
                         special_ids: set[int], steps: int) -> tuple[np.ndarray, float]:
    """Attributions of one example (``batch`` holds ``[1, L]`` tensors) towards class ``target``.

    Returns:
        ``float64 [L]`` attribution per token (logit units) and the convergence delta
        (sum of attributions − (f(x) − f(baseline)); near 0 when ``steps`` suffice).
    """
    ids = batch["input_ids"]
    baseline = torch.where(torch.isin(ids, torch.tensor(sorted(special_ids))), ids, torch.full_like(ids, pad_id))
    extra = {k: v for k, v in batch.items() if k != "input_ids"}

    def logits(input_ids, attention_mask, *rest):
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    **({"token_type_ids": rest[0]} if rest else {})).logits
        return out.float()

    args = (batch["attention_mask"],) + ((extra["token_type_ids"],) if "token_type_ids" in extra else ())
    lig = LayerIntegratedGradients(logits, input_embeddings(model))
    attributions, delta = lig.attribute(ids, baselines=baseline, target=target, additional_forward_args=args,
                                        n_steps=steps, return_convergence_delta=True)
    return attributions.sum(-1)[0].double().numpy(), float(delta[0])


def _encoder(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "encoder", None) or model.base_model


@stage_task
def explain(model, data, table, labels, tokenizer, index: int, steps: int) -> dict:
    """IG attributions towards the predicted class and eager attention maps of example ``index``."""
    batch = {k: v for k, v in data.batch(np.array([index])).items() if k != "labels"}
    with torch.no_grad():
        probs = model(**batch).logits.float().softmax(-1)[0]
        attentions = _encoder(model)(**batch, output_attentions=True).attentions  # layers x [1, H, L, L]
    predicted = int(probs.argmax())
    scores, delta = integrated_gradients(model, batch, predicted, tokenizer.pad_token_id,
                                         set(tokenizer.all_special_ids), steps)
    tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    return {"id": table.column("id")[index].as_py(), "label": labels[table.column("label")[index].as_py()],
            "prediction": labels[predicted], "probability": float(probs[predicted]), "tokens": tokens,
            "attributions": [round(float(s), 5) for s in scores], "convergence_delta": delta,
            "attention": [a[0].numpy() for a in attentions]}


def explain_predictions(model, data, table, labels, tokenizer, cfg, batch_size: int,
                        device: torch.device) -> tuple[list[dict], int]:
    """The ``cfg.correct`` most confident correct then the ``cfg.wrong`` most confident wrong
    predictions on examples of at most ``cfg.max_tokens`` tokens, each :func:`explain`\ ed (on
    the CPU, eager attention), and the index of the example whose attention maps the page
    shows (the first wrong one, or the last one when none is wrong)."""
    logits = predict(model, data, batch_size=batch_size, device=device)["logits"]
    probs = torch.from_numpy(np.concatenate(logits))
    model.cpu()  # a handful of examples: Integrated Gradients on the CPU
    _encoder(model).set_attn_implementation("eager")  # attention probabilities need eager attention
    probs = probs.softmax(-1).numpy()
    gold, pred = table.column("label").to_numpy(), probs.argmax(-1)
    short = data.lengths <= cfg.max_tokens
    chosen = []
    for correct, count in ((True, cfg.correct), (False, cfg.wrong)):
        pool = np.flatnonzero(short & ((gold == pred) == correct))
        chosen += pool[np.argsort(-probs[pool].max(-1), kind="stable")][:count].tolist()
    n_correct = int(np.sum(gold[chosen] == pred[chosen])) if chosen else 0
    examples = [explain(model, data, table, labels, tokenizer, i, cfg.steps) for i in chosen]
    return examples, min(n_correct, len(examples) - 1)
