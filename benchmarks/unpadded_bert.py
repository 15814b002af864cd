"""Unpadded BERT: the encoder runs on a batch's real tokens only, each sequence attending to itself.

A pretraining batch of ``B`` rows padded to width ``L`` holds ``T = Σ lengths`` real tokens; on the
pipeline's data ``T`` is about two thirds of ``B·L``, and every linear layer, LayerNorm and attention
of a padded encoder spends the rest on [PAD]. :func:`unpad` hooks a Hugging Face ``BertModel`` so that
it packs the batch into one row of ``T`` tokens with its sequence boundaries (``cu_seqlens``), runs
every layer on those ``T`` tokens, computes attention per sequence with PyTorch's variable-length
scaled-dot-product attention (a jagged nested tensor: FlashAttention or memory-efficient kernels on
CUDA, with attention dropout), and scatters the output back to ``[B, L, H]`` (zeros at padding), so the
heads and losses downstream see what they saw before. The unpadding of NVIDIA's and MosaicML's BERT
recipes (``bert_padding.unpad_input``/``pad_input`` of FlashAttention; Portes et al. 2023, MosaicBERT,
§2.2); here with PyTorch's own kernels and the model's own modules, so the weights, the state dict and
the saved model are those of an ordinary ``BertModel``.

The same function with the same weights gives the padded encoder's output at every real token, equal
within float rounding (the sums run over fewer terms in a different order). Two attention kernels:
``jagged`` (scaled-dot-product attention on nested tensors, with attention dropout) and ``varlen``
(FlashAttention's variable-length kernel, Dao 2023, as ``torch.nn.attention.varlen``; CUDA only, no
dropout).
Measured on bert-base and the pipeline's data (``benchmarks/unpadded.py``, ``benchmarks/gpu_check.py``):
``jagged`` is several times slower than the padded encoder and ``varlen`` faster. No stage uses it, since
BERT's recipe has attention dropout (``docs/running.md``), so it lives with the benchmarks that measure it.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.varlen import varlen_attn
from transformers import AttentionInterface

ATTENTION = "zhplm_unpadded"  # the attention implementation unpad() sets (transformers' AttentionInterface)


# Eager under torch.compile: a jagged tensor built inside a compiled graph sends the whole encoder back to
# eager, so the graph breaks here instead and the layers between attentions compile.
@torch.compiler.disable
def _attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask, dropout: float = 0.0,
               scaling: float | None = None, cu_seq_lens_q: torch.Tensor | None = None, max_length_q: int | None = None,
               **kwargs) -> tuple[torch.Tensor, None]:
    """Attention within each sequence of a packed row: ``query``/``key``/``value`` ``[1, heads, T, d]``,
    boundaries ``cu_seq_lens_q`` ``int64 [B + 1]`` and the longest length ``max_length_q`` (named as
    transformers names FlashAttention's varlen kwargs). Returns ``([1, T, heads, d], None)``.

    Raises:
        ValueError: no boundaries (the encoder was called without :func:`unpad`'s hooks).
    """
    if cu_seq_lens_q is None:
        raise ValueError(f"attention {ATTENTION!r} needs the sequence boundaries that unpad() passes")
    if kwargs.get("unpadded_kernel") == "varlen":  # FlashAttention's varlen kernel: no attention dropout
        if dropout:
            raise ValueError("unpad(kernel='varlen'): FlashAttention's varlen kernel has no attention dropout; "
                             "set attention_probs_dropout_prob to 0 or use kernel='jagged'")
        out = varlen_attn(query[0].transpose(0, 1), key[0].transpose(0, 1), value[0].transpose(0, 1),
                          cu_seq_lens_q.int(), cu_seq_lens_q.int(), max_length_q, max_length_q, scale=scaling)
        return out.unsqueeze(0), None

    def jagged(x: torch.Tensor) -> torch.Tensor:  # [1, heads, T, d] -> [B, heads, (j), d]
        return torch.nested.nested_tensor_from_jagged(x[0].transpose(0, 1), cu_seq_lens_q,
                                                      max_seqlen=max_length_q).transpose(1, 2)

    out = F.scaled_dot_product_attention(jagged(query), jagged(key), jagged(value), dropout_p=dropout, scale=scaling)
    return out.transpose(1, 2).values().unsqueeze(0), None


AttentionInterface.register(ATTENTION, _attention)


def unpad(bert: torch.nn.Module, kernel: str = "jagged") -> Callable[[], None]:
    """Make ``bert`` (a Hugging Face ``BertModel`` without a pooler, e.g. ``BertForMaskedLM.bert``) run
    unpadded: called as before with ``input_ids``, ``attention_mask``, ``token_type_ids`` ``int64 [B, L]``,
    it returns ``last_hidden_state`` ``[B, L, H]`` computed on the ``T`` real tokens only (zeros at
    padding). Forward hooks, so the module, its parameters and its state dict are unchanged.

    Args:
        kernel: ``jagged`` (nested-tensor SDPA, any device, attention dropout) or ``varlen``
            (FlashAttention's varlen kernel: CUDA, bf16/fp16, no attention dropout).
    Returns:
        A function that restores the padded encoder (its hooks removed, its attention implementation back).
    Raises:
        ValueError: ``bert`` has a pooler (its output would be of the packed row); at the forward pass,
            ``varlen`` with attention dropout in training.
    """
    if getattr(bert, "pooler", None) is not None:
        raise ValueError("unpad: a BertModel with a pooler is not supported (its pooled output would be the packed row's)")
    original = bert.config._attn_implementation
    bert.set_attn_implementation(ATTENTION)
    real: dict[str, torch.Tensor] = {}  # the batch's mask (bool [B, L]), from the call to its output

    # The packing's shapes depend on the data: run it eagerly, so that a compiled encoder
    # (prepare_model's compile) traces only the layers, over a dynamic number of tokens.
    @torch.compiler.disable
    def before(module, args, kwargs):
        mask = kwargs["attention_mask"].bool()
        lengths = mask.sum(1)
        positions = torch.arange(mask.shape[1], device=mask.device).expand(mask.shape)
        real["mask"] = mask
        return (), {"input_ids": kwargs["input_ids"][mask][None], "token_type_ids": kwargs["token_type_ids"][mask][None],
                    "position_ids": positions[mask][None], "attention_mask": None, "unpadded_kernel": kernel,
                    "cu_seq_lens_q": F.pad(lengths.cumsum(0), (1, 0)), "max_length_q": int(lengths.max())}

    @torch.compiler.disable
    def after(module, args, kwargs, output):
        flat = output.last_hidden_state[0]
        padded = flat.new_zeros(*real["mask"].shape, flat.shape[-1])
        padded[real["mask"]] = flat
        output.last_hidden_state = padded
        return output

    hooks = [bert.register_forward_pre_hook(before, with_kwargs=True),
             bert.register_forward_hook(after, with_kwargs=True)]

    def restore() -> None:
        for hook in hooks:
            hook.remove()
        bert.set_attn_implementation(original)

    return restore
