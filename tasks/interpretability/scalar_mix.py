"""Feature-based use of a frozen encoder: the ELMo scalar mix of all its layers.

Peters et al. 2018, "Deep contextualized word representations", §3.2 eq. (1):
``ELMo_k = γ · Σ_j s_j · h_{k,j}`` with ``s = softmax(w)`` over the L + 1 layers
(embeddings and every block) and ``w``, ``γ`` learnt with the task; the encoder
itself stays frozen (BERT's "feature-based approach", Devlin et al. 2019, §5.3).
ELMo's optional layer normalisation of each layer is left out, so ``s_j`` weigh the
layers as they are. ``w`` starts at 0 (equal weights) and ``γ`` at 1.

The task heads match the fine-tuning heads of :mod:`tasks.downstream.downstream`: the mean of
the mixed token states for classification (as ``MeanPoolClassifier``), one linear
layer per token for NER, so the comparison with full fine-tuning changes only
whether the encoder is trained.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModel
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput

from tasks.training.batching import IGNORE_INDEX


class ScalarMix(nn.Module):
    """``γ · Σ_j softmax(w)_j · h_j`` over ``num_layers`` tensors ``h_j [B, L, H]`` -> ``[B, L, H]``."""

    def __init__(self, num_layers: int):
        super().__init__()
        self.scalars = nn.Parameter(torch.zeros(num_layers))
        self.gamma = nn.Parameter(torch.ones(()))

    def forward(self, layers: tuple[torch.Tensor, ...]) -> torch.Tensor:
        weights = self.scalars.softmax(0)
        return self.gamma * sum(w * h for w, h in zip(weights, layers))

    @property
    def layer_weights(self) -> list[float]:
        """The normalised weights ``s_j``, layer 0 (embeddings) first."""
        return self.scalars.detach().softmax(0).tolist()


class _FrozenMix(nn.Module):
    """A frozen encoder (eval mode, no gradients) whose layers are mixed by a trained :class:`ScalarMix`."""

    def __init__(self, encoder: nn.Module, num_labels: int, dropout: float):
        super().__init__()
        self.encoder = encoder.requires_grad_(False).eval()
        self.mix = ScalarMix(encoder.config.num_hidden_layers + 1)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.config.hidden_size, num_labels)
        self.num_labels = num_labels

    @classmethod
    def from_pretrained(cls, path, num_labels: int, dropout: float):
        return cls(AutoModel.from_pretrained(path), num_labels, dropout)

    def train(self, mode: bool = True):
        super().train(mode)
        self.encoder.eval()  # the encoder's dropout stays off: its features are fixed
        return self

    def mixed(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        with torch.no_grad():
            layers = self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                                  output_hidden_states=True).hidden_states
        return self.mix(tuple(h.float() for h in layers))


class ScalarMixClassifier(_FrozenMix):
    """``forward(input_ids, attention_mask, token_type_ids=None, labels=None)`` on ``[B, L]`` ->
    ``logits [B, num_labels]`` from the mean mixed state of the valid tokens; cross-entropy loss."""

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None) -> SequenceClassifierOutput:
        hidden = self.mixed(input_ids, attention_mask, token_type_ids)
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        logits = self.classifier(self.dropout((hidden * mask).sum(1) / mask.sum(1).clamp(min=1)))
        loss = None if labels is None else nn.functional.cross_entropy(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


class ScalarMixTagger(_FrozenMix):
    """``forward(input_ids, attention_mask, token_type_ids=None, labels=None)`` on ``[B, L]`` ->
    ``logits [B, L, num_labels]``; cross-entropy over positions whose label is not -100."""

    def forward(self, input_ids, attention_mask, token_type_ids=None, labels=None) -> TokenClassifierOutput:
        logits = self.classifier(self.dropout(self.mixed(input_ids, attention_mask, token_type_ids)))
        loss = None if labels is None else nn.functional.cross_entropy(
            logits.float().flatten(0, 1), labels.flatten(), ignore_index=IGNORE_INDEX)
        return TokenClassifierOutput(loss=loss, logits=logits)
