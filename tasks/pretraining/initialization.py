"""How a new encoder starts: position embeddings and, optionally, attention heads that look at the
neighbouring tokens from the first step (a locality prior).

A small encoder pretrained for a few million tokens sits for most of its budget on the unigram
plateau: it predicts every masked token from the corpus's token frequencies alone. What it lacks
is not capacity but the first step of using context, attending to the adjacent tokens; a plain
left-and-right bigram predictor reaches 29% held-out accuracy where the 2 x 128 encoder had 4.5%
after half of its 9.5 M tokens (docs/objectives.md, "The default recipe"). A fixed attention bias
towards the neighbours lifts it to 21% by a quarter of the budget, which shows the cause; an
initialisation does most of the same while the saved model stays an ordinary BERT (or ELECTRA)
checkpoint: no extra parameter, nothing a fine-tuning run must know about.

:func:`init_local_attention` is that initialisation, ConViT's positional attention initialised as a
convolution (d'Ascoli et al. 2021, ICML, §3.1) carried over to absolute position embeddings: the
position table holds, per attention head of the discriminator's width ``D``, ``D/2`` sinusoid
pairs with frequencies spread evenly over ``[0, π/2)`` (:func:`position_table`); in the bottom
``layers`` layers, head ``h`` gets ``W_q = √s · I`` and ``W_k = √s · R(δ_h)`` on its block, ``R``
rotating each pair by its frequency times the offset ``δ_h`` (−1 or +1, alternating over heads, or
over layers for one-head encoders), so ``q_i · k_j ∝ Σ_k cos(ω_k (i − j − δ_h))``, a Dirichlet kernel
that peaks at ``j = i − δ_h``. Everything else keeps BERT's init (normal, std 0.02); training may keep
or undo the prior.
"""

from __future__ import annotations

import math

import torch
from torch import nn

LOCAL_OFFSETS = (-1, 1)  # the previous and the next token


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """``[length, dim]`` sinusoidal position encodings of amplitude 1 (Vaswani et al. 2017, §3.5)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)[:, : dim // 2]
    return table


def position_table(length: int, dim: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``([length, dim], [dim // 2])``: sinusoids of amplitude 1 laid out in blocks of ``block``
    dimensions (one per attention head), each holding ``block / 2`` (sin, cos) pairs with frequencies
    ``(π/2) · k / (block / 2)``, and the frequency of each pair. The highest frequency stays below
    π/2 so that the kernel of :func:`init_local_attention` does not alias within 128 positions."""
    pairs = block // 2
    freqs = (math.pi / 2) * (torch.arange(dim // 2) % pairs).float() / pairs
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * freqs)
    table[:, 1::2] = torch.cos(position * freqs)
    return table, freqs


def _rotation(freqs: torch.Tensor, offset: int) -> torch.Tensor:
    """Block-diagonal ``[2P, 2P]``: each (sin, cos) pair rotated by its frequency times ``offset``."""
    out = torch.zeros(2 * len(freqs), 2 * len(freqs))
    for k, w in enumerate(freqs.tolist()):
        c, s = math.cos(w * offset), math.sin(w * offset)
        out[2 * k:2 * k + 2, 2 * k:2 * k + 2] = torch.tensor([[c, s], [-s, c]])
    return out


@torch.no_grad()
def init_local_attention(encoder: nn.Module, freqs: torch.Tensor, layers: int, strength: float) -> None:
    """Make the heads of the bottom ``layers`` layers of ``encoder`` (a ``BertModel`` or
    ``ElectraModel``) attend to the previous or the next token (module docstring).

    Args:
        freqs: ``[hidden / 2]`` frequency of each (sin, cos) pair of the layer input's dimensions
            (:func:`position_table`'s, or its selection by a projection).
        strength: ``s``, the scale of ``q_i · k_j``; 3 makes 70% of each head's attention fall on its
            neighbour at init (2 x 128, amplitude 0.1), 10 learns slower.
    """
    scale = math.sqrt(strength)
    for index, layer in enumerate(encoder.encoder.layer[:layers]):
        attention = layer.attention.self
        heads, size = attention.num_attention_heads, attention.attention_head_size
        query, key = torch.zeros_like(attention.query.weight), torch.zeros_like(attention.key.weight)
        for h in range(heads):
            offset = LOCAL_OFFSETS[(h if heads > 1 else index) % len(LOCAL_OFFSETS)]
            block = slice(h * size, (h + 1) * size)
            query[block, block] = scale * torch.eye(size)
            key[block, block] = scale * _rotation(freqs[h * size // 2:(h + 1) * size // 2], offset)
        attention.query.weight.copy_(query)
        attention.key.weight.copy_(key)
        attention.query.bias.zero_()
        attention.key.bias.zero_()


@torch.no_grad()
def init_positions(embeddings: nn.Module, encoders: list[nn.Module], *, amplitude: float, local_layers: int,
                   local_strength: float, head_size: int) -> None:
    """Position embeddings and the locality prior of new encoders sharing ``embeddings``.

    Without local layers, the table is Vaswani's sinusoids of ``amplitude`` (0: BERT's normal init,
    untouched). With them, it is :func:`position_table` (blocks of ``head_size``, the widest
    encoder's head) of ``amplitude``, and each encoder gets :func:`init_local_attention`; an encoder
    that projects the embeddings to a narrower width (ELECTRA's generator: ``embeddings_project``)
    starts with the projection selecting the table's first dimensions, so that its heads see
    whole (sin, cos) pairs.
    """
    table = embeddings.position_embeddings.weight
    if not local_layers:
        if amplitude:
            table.copy_(amplitude * sinusoidal_positions(*table.shape))
        return
    positions, freqs = position_table(table.shape[0], table.shape[1], head_size)
    table.copy_(amplitude * positions)
    for encoder in encoders:
        project = getattr(encoder, "embeddings_project", None)
        if project is not None:  # width w < embedding size: select the first w dimensions
            project.weight.copy_(torch.eye(*project.weight.shape))
            project.bias.zero_()
        init_local_attention(encoder, freqs[:encoder.config.hidden_size // 2], local_layers, local_strength)
