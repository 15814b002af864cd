"""BERT encoders: configuration, devices, and the masked-position MLM loss.

Models are plain Hugging Face ``BertForMaskedLM`` objects, so every saved model
loads with ``AutoModelForMaskedLM`` / ``AutoModel`` and any fine-tuning head.
"""

from __future__ import annotations

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


def new_masked_lm(config: BertConfig, seed: int) -> BertForMaskedLM:
    """A randomly initialised ``BertForMaskedLM`` (BERT's truncated-normal-style init, std 0.02)."""
    torch.manual_seed(seed)
    return BertForMaskedLM(config)


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
