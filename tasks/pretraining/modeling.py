"""BERT encoders for pretraining: configuration, the pretraining heads and their losses, which model
an objective trains, and the GPU options.

The encoder and its MLM head are a plain Hugging Face ``BertForMaskedLM``, so
every saved model loads with ``AutoModelForMaskedLM`` / ``AutoModel`` and any
fine-tuning head. The other pretraining heads (PerLM positions, SpanBERT's SBO, NSP/SOP) live
beside it in :class:`PretrainingModel` and are saved to their own file
(:func:`tasks.pretraining.saving.save_pretrained`). A kind may bring a model of its own
(:meth:`tasks.pretraining.objectives.base.Kind.model`); what the loop and the saving ask of every
pretraining model is :class:`PretrainingModule`.

The encoder starts random (``model.preset``'s size) or from a checkpoint
(``pretrain.init_from``: :mod:`tasks.pretraining.init_from`), and :func:`prepare_model` applies the
GPU options (TF32, activation checkpointing, compile).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import BertConfig, BertForMaskedLM

from tasks.core.params import ModelSize, Pretrain
from tasks.pretraining.flops import encoder_flops
from tasks.pretraining.init_from import init_masked_lm
from tasks.pretraining.initialization import init_positions
from tasks.training.device import set_tf32


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


def new_masked_lm(config: BertConfig, seed: int, size: ModelSize | None = None) -> BertForMaskedLM:
    """A randomly initialised ``BertForMaskedLM`` (BERT's init: normal, std 0.02), its position
    embeddings and bottom attention heads as ``size`` says (:func:`tasks.pretraining.initialization.init_positions`:
    sinusoids, and the locality prior with ``local_attention_layers``). Saved models are ordinary
    BERT checkpoints either way."""
    torch.manual_seed(seed)
    model = BertForMaskedLM(config)
    if size is not None:
        init_positions(model.bert.embeddings, [model.bert], amplitude=size.sinusoidal_position_amplitude,
                       local_layers=size.local_attention_layers, local_strength=size.local_attention_strength,
                       head_size=config.hidden_size // config.num_attention_heads)
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


class SpanBoundaryHead(nn.Module):
    """SBO (SpanBERT, Joshi et al. 2020, §3.2): each token ``x_i`` of a masked span ``(s, e)`` is
    predicted from the encodings of the boundary tokens ``x_{s-1}``, ``x_{e+1}`` and a relative
    position embedding ``p_{i-s+1}``: ``y_i = f(x_{s-1}, x_{e+1}, p_{i-s+1})``, ``f`` two dense
    layers with GeLU and LayerNorm; ``y_i`` is scored against the (shared) input embeddings."""

    MAX_OFFSET = 32  # relative positions beyond this share the last embedding (spans are <= 10 words)

    def __init__(self, config: BertConfig):
        super().__init__()
        h, eps = config.hidden_size, config.layer_norm_eps
        self.offsets = nn.Embedding(self.MAX_OFFSET, h)
        self.mlp = nn.Sequential(nn.Linear(3 * h, h), nn.GELU(), nn.LayerNorm(h, eps=eps),
                                 nn.Linear(h, h), nn.GELU(), nn.LayerNorm(h, eps=eps))
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, hidden: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor,
                embeddings: torch.Tensor) -> torch.Tensor:
        """``hidden [B, L, H]``, the predicted positions ``rows, cols`` (``int64 [M]``, sorted by row
        then column: a span is a run of consecutive columns), ``embeddings [V, H]`` -> logits ``[M, V]``."""
        left, right, offset = span_boundaries(rows, cols, hidden.shape[1])
        y = self.mlp(torch.cat([hidden[rows, left], hidden[rows, right],
                                self.offsets(offset.clamp(max=self.MAX_OFFSET - 1))], dim=-1))
        return F.linear(y, embeddings, self.bias)


def span_boundaries(rows: torch.Tensor, cols: torch.Tensor, width: int) -> tuple[torch.Tensor, ...]:
    """For predicted positions sorted by row then column (``int64 [M]``), each one's span: the run of
    consecutive columns it belongs to. Returns ``(left, right, offset)`` (``int64 [M]``): the
    position before the span, the one after it (clamped to ``width - 1``), and the position within
    it (0-based). Two masked spans that touch are one run."""
    new = torch.ones_like(rows, dtype=torch.bool)
    new[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1] + 1)
    last = torch.ones_like(new)
    last[:-1] = new[1:]
    run = new.cumsum(0) - 1
    start, end = cols[new][run], cols[last][run]
    return (start - 1).clamp(min=0), (end + 1).clamp(max=width - 1), cols - start


class TokenHead(Protocol):
    """A kind's own head at the chosen positions (:meth:`tasks.pretraining.objectives.base.Kind.heads`), an
    ``nn.Module`` that :class:`PretrainingModel` runs beside its MLM head, its loss added to the token loss."""

    def forward(self, picked: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``picked [M, H]`` (the encodings at the chosen positions), ``labels int64 [M]`` (their original token
        ids) -> ``(loss, parts)``: its mean loss over the M positions and the detached parts it logs."""

    def flops(self, predicted: int) -> float:
        """Forward model FLOPs at ``predicted`` chosen positions."""


class PretrainingModule(Protocol):
    """What the training loop (:mod:`tasks.pretraining.pretrain`), the sweep and the saving
    (:mod:`tasks.pretraining.saving`) ask of a pretraining model (an ``nn.Module``): :class:`PretrainingModel`,
    or a kind's own (ELECTRA's generator and discriminator)."""

    hf: nn.Module
    """The Hugging Face model whose encoder is pretrained (``hf.base_model``, ``hf.config``)."""
    heldout: str | None
    """Which held-out measure its saved model has (``pretraining.json``; None: none)."""
    unused_parameters: bool
    """A step leaves parameters without gradient (DDP must be told)."""
    full_targets: bool
    """Every token is predicted, not only the chosen ones (PerLM's full targets)."""

    def saved(self) -> dict[str, nn.Module]:
        """The Hugging Face models to save, by sub-folder (``""``: the model folder itself)."""

    def predictions(self, batch: dict[str, torch.Tensor]) -> int:
        """Token predictions of a batch (what ``token_weight`` and the log's token accuracy count)."""

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, parts)``: the step's loss and its detached parts (``token_loss``, ``token_correct``
        and those its kinds log: :class:`tasks.pretraining.objectives.base.Logged`)."""

    def extra_heads(self) -> dict[str, torch.Tensor]:
        """State of the heads not part of the Hugging Face models (saved beside them)."""

    def flops(self, lengths: np.ndarray, predicted: int) -> float:
        """Model FLOPs of one training step (:meth:`PretrainingModel.flops`)."""


class PretrainingModel(nn.Module):
    """An encoder with its MLM head (``mlm``) and, per objective, a PerLM head, an SBO head and an
    NSP/SOP head.

    Args:
        mlm: the ``BertForMaskedLM`` whose encoder is pretrained (the saved artifact).
        predicts_positions: PerLM: the labels are positions (the data's), predicted as PERT's
            ``space`` says: over the input's positions (``local``, :class:`PositionHead`), over
            the vocabulary (``global``: the original token, the MLM head) or both, summed.
        sentence_task: add a :class:`SentenceHead` (NSP or SOP).
        full_targets: PerLM: predict every non-padding token, an unchosen one's target being
            itself (PERT's "full prediction" ablation), not only the chosen ones.
        sbo: add a :class:`SpanBoundaryHead` (span masking).

    A kind's own heads (:class:`TokenHead`) join with :meth:`add_head`, after these (which keep their
    creation order, so an objective without one draws the same weights as before they existed).
    """

    def __init__(self, mlm: BertForMaskedLM, predicts_positions: bool = False, sentence_task: bool = False, *,
                 space: str = "local", full_targets: bool = False, sbo: bool = False):
        super().__init__()
        self.mlm = mlm
        self.predicts_positions, self.full_targets = predicts_positions, full_targets
        local = predicts_positions and space in ("local", "both")
        self.predicts_tokens = not predicts_positions or space in ("global", "both")
        self.position_head = PositionHead(mlm.config) if local else None
        self.sentence_head = SentenceHead(mlm.config) if sentence_task else None
        self.sbo_head = SpanBoundaryHead(mlm.config) if sbo else None
        self.heads = nn.ModuleDict()

    def add_head(self, name: str, head: nn.Module) -> None:
        """Add a kind's :class:`TokenHead` ``name`` (its state saved as ``heads.<name>.*``)."""
        self.heads[name] = head

    @property
    def hf(self) -> BertForMaskedLM:
        """The Hugging Face model that is saved (:func:`save_pretrained`)."""
        return self.mlm

    def saved(self) -> dict[str, nn.Module]:
        """The Hugging Face models to save, by sub-folder (``""``: the model folder itself)."""
        return {"": self.mlm}

    @property
    def unused_parameters(self) -> bool:
        """Whether a step leaves parameters without gradient (DDP must be told): PerLM's local-only
        prediction never uses the MLM head's transform."""
        return not self.predicts_tokens

    @property
    def heldout(self) -> str | None:
        """The held-out measure of the saved model: ``mlm``, unless PerLM's local-only prediction left
        its MLM head untrained (None)."""
        return "mlm" if self.predicts_tokens else None

    def predictions(self, batch: dict[str, torch.Tensor]) -> int:
        """Token predictions of a batch (the chosen positions, or every token under full targets)."""
        return int(batch["attention_mask"].sum()) if self.full_targets else len(batch["labels"])

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total loss (token loss + SBO loss + the kinds' heads' + sentence loss, summed as in BERT, SpanBERT and
        PLOME) and its parts.

        Args:
            batch: ``input_ids``, ``attention_mask``, ``token_type_ids`` (``int64 [B, L]``);
                ``rows``, ``cols``, ``labels`` (``int64 [M]``: the predicted positions, sorted by
                row then column, and their labels, token ids or, for PerLM, positions);
                ``sentence_labels`` (``int64 [B]``, with a sentence head); optional
                ``token_weight``, ``sentence_weight`` (float scalars) scale the mean
                losses (a micro-batch's share of the global batch under gradient accumulation).
        Returns:
            ``(loss, parts)``: parts holds ``token_loss``, ``token_correct`` (PerLM with both
            spaces: of the position head), with a sentence head ``sentence_loss``,
            ``sentence_correct``, and the parts of the kinds' heads (detached scalars).
        """
        # The vocabulary projection runs on the M chosen positions only, not all B * L
        # (BertForMaskedLM.forward projects every position: 4x slower on a small model).
        hidden = self.mlm.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               token_type_ids=batch["token_type_ids"]).last_hidden_state
        rows, cols, labels = batch["rows"], batch["cols"], batch["labels"]
        if self.full_targets:  # every token: an unchosen one stays where it is
            mask = batch["attention_mask"].bool()
            dense = torch.arange(mask.shape[1], device=mask.device).expand(mask.shape).clone()
            dense[rows, cols] = labels
            rows, cols = mask.nonzero(as_tuple=True)
            labels = dense[rows, cols]
        picked = hidden[rows, cols]
        losses, correct = [], None
        if self.position_head is not None:
            logits = self.position_head(picked, batch["attention_mask"][rows].bool())
            losses.append(F.cross_entropy(logits.float(), labels))
            correct = (logits.argmax(-1) == labels).sum()
        if self.predicts_tokens:
            # PerLM's global space: the original token of position i now stands at its label
            targets = batch["input_ids"][rows, labels] if self.predicts_positions else labels
            logits = self.mlm.cls(picked)
            losses.append(F.cross_entropy(logits.float(), targets))
            correct = (logits.argmax(-1) == targets).sum() if correct is None else correct
        loss = sum(losses)
        parts = {"token_loss": loss.detach(), "token_correct": correct}
        if self.sbo_head is not None:
            sbo_logits = self.sbo_head(hidden, rows, cols, self.mlm.bert.embeddings.word_embeddings.weight)
            loss = loss + F.cross_entropy(sbo_logits.float(), labels)
        for head in self.heads.values():  # the kinds' own (labels: the original tokens; PerLM has none)
            head_loss, head_parts = head(picked, labels)
            loss = loss + head_loss
            parts.update(head_parts)
        if "token_weight" in batch:
            loss = loss * batch["token_weight"]
        if self.sentence_head is not None:
            sentence_logits = self.sentence_head(hidden[:, 0])
            sentence_loss = F.cross_entropy(sentence_logits.float(), batch["sentence_labels"])
            if "sentence_weight" in batch:
                sentence_loss = sentence_loss * batch["sentence_weight"]
            loss = loss + sentence_loss
            parts.update(sentence_loss=sentence_loss.detach(),
                         sentence_correct=(sentence_logits.argmax(-1) == batch["sentence_labels"]).sum())
        return loss, parts

    def extra_heads(self) -> dict[str, torch.Tensor]:
        """State of the heads that are not part of the Hugging Face model (saved beside it)."""
        return {k: v for k, v in self.state_dict().items() if not k.startswith("mlm.")}

    def flops(self, lengths: np.ndarray, predicted: int) -> float:
        """Model FLOPs of one training step on sequences of ``lengths`` tokens (``int [B]``) with
        ``predicted`` chosen positions: :func:`encoder_flops`, plus the token heads at the predicted
        positions (a transform and the vocabulary, PerLM's positions, or both), SBO's two layers and
        vocabulary, and the sentence head on [CLS]; all times 3 (the backward pass costs twice the
        forward), and the kinds' heads' own count (:meth:`TokenHead.flops`)."""
        c, h = self.mlm.config, self.mlm.config.hidden_size
        predicted = int(np.sum(lengths)) if self.full_targets else predicted
        heads = 0
        if self.position_head is not None:
            heads += predicted * 2 * (h * h + h * c.max_position_embeddings)
        if self.predicts_tokens:
            heads += predicted * 2 * (h * h + h * c.vocab_size)
        if self.sbo_head is not None:
            heads += predicted * 2 * (3 * h * h + h * h + h * c.vocab_size)
        if self.sentence_head is not None:
            heads += len(lengths) * 2 * (h * h + 2 * h)
        heads += sum(head.flops(predicted) for head in self.heads.values())
        return 3.0 * (encoder_flops(c, lengths) + heads)


def pretraining_model(params, tokenizer, seed: int, init_folder: Path | None = None, **heads) -> PretrainingModel:
    """The encoder to pretrain for ``tokenizer`` with an objective's ``heads`` (keyword arguments of
    :class:`PretrainingModel`, from its kinds: :meth:`tasks.pretraining.objectives.PretrainingObjective.model`).

    Args:
        seed: the pretraining seed: the new encoder's weights, or a fresh head's.
        init_folder: None: a new encoder of ``params.model``'s size (:func:`new_masked_lm`,
            seeded with ``seed``); else the checkpoint folder of :func:`resolve_init_from`, loaded
            by :func:`init_masked_lm` at its own size.
    Raises:
        SourceError, ParamsError: as :func:`init_masked_lm`.
    """
    length = params.pretraining_data.max_seq_length
    if init_folder is None:
        config = bert_config(params.model, len(tokenizer), length, tokenizer.pad_token_id)
        mlm = new_masked_lm(config, seed, params.model)
    else:
        mlm, _ = init_masked_lm(init_folder, tokenizer, length, seed, vocab_setting=params.tokenizer.vocab)
    return PretrainingModel(mlm, **heads)


def prepare_model(model: PretrainingModule, cfg: Pretrain, device: torch.device) -> PretrainingModule:
    """Apply ``cfg``'s GPU options to ``model`` before :func:`tasks.pretraining.pretrain.train`.

    * ``tf32`` (CUDA only): :func:`tasks.training.device.set_tf32`;
    * ``activation_checkpointing``: Hugging Face's ``activation_checkpointing_enable``, non-reentrant
      (each layer's activations are recomputed in the backward pass: memory of one layer
      instead of all, about a third more compute; Chen et al. 2016);
    * ``compile``: ``torch.compile`` of the encoder in place (``nn.Module.compile``), so the
      state dict, the checkpoints and the saved model keep their names.

    With the defaults (everything but the CUDA-only switches off) a CPU model is untouched.
    ``bf16`` and ``fused_adamw`` act inside ``train`` (``autocast``, ``optimizer_for``). Returns ``model``.
    """
    set_tf32(device, cfg.tf32)
    for hf in model.saved().values():
        if cfg.activation_checkpointing:
            hf.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        if cfg.compile:
            hf.base_model.compile()
    return model


