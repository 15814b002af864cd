"""Feature-based use of a frozen encoder: the ELMo scalar mix of all its layers.

Peters et al. 2018, "Deep contextualized word representations", §3.2 eq. (1):
``ELMo_k = γ · Σ_j s_j · h_{k,j}`` with ``s = softmax(w)`` over the L + 1 layers
(embeddings and every block) and ``w``, ``γ`` learnt with the task; the encoder
itself stays frozen (BERT's "feature-based approach", Devlin et al. 2019, §5.3).
ELMo's optional layer normalisation of each layer is left out, so ``s_j`` weigh the
layers as they are. ``w`` starts at 0 (equal weights) and ``γ`` at 1.

The task heads match the fine-tuning heads of :mod:`tasks.downstream.downstream`: the mean of
the mixed token states for classification (as ``MeanPoolForSequenceClassification``), one linear
layer per token for NER, so the comparison with full fine-tuning changes only
whether the encoder is trained. :func:`feature_based` trains and scores one task
(a Prefect task of stage ``scalar_mix``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from prefect import get_run_logger
from torch import nn
from transformers import AutoModel
from transformers.modeling_outputs import SequenceClassifierOutput, TokenClassifierOutput

from tasks.core.errors import ParamsError
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.stage import stage_task
from tasks.downstream.families import FAMILIES, load_task_data
from tasks.downstream.finetune import fit
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


HEADS = {"classification": ScalarMixClassifier, "ner": ScalarMixTagger}


@stage_task(task_run_name="{task_name}")
def feature_based(task_name: str, model_dir: Path, params, device: torch.device) -> dict:
    """The scalar-mix head of ``task_name``'s family on the frozen encoder in ``model_dir``,
    trained with the task's fine-tuning knobs, the first finetune seed and
    ``scalar_mix.learning_rate``; scores on dev and test, the layer weights and γ."""
    spec = params.task(task_name)
    family, training = FAMILIES[spec.family], params.finetune.for_task(spec)
    tokenizer = load_tokenizer(model_dir)
    tables, labels, data = load_task_data(task_name, family, ("train", "dev", "test"), tokenizer, training)
    if labels is None:
        raise ParamsError(f"scalar_mix.tasks: {task_name} is a regression task; the scalar-mix heads classify")
    seed = params.finetune.seeds[0]
    torch.manual_seed(seed)
    model = load_model(model_dir, lambda path: HEADS[spec.family].from_pretrained(path, len(labels), training.dropout))
    train = fit(model, data["train"], epochs=training.epochs, batch_size=training.batch_size,
                lr=params.scalar_mix.learning_rate, warmup_fraction=training.warmup_fraction,
                weight_decay=training.weight_decay, max_grad_norm=training.max_grad_norm, seed=seed, device=device,
                log=get_run_logger().info)
    result = {"family": spec.family, "headline": spec.metrics[0], "seed": seed, "train": train,
              "layer_weights": model.mix.layer_weights, "gamma": float(model.mix.gamma)}
    for split in ("dev", "test"):
        result[split], _ = family.evaluate(model, data[split], tables[split], training, labels, spec.metrics, device)
    get_run_logger().info(f"{task_name}: dev {result['dev']}, layer weights {result['layer_weights']}")
    return result
