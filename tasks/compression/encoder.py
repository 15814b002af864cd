"""Encoder surgery shared by distillation and pruning: find the BERT encoder inside a task
model, record its intermediate states, gate its heads and FFN neurons, and slice them out.

Transformers 5 has neither head masks nor ``prune_heads``, so everything here works on the
modules themselves: forward hooks record and gate, and :func:`slice_layer` replaces the
``nn.Linear`` layers of one transformer layer by smaller ones. ``BertSelfAttention`` reshapes
its projections with ``view(..., -1, head_size)``, so a layer whose Q/K/V have ``k x head_size``
rows runs ``k`` heads with no other change; the head size stays ``hidden / heads`` of the
unpruned model.

Layer numbering follows Hugging Face's ``hidden_states``: state 0 is the embeddings' output,
state ``i`` (1..L) the output of transformer layer ``i``; attention ``i`` is layer ``i``'s.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn
from transformers import BertModel, PreTrainedModel

from tasks.core.errors import ParamsError

# config.json keys of a model whose layers differ in heads or FFN size (see load_pruned_encoder)
LAYER_HEADS = "layer_heads"
LAYER_INTERMEDIATE = "layer_intermediate_sizes"


def encoder_of(model: nn.Module) -> BertModel:
    """The BERT-style encoder (a ``PreTrainedModel`` with ``encoder.layer``) inside a task model.

    Raises:
        ParamsError: ``model`` holds no such encoder (e.g. ALBERT, whose layers are shared):
            the compression stages support BERT-architecture models.
    """
    for module in model.modules():
        if isinstance(module, PreTrainedModel) and hasattr(getattr(module, "encoder", None), "layer"):
            return module
    raise ParamsError(f"{type(model).__name__} holds no BERT-style encoder (encoder.layer): distillation matches, "
                      "students from teacher layers and pruning need a BERT-architecture model")


def heads_of(layer: nn.Module) -> int:
    """Attention heads of one transformer layer, from its query projection's rows."""
    attention = layer.attention.self
    return attention.query.out_features // attention.attention_head_size


class Recorder:
    """Forward hooks on an encoder that keep its hidden states and attention probabilities.

    After a forward pass inside ``with Recorder(encoder, hidden=True, attentions=True) as rec``:
    ``rec.hidden[i]`` is state ``i`` (``float [B, L, H]``, 0 = embeddings' output) and
    ``rec.attentions[i]`` layer ``i``'s attention probabilities (``float [B, heads, L, L]``,
    1-based; index 0 is None). Attention probabilities need the eager attention implementation
    (sdpa does not return them): call ``encoder.set_attn_implementation("eager")`` first.
    """

    def __init__(self, encoder: BertModel, hidden: bool = True, attentions: bool = False):
        self.encoder, self.want_hidden, self.want_attentions = encoder, hidden, attentions
        self.hidden: list[torch.Tensor | None] = []
        self.attentions: list[torch.Tensor | None] = []
        self._handles: list = []

    def __enter__(self) -> "Recorder":
        layers = self.encoder.encoder.layer
        self.hidden = [None] * (len(layers) + 1)
        self.attentions = [None] * (len(layers) + 1)

        def keep(store: list, i: int, pick):
            def hook(module, args, output):
                store[i] = pick(output)
            return hook

        first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731
        if self.want_hidden:
            self._handles.append(self.encoder.embeddings.register_forward_hook(keep(self.hidden, 0, first)))
            for i, layer in enumerate(layers, 1):
                self._handles.append(layer.register_forward_hook(keep(self.hidden, i, first)))
        if self.want_attentions:
            for i, layer in enumerate(layers, 1):
                hook = keep(self.attentions, i, lambda out: out[1])
                self._handles.append(layer.attention.self.register_forward_hook(hook))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


