"""BERT encoders: configuration, devices, and the masked-position MLM loss.

Models are plain Hugging Face ``BertForMaskedLM`` objects, so every saved model
loads with ``AutoModelForMaskedLM`` / ``AutoModel`` and any fine-tuning head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

from tasks.params import ModelSize


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` picks CUDA when present, else CPU; any torch device string is accepted."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device):
    """bf16 autocast on CUDA (mixed precision); a no-op on CPU, where fp32 is faster for small models."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def bert_config(size: ModelSize, vocab_size: int, max_seq_length: int, pad_token_id: int = 0) -> BertConfig:
    """A BERT configuration of the given size for a vocabulary and sequence length."""
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=size.hidden_size,
        num_hidden_layers=size.num_hidden_layers,
        num_attention_heads=size.num_attention_heads,
        intermediate_size=size.intermediate_size,
        hidden_dropout_prob=size.hidden_dropout_prob,
        attention_probs_dropout_prob=size.attention_probs_dropout_prob,
        max_position_embeddings=max_seq_length,
        type_vocab_size=2,
        pad_token_id=pad_token_id,
    )


def sinusoidal_positions(length: int, dim: int) -> torch.Tensor:
    """``[length, dim]`` sinusoidal position encodings of amplitude 1 (Vaswani et al. 2017, §3.5)."""
    position = torch.arange(length, dtype=torch.float32).unsqueeze(1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * freq)
    table[:, 1::2] = torch.cos(position * freq)[:, : dim // 2]
    return table


def new_masked_lm(config: BertConfig, seed: int, sinusoidal_position_amplitude: float = 0.0) -> BertForMaskedLM:
    """A randomly initialised ``BertForMaskedLM`` (BERT's init: normal, std 0.02).

    With ``sinusoidal_position_amplitude > 0`` the (still trainable) position
    embeddings start as sinusoids of that amplitude instead. A tiny model trained
    for minutes on a CPU spends its first millions of tokens on a plateau near
    the unigram loss while it learns positions; starting from sinusoids of
    amplitude 0.03 (about the scale of the other embeddings) leaves it sooner
    (measured here: loss 5.26 vs 5.57 after 6M tokens, 2 layers x 128), and 0.3
    is worse than both. Saved models are ordinary BERT checkpoints either way.
    """
    torch.manual_seed(seed)
    model = BertForMaskedLM(config)
    if sinusoidal_position_amplitude:
        table = model.bert.embeddings.position_embeddings.weight
        with torch.no_grad():
            table.copy_(sinusoidal_position_amplitude * sinusoidal_positions(*table.shape))
    return model


def masked_lm_loss(model: BertForMaskedLM, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   rows: torch.Tensor, cols: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy of the MLM head at the masked positions only.

    The vocabulary projection runs on the ``M`` masked positions instead of all
    ``B * L`` positions (``BertForMaskedLM.forward`` projects every position; on
    a small model that dominates the cost, 4x slower here).

    Args:
        input_ids, attention_mask: ``int64 [B, L]``.
        rows, cols: ``int64 [M]`` batch row and position of each masked token.
        labels: ``int64 [M]`` original token ids.
    Returns:
        ``(loss, correct)``: mean loss (scalar) and the number of correct argmax predictions (scalar).
    """
    hidden = model.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    logits = model.cls(hidden[rows, cols])
    loss = F.cross_entropy(logits.float(), labels)
    correct = (logits.argmax(-1) == labels).sum()
    return loss, correct
