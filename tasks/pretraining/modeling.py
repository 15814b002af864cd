"""BERT encoders: configuration, devices, the pretraining heads and their losses.

The encoder and its MLM head are a plain Hugging Face ``BertForMaskedLM``, so
every saved model loads with ``AutoModelForMaskedLM`` / ``AutoModel`` and any
fine-tuning head. The other pretraining heads (PerLM positions, NSP/SOP) live
beside it in :class:`PretrainingModel` and are saved to their own file (:func:`save_pretrained`).
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import BertConfig, BertForMaskedLM

from tasks.core.params import ModelSize


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


class PositionHead(nn.Module):
    """PerLM head (PERT, Cui et al. 2022, §3.2): a classifier over input positions.

    BERT's MLM transform (dense, GELU, LayerNorm) followed by a projection to
    ``max_position_embeddings`` classes, as PERT replaces the vocabulary
    prediction space by the sequence positions; logits of padding positions are
    set to ``-inf`` so the model chooses among the tokens of its own input.
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.GELU(),
                                       nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps))
        self.decoder = nn.Linear(config.hidden_size, config.max_position_embeddings)

    def forward(self, hidden: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``hidden [M, H]``, ``valid bool [M, W]`` (the positions of each prediction's row) -> logits ``[M, W]``."""
        logits = self.decoder(self.transform(hidden))[:, : valid.shape[1]]
        return logits.masked_fill(~valid, float("-inf"))


class SentenceHead(nn.Module):
    """NSP / SOP head: BERT's pooler (dense + tanh on [CLS]) and a 2-way classifier (Devlin et al. 2019, §3.1)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.pooler = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh())
        self.classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, cls_hidden: torch.Tensor) -> torch.Tensor:
        """``[B, H]`` -> logits ``[B, 2]``."""
        return self.classifier(self.pooler(cls_hidden))


class PretrainingModel(nn.Module):
    """An encoder with its MLM head (``mlm``) and, per objective, a PerLM head and an NSP/SOP head.

    Args:
        mlm: the ``BertForMaskedLM`` whose encoder is pretrained (the saved artifact).
        predicts_positions: PerLM: token predictions are positions (:class:`PositionHead`).
        sentence_task: add a :class:`SentenceHead` (NSP or SOP).
    """

    def __init__(self, mlm: BertForMaskedLM, predicts_positions: bool = False, sentence_task: bool = False):
        super().__init__()
        self.mlm = mlm
        self.position_head = PositionHead(mlm.config) if predicts_positions else None
        self.sentence_head = SentenceHead(mlm.config) if sentence_task else None

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total loss (token loss + sentence loss, summed as in BERT) and its parts.

        Args:
            batch: ``input_ids``, ``attention_mask``, ``token_type_ids`` (``int64 [B, L]``);
                ``rows``, ``cols``, ``labels`` (``int64 [M]``: the predicted positions
                and their labels, token ids or, for PerLM, positions);
                ``sentence_labels`` (``int64 [B]``, with a sentence head).
        Returns:
            ``(loss, parts)``: parts holds ``token_loss``, ``token_correct``, and with a
            sentence head ``sentence_loss``, ``sentence_correct`` (detached scalars).
        """
        # The vocabulary projection runs on the M chosen positions only, not all B * L
        # (BertForMaskedLM.forward projects every position: 4x slower on a small model).
        hidden = self.mlm.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               token_type_ids=batch["token_type_ids"]).last_hidden_state
        rows, cols, labels = batch["rows"], batch["cols"], batch["labels"]
        picked = hidden[rows, cols]
        if self.position_head is not None:
            logits = self.position_head(picked, batch["attention_mask"][rows].bool())
        else:
            logits = self.mlm.cls(picked)
        loss = F.cross_entropy(logits.float(), labels)
        parts = {"token_loss": loss.detach(), "token_correct": (logits.argmax(-1) == labels).sum()}
        if self.sentence_head is not None:
            sentence_logits = self.sentence_head(hidden[:, 0])
            sentence_loss = F.cross_entropy(sentence_logits.float(), batch["sentence_labels"])
            loss = loss + sentence_loss
            parts.update(sentence_loss=sentence_loss.detach(),
                         sentence_correct=(sentence_logits.argmax(-1) == batch["sentence_labels"]).sum())
        return loss, parts

    def extra_heads(self) -> dict[str, torch.Tensor]:
        """State of the heads that are not part of the Hugging Face model (saved beside it)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("mlm.")}


def pretraining_model(params, spec, masking, tokenizer) -> PretrainingModel:
    """A new encoder of ``params.model``'s size for ``tokenizer`` (:func:`new_masked_lm`, seeded
    with ``params.seed``) with the heads of objective ``spec`` under ``masking``."""
    config = bert_config(params.model, len(tokenizer), params.pretraining_data.max_seq_length,
                         tokenizer.pad_token_id)
    return PretrainingModel(new_masked_lm(config, params.seed, params.model.sinusoidal_position_amplitude),
                            predicts_positions=masking.predicts_positions,
                            sentence_task=spec.sentence_task is not None)


HEADS_FILE = "pretraining_heads.safetensors"  # PerLM / NSP / SOP heads, not part of the Hugging Face model


def save_pretrained(model: PretrainingModel, tokenizer, folder: Path) -> None:
    """The Hugging Face masked LM and ``tokenizer`` in ``folder``, and the model's other heads
    (if any) beside them in :data:`HEADS_FILE`."""
    model.mlm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if heads := model.extra_heads():
        save_file({k: v.contiguous() for k, v in heads.items()}, folder / HEADS_FILE)
