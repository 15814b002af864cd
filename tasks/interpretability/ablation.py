"""Attention-zone ablation of span-extraction (MRC) models, at evaluation time.

After Cui et al. 2022, "Multilingual multi-aspect explainability analyses on
machine reading comprehension models" (iScience 25(4); code: mrc-model-analysis):
attention from a set of query positions (rows) to a set of key positions
(columns) is blocked by adding -10000 to the scaled attention logits before the
softmax, the way BERT masks padding, in all layers, one layer, or one head.

An MRC feature is ``[CLS] question [SEP] passage [SEP] padding``. With
``mid`` the first and ``end`` the last [SEP] of the valid tokens, the sets are
Q = positions 1..mid-1, P = mid+1..end-1, V = every valid (non-padding) token,
and the zones (rows → columns) are:

==========  ====================  =============================================
zone        rows                  columns
==========  ====================  =============================================
cls         V                     {0} ([CLS])
sep_mid     V                     {mid}
sep_end     V                     {end}
special     V                     {0, mid, end}
diagonal    V                     the row itself (i → i)
q2q         Q                     Q
q2p         Q                     P
p2q         P                     Q
p2p         P                     P
==========  ====================  =============================================

The reference code's Q2P also blocks the [CLS], [SEP] and padding *rows*
towards the passage. That is not followed here: it would mix the question's
attention with that of the special tokens (which the cls/sep zones measure on
their own), so a "No Q2P" drop could not be told apart from a special-token
effect. Padding rows never reach the output, so blocking them changes nothing.
Positions are found from the [SEP] tokens, not from token type ids, so models
without segment embeddings work too.

The intervention is an attention function registered with transformers'
``AttentionInterface`` (transformers 5 has no head masks or ``prune_heads``):
inside :meth:`ZoneAblation.block`, layers and heads that are not blocked run
the model's own attention implementation unchanged, so blocking nothing gives
exactly the plain model's outputs.

:func:`ablation_grid` scores a model with each zone blocked in all layers at once,
in each layer alone and (for the chosen zones) in each head of each layer alone,
one Prefect task (:func:`ablate`) per granularity.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
from prefect import get_run_logger
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.models.bert.modeling_bert import eager_attention_forward

from tasks.core.params.interpretability import ATTENTION_ZONES as ZONES
from tasks.core.stage import stage_task

BLOCK = -10000.0
IMPLEMENTATION = "zhplm_zone_ablation"


def zone_mask(zone: str, input_ids: torch.Tensor, attention_mask: torch.Tensor, sep_id: int) -> torch.Tensor:
    """``bool [B, L, L]``: True where attention from row (query) to column (key) is blocked.

    Args:
        zone: one of :data:`ZONES` (module docstring for the row and column sets).
        input_ids: ``int [B, L]``, features ``[CLS] question [SEP] passage [SEP] pad``.
        attention_mask: ``int [B, L]``, 1 on valid tokens.
    Raises:
        ValueError: an unknown zone, or a feature without two [SEP] tokens.
    """
    if zone not in ZONES:
        raise ValueError(f"unknown zone {zone!r}; zones: {', '.join(ZONES)}")
    valid = attention_mask.bool()
    is_sep = (input_ids == sep_id) & valid
    if (is_sep.sum(1) < 2).any():
        raise ValueError("every feature needs a middle and a final [SEP] ([CLS] question [SEP] passage [SEP])")
    pos = torch.arange(input_ids.shape[1], device=input_ids.device)[None, :]
    mid = torch.where(is_sep, pos, input_ids.shape[1]).min(1, keepdim=True).values
    end = torch.where(is_sep, pos, -1).max(1, keepdim=True).values
    question = (pos > 0) & (pos < mid)
    passage = (pos > mid) & (pos < end)
    cols = {"cls": pos == 0, "sep_mid": pos == mid, "sep_end": pos == end,
            "special": (pos == 0) | (pos == mid) | (pos == end)}
    if zone in cols:
        return valid[:, :, None] & cols[zone][:, None, :]
    if zone == "diagonal":
        return valid[:, :, None] & torch.eye(input_ids.shape[1], dtype=torch.bool, device=input_ids.device)[None]
    rows, keys = {"q2q": (question, question), "q2p": (question, passage), "p2q": (passage, question),
                  "p2p": (passage, passage)}[zone]
    return rows[:, :, None] & keys[:, None, :]


@dataclass
class _Block:
    bias: torch.Tensor | None          # float [B, 1, L, L]: BLOCK where blocked, else 0
    layers: frozenset[int] | None      # None = every layer
    heads: frozenset[int] | None       # None = every head
    fallback: object                   # the model's own attention function
    calls: int = 0                     # attention calls so far in this forward pass = layer index


_ACTIVE: _Block | None = None


def _additive(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The masks are boolean here (True = attend, as for sdpa); eager attention adds them."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def _zone_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention plus the active block's bias on the chosen layers/heads; the model's own
    attention function everywhere else. ``query`` etc. are ``[B, H, L, D]``."""
    block = _ACTIVE
    layer = -1
    if block is not None:
        layer, block.calls = block.calls, block.calls + 1
    if block is None or block.bias is None or (block.layers is not None and layer not in block.layers):
        fallback = block.fallback if block is not None else eager_attention_forward
        if fallback is eager_attention_forward:
            attention_mask = _additive(attention_mask, query.dtype)
        return fallback(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)
    scaling = query.size(-1) ** -0.5 if scaling is None else scaling
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    mask = _additive(attention_mask, scores.dtype)
    if mask is not None:
        scores = scores + mask
    bias = block.bias.to(scores.dtype)
    if block.heads is None:
        scores = scores + bias
    else:
        heads = sorted(block.heads)
        scores[:, heads] = scores[:, heads] + bias
    weights = torch.nn.functional.dropout(scores.softmax(-1), p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


AttentionInterface.register(IMPLEMENTATION, _zone_attention)
ALL_MASK_ATTENTION_FUNCTIONS.register(IMPLEMENTATION, sdpa_mask)  # boolean masks, as for sdpa


class ZoneAblation:
    """Block attention zones of a Hugging Face BERT-style encoder (BERT, RoBERTa, ALBERT,
    ELECTRA...: any model whose self-attention goes through transformers'
    ``AttentionInterface``). The k-th attention call of a forward pass is layer k, which
    also holds for ALBERT's one shared layer applied ``num_hidden_layers`` times.

    Example::

        ablation = ZoneAblation(model, sep_id=tokenizer.sep_token_id)
        with ablation.block("p2q", layers={3}, heads={5}):
            scores = evaluate(model)
    """

    def __init__(self, model: PreTrainedModel, sep_id: int):
        self.model, self.sep_id = model, sep_id

    @contextmanager
    def block(self, zone: str | None, layers: set[int] | None = None,
              heads: set[int] | None = None) -> Iterator[None]:
        """Within the block, every forward pass has ``zone`` blocked in ``layers`` and
        ``heads`` (``None``: all); ``zone=None`` blocks nothing.

        Raises:
            ValueError: an unknown zone, or a layer or head the model does not have.
        """
        global _ACTIVE
        config = self.model.config
        if zone is not None and zone not in ZONES:
            raise ValueError(f"unknown zone {zone!r}; zones: {', '.join(ZONES)}")
        for name, chosen, count in (("layer", layers, config.num_hidden_layers),
                                    ("head", heads, config.num_attention_heads)):
            if chosen is not None and not set(chosen) <= set(range(count)):
                raise ValueError(f"{name}s {sorted(chosen)} out of range: the model has {count}")
        original = config._attn_implementation
        fallback = {"eager": eager_attention_forward, "sdpa": sdpa_attention_forward}.get(original)
        if fallback is None:
            fallback = AttentionInterface.get_interface(original, eager_attention_forward)
        state = _Block(None, None if layers is None else frozenset(layers),
                       None if heads is None else frozenset(heads), fallback)

        def set_bias(module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            mask = kwargs.get("attention_mask")
            mask = torch.ones_like(ids) if mask is None else mask
            blocked = zone_mask(zone, ids, mask, self.sep_id)
            state.bias, state.calls = (blocked.to(torch.float32) * BLOCK)[:, None], 0

        hook = self.model.register_forward_pre_hook(set_bias, with_kwargs=True) if zone is not None else None
        config._attn_implementation = IMPLEMENTATION
        _ACTIVE = state
        try:
            yield
        finally:
            _ACTIVE = None
            config._attn_implementation = original
            if hook is not None:
                hook.remove()


@stage_task(task_run_name="{granularity}")
def ablate(granularity: str, score: Callable[[], dict], ablation: ZoneAblation, zones: list[str], layers: int,
           heads: int) -> dict:
    """EM/F1 with each zone blocked: ``all_layers`` -> {zone: scores};
    ``per_layer`` -> {zone: {layer_k: scores}}; ``per_head`` -> {zone: {layer_k: {head_h: scores}}}."""
    result = {}
    for zone in zones:
        if granularity == "all_layers":
            with ablation.block(zone):
                result[zone] = score()
        elif granularity == "per_layer":
            result[zone] = {}
            for layer in range(layers):
                with ablation.block(zone, layers={layer}):
                    result[zone][f"layer_{layer}"] = score()
        else:
            result[zone] = {}
            for layer in range(layers):
                result[zone][f"layer_{layer}"] = {}
                for head in range(heads):
                    with ablation.block(zone, layers={layer}, heads={head}):
                        result[zone][f"layer_{layer}"][f"head_{head}"] = score()
    get_run_logger().info(f"{granularity}: {len(zones)} zone(s) done")
    return result


def ablation_grid(model: PreTrainedModel, sep_id: int, score: Callable[[], dict],
                  per_head_zones: list[str]) -> dict:
    """``score()`` of ``model`` unablated (``baseline``), then with every zone blocked in all
    layers (``all_layers``), in each layer (``per_layer``) and, for ``per_head_zones``, in each
    head of each layer (``per_head``); with ``layers``, ``heads`` and ``evaluation`` (count, wall
    time). Keys in that order: ``layers``, ``heads``, ``baseline``, ``all_layers``, ``per_layer``,
    ``per_head``, ``evaluation``."""
    t0 = time.perf_counter()
    config = model.config
    zone_ablation = ZoneAblation(model, sep_id)
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    result = {"layers": layers, "heads": heads, "baseline": score()}
    for granularity, zones in (("all_layers", ZONES), ("per_layer", ZONES), ("per_head", per_head_zones)):
        result[granularity] = ablate(granularity, score, zone_ablation, list(zones), layers, heads)
    evaluations = 1 + len(ZONES) * (1 + layers) + len(per_head_zones) * layers * heads
    result["evaluation"] = {"evaluations": evaluations, "wall_sec": round(time.perf_counter() - t0, 2)}
    return result