@contextmanager
def gates(encoder: BertModel, heads: list[torch.Tensor] | None = None,
          ffn: list[torch.Tensor] | None = None) -> Iterator[None]:
    """Multiply each head's attention output and each FFN neuron's activation by a gate.

    Args:
        heads: per layer, ``float [heads_l]``: the gate of each head's context vector (before
            the output projection); 1 changes nothing, 0 is that head masked.
        ffn: per layer, ``float [intermediate_l]``: the gate of each FFN neuron after GELU.
    Gates with ``requires_grad`` give ``∂L/∂gate``, the head and neuron importance of
    Michel et al. 2019 (§4.1) that :mod:`tasks.compression.prune` ranks by.
    """
    handles = []
    for i, layer in enumerate(encoder.encoder.layer):
        if heads is not None:
            attention = layer.attention.self

            def gate_heads(module, args, output, g=heads[i], size=attention.attention_head_size):
                context, weights = output
                shape = context.shape
                gated = (context.view(*shape[:-1], -1, size) * g.to(context.dtype)[:, None]).view(shape)
                return gated, weights
            handles.append(attention.register_forward_hook(gate_heads))
        if ffn is not None:
            handles.append(layer.intermediate.register_forward_hook(
                lambda module, args, output, g=ffn[i]: output * g.to(output.dtype)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _take(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new ``nn.Linear`` keeping the output rows (``dim=0``) or input columns (``dim=1``) ``index``."""
    weight = linear.weight.detach().index_select(dim, index).clone()
    out_features, in_features = weight.shape
    new = nn.Linear(in_features, out_features, bias=linear.bias is not None,
                    device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.weight.copy_(weight)
        if linear.bias is not None:
            new.bias.copy_(linear.bias.detach() if dim == 1 else linear.bias.detach()[index])
    return new


def slice_layer(layer: nn.Module, keep_heads: torch.Tensor | None = None,
                keep_neurons: torch.Tensor | None = None) -> None:
    """Physically remove heads and FFN neurons of one ``BertLayer``, in place.

    Args:
        keep_heads: ``int64 [k]`` ascending indices of the heads to keep (``k >= 1``): rows of
            Q/K/V and columns of the attention output projection.
        keep_neurons: ``int64 [f]`` ascending FFN neurons to keep (``f >= 1``): rows of the
            intermediate projection and columns of the output projection.
    The result equals the unsliced layer with the dropped heads' outputs and neurons'
    activations gated to 0 (:func:`gates`); tested.
    Raises:
        ValueError: an empty or out-of-range selection.
    """
    attention = layer.attention.self
    if keep_heads is not None:
        heads, size = heads_of(layer), attention.attention_head_size
        if not len(keep_heads) or int(keep_heads.min()) < 0 or int(keep_heads.max()) >= heads:
            raise ValueError(f"keep_heads must name 1..{heads} of the layer's {heads} heads, got {keep_heads.tolist()}")
        rows = (keep_heads[:, None] * size + torch.arange(size)[None, :]).reshape(-1)
        for name in ("query", "key", "value"):
            setattr(attention, name, _take(getattr(attention, name), rows, 0))
        layer.attention.output.dense = _take(layer.attention.output.dense, rows, 1)
        attention.num_attention_heads = len(keep_heads)
        attention.all_head_size = len(rows)
    if keep_neurons is not None:
        width = layer.intermediate.dense.out_features
        if not len(keep_neurons) or int(keep_neurons.min()) < 0 or int(keep_neurons.max()) >= width:
            raise ValueError(f"keep_neurons must name 1..{width} of the layer's {width} FFN neurons")
        layer.intermediate.dense = _take(layer.intermediate.dense, keep_neurons, 0)
        layer.output.dense = _take(layer.output.dense, keep_neurons, 1)


def record_shape(encoder: BertModel) -> None:
    """Write the layers' head counts and FFN sizes into ``encoder.config``: plain
    ``num_attention_heads``/``intermediate_size`` when every layer keeps the unpruned heads
    and one FFN size (an ordinary BERT that ``AutoModel`` loads), else :data:`LAYER_HEADS`
    and :data:`LAYER_INTERMEDIATE` lists that :func:`load_pruned_encoder` reads."""
    config, layers = encoder.config, encoder.encoder.layer
    heads = [heads_of(layer) for layer in layers]
    sizes = [layer.intermediate.dense.out_features for layer in layers]
    full_heads = config.hidden_size // layers[0].attention.self.attention_head_size
    for key in (LAYER_HEADS, LAYER_INTERMEDIATE):
        if hasattr(config, key):
            delattr(config, key)
    if set(heads) == {full_heads} and len(set(sizes)) == 1:
        config.intermediate_size = sizes[0]
        return
    setattr(config, LAYER_HEADS, heads)
    setattr(config, LAYER_INTERMEDIATE, sizes)


def reshape_to_config(encoder: BertModel, config) -> None:
    """Give an unpruned encoder the per-layer shapes ``config`` records (:func:`record_shape`) by
    slicing its layers, so that a pruned state dict loads into it strictly."""
    layers = len(encoder.encoder.layer)
    heads = getattr(config, LAYER_HEADS, None) or [config.num_attention_heads] * layers
    sizes = getattr(config, LAYER_INTERMEDIATE, None) or [config.intermediate_size] * layers
    for layer, k, f in zip(encoder.encoder.layer, heads, sizes):
        slice_layer(layer, torch.arange(k) if k != heads_of(layer) else None,
                    torch.arange(f) if f != layer.intermediate.dense.out_features else None)
    for key in (LAYER_HEADS, LAYER_INTERMEDIATE):
        if hasattr(config, key):
            setattr(encoder.config, key, getattr(config, key))
    encoder.config.intermediate_size = config.intermediate_size
