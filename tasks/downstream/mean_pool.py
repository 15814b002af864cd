"""A sequence classification (or regression) head on the mean of the encoder's token states.

This module imports only torch and transformers: ``save_pretrained`` copies it into every fine-tuned
classification folder and names it in the config's ``auto_map``, so that anyone loads the model with
transformers alone, without this repository::

    from transformers import AutoModelForSequenceClassification, pipeline
    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    classify = pipeline("text-classification", model=model, tokenizer=folder)

Why not BERT's head on [CLS]: MLM-only pretraining (no NSP) never trains the [CLS] state nor the pooler, so a
small model fine-tuned for a few hundred steps starts from an uninformative sentence vector; the mean of the
token states is informative from the first step (mean pooling: Reimers and Gurevych 2019, Sentence-BERT, §3
and Table 6). ``finetune.training.pooling: cls`` selects transformers' ``*ForSequenceClassification`` instead.
"""

from __future__ import annotations

import torch
from transformers import AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


class MeanPoolForSequenceClassification(PreTrainedModel):
    """Any ``AutoModel`` encoder with a dropout and a linear layer on the mean of its last hidden states over
    the non-padding tokens.

    ``forward(input_ids, attention_mask, token_type_ids=None, labels=None)`` takes ``[B, L]`` tensors and
    ``labels [B]`` (``int64`` classes, or ``float32`` scores when ``config.num_labels == 1``) and returns a
    ``SequenceClassifierOutput`` with ``logits [B, num_labels]`` and, given labels, the cross-entropy (MSE for
    regression) loss, as transformers' heads do. ``config`` is the encoder's own (a ``BertConfig``, say), with
    ``num_labels``, ``id2label`` and the dropout (``hidden_dropout_prob``) set.
    """

    config_class = PretrainedConfig
    base_model_prefix = "encoder"
    # attention is the encoder's: whichever implementation it supports, this head does
    _supports_sdpa = _supports_flash_attn = _supports_flex_attn = _supports_attention_backend = True

    def __init__(self, config: PretrainedConfig, encoder: PreTrainedModel | None = None):
        super().__init__(config)
        self.encoder = encoder if encoder is not None else AutoModel.from_config(config)
        self.dropout = torch.nn.Dropout(getattr(config, "hidden_dropout_prob", 0.1))
        self.classifier = torch.nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()  # initialises the head only: a given encoder keeps its weights

    @classmethod
    def from_encoder(cls, path, **config) -> "MeanPoolForSequenceClassification":
        """The pretrained encoder at ``path`` (a folder or hub id) with a new head; ``config``: keywords of
        ``AutoConfig.from_pretrained`` (``num_labels``, ``id2label``, ``label2id``, dropout rates)."""
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(path, **config)
        return cls(config, AutoModel.from_pretrained(path, config=config))

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                **_) -> SequenceClassifierOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = (torch.nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())
                    if self.config.num_labels == 1 else torch.nn.functional.cross_entropy(logits.float(), labels))
        return SequenceClassifierOutput(loss=loss, logits=logits)


MeanPoolForSequenceClassification.register_for_auto_class("AutoModelForSequenceClassification")
