"""BERT and ELECTRA encoders: configuration, devices, the pretraining heads, their losses and FLOPs.

The encoder and its MLM head are a plain Hugging Face ``BertForMaskedLM``, so
every saved model loads with ``AutoModelForMaskedLM`` / ``AutoModel`` and any
fine-tuning head. The other pretraining heads (PerLM positions, SpanBERT's SBO, NSP/SOP) live
beside it in :class:`PretrainingModel` and are saved to their own file (:func:`save_pretrained`).
ELECTRA (:class:`ElectraPretrainingModel`) saves its discriminator as an ``ElectraForPreTraining``
(``AutoModel`` gives its encoder) and its generator beside it, in ``generator/``.

The encoder starts random (``model.preset``'s size) or from a checkpoint
(``pretrain.init_from``: :func:`resolve_init_from`, :func:`init_masked_lm`), and
:func:`prepare_model` applies the GPU options (TF32, activation checkpointing, compile).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import (AutoConfig, BertConfig, BertForMaskedLM, ElectraConfig, ElectraForMaskedLM,
                          ElectraForPreTraining)

from tasks.core import paths
from tasks.core.errors import ParamsError, SourceError
from tasks.core.io import atomic_outputs, write_json
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import ModelSize, Pretrain
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
        """Total loss (token loss + SBO loss + sentence loss, summed as in BERT and SpanBERT) and its parts.

        Args:
            batch: ``input_ids``, ``attention_mask``, ``token_type_ids`` (``int64 [B, L]``);
                ``rows``, ``cols``, ``labels`` (``int64 [M]``: the predicted positions, sorted by
                row then column, and their labels, token ids or, for PerLM, positions);
                ``sentence_labels`` (``int64 [B]``, with a sentence head); optional
                ``token_weight``, ``sentence_weight`` (float scalars) scale the mean
                losses (a micro-batch's share of the global batch under gradient accumulation).
        Returns:
            ``(loss, parts)``: parts holds ``token_loss``, ``token_correct`` (PerLM with both
            spaces: of the position head), and with a sentence head ``sentence_loss``,
            ``sentence_correct`` (detached scalars).
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
        forward)."""
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
        return 3.0 * (encoder_flops(c, lengths) + heads)


GENERATOR_DIR = "generator"  # ELECTRA's generator, beside the discriminator in the model folder


def mlm_flops(config, lengths: np.ndarray, predicted: int) -> float:
    """Model FLOPs of one MLM training step (:meth:`PretrainingModel.flops` of a plain MLM with an
    encoder of ``config``'s size): the reference of the ``mlm_flops`` budget."""
    h = config.hidden_size
    return 3.0 * (encoder_flops(config, lengths) + predicted * 2 * (h * h + h * config.vocab_size))


def replace_tokens(ids: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, sampled: torch.Tensor,
                   labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ELECTRA's discriminator input and targets: ``ids`` (``int64 [B, L]``) with the generator's
    ``sampled`` tokens at ``rows, cols`` (``int64 [M]``), and ``bool [B, L]`` True where a token was
    replaced: a sample equal to the original (``labels``) counts as original (Clark et al. 2020, §2)."""
    corrupted = ids.clone()
    corrupted[rows, cols] = sampled
    replaced = torch.zeros_like(ids, dtype=torch.bool)
    replaced[rows, cols] = sampled != labels
    return corrupted, replaced


class ElectraPretrainingModel(nn.Module):
    """ELECTRA's replaced-token detection (Clark et al. 2020, ICLR, §2; reference
    ``google-research/electra``, ``run_pretraining.py``).

    A small generator (an MLM) predicts the masked positions; its samples replace them (no
    gradient flows through the sampling); the discriminator classifies every non-padding token as
    original or replaced, a sampled token equal to the original counting as original. Loss = MLM
    loss + λ · RTD loss (binary cross-entropy averaged over the tokens). Generator and
    discriminator share the token, position and token-type embeddings (one module, §3.2).

    Args:
        discriminator: the ``ElectraForPreTraining`` that is pretrained (the saved artifact).
        generator: an ``ElectraForMaskedLM`` with the discriminator's ``embedding_size``; its
            embeddings are replaced by the discriminator's and its output layer tied to them.
        rtd_weight: λ.
    """

    def __init__(self, discriminator: ElectraForPreTraining, generator: ElectraForMaskedLM, rtd_weight: float = 50.0):
        super().__init__()
        generator.electra.embeddings = discriminator.electra.embeddings
        generator.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
        self.discriminator, self.generator, self.rtd_weight = discriminator, generator, rtd_weight
        self.full_targets = False

    @property
    def hf(self) -> ElectraForPreTraining:
        return self.discriminator

    def saved(self) -> dict[str, nn.Module]:
        return {"": self.discriminator, GENERATOR_DIR: self.generator}

    unused_parameters = False
    heldout = "rtd"  # the discriminator has no MLM head: held-out replaced-token detection

    def predictions(self, batch: dict[str, torch.Tensor]) -> int:
        """The generator's predictions of a batch: the chosen positions."""
        return len(batch["labels"])

    def losses(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """``(mlm_loss, rtd_loss, parts)``: the generator's MLM loss at the chosen positions, the
        discriminator's mean binary cross-entropy over the non-padding tokens, and the detached
        ``token_loss``, ``token_correct`` (generator), ``rtd_loss``, ``rtd_correct`` (discriminator,
        tokens classified right). Batch as :meth:`PretrainingModel.forward` (no sentence labels)."""
        ids, mask, types = batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        rows, cols, labels = batch["rows"], batch["cols"], batch["labels"]
        g = self.generator
        hidden = g.electra(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
        logits = g.generator_lm_head(g.generator_predictions(hidden[rows, cols])).float()
        mlm_loss = F.cross_entropy(logits, labels)
        with torch.no_grad():
            sampled = torch.multinomial(F.softmax(logits, dim=-1), 1).squeeze(1)
            corrupted, replaced = replace_tokens(ids, rows, cols, sampled, labels)
        scores = self.discriminator(input_ids=corrupted, attention_mask=mask, token_type_ids=types).logits
        valid = mask.bool()
        rtd_loss = F.binary_cross_entropy_with_logits(scores[valid].float(), replaced[valid].float())
        parts = {"token_loss": mlm_loss.detach(), "token_correct": (logits.argmax(-1) == labels).sum(),
                 "rtd_loss": rtd_loss.detach(), "rtd_correct": ((scores[valid] > 0) == replaced[valid]).sum()}
        return mlm_loss, rtd_loss, parts

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, parts)`` as :meth:`PretrainingModel.forward`: ``mlm_loss · token_weight +
        λ · rtd_loss · position_weight`` (the weights: the micro-batch's shares of the global batch's
        predictions and tokens under gradient accumulation, else 1)."""
        mlm_loss, rtd_loss, parts = self.losses(batch)
        rtd_loss = rtd_loss * batch.get("position_weight", 1.0)
        parts["rtd_loss"] = rtd_loss.detach()
        return mlm_loss * batch.get("token_weight", 1.0) + self.rtd_weight * rtd_loss, parts

    def extra_heads(self) -> dict[str, torch.Tensor]:
        return {}

    def flops(self, lengths: np.ndarray, predicted: int) -> float:
        """Model FLOPs of one training step, counted as :meth:`PretrainingModel.flops`: the
        discriminator's encoder and its head on every token (dense and a 1-way output), the
        generator's encoder with its embedding projection on every token, and its head (dense to
        the embedding size, then the vocabulary) at the ``predicted`` positions; times 3."""
        d, g = self.discriminator.config, self.generator.config
        tokens = float(np.sum(lengths))
        disc = encoder_flops(d, lengths) + tokens * 2 * (d.hidden_size ** 2 + d.hidden_size)
        gen = encoder_flops(g, lengths) + tokens * 2 * g.embedding_size * g.hidden_size * (
            g.embedding_size != g.hidden_size) + predicted * 2 * (g.hidden_size * g.embedding_size
                                                                  + g.embedding_size * g.vocab_size)
        return 3.0 * (disc + gen)


def encoder_flops(config: BertConfig, lengths: np.ndarray) -> float:
    """Forward FLOPs of a BERT encoder on sequences of ``lengths`` tokens (``int [B]``), counted
    from the config as MFU counts them (a multiply-add is 2 FLOPs; Kaplan et al. 2020, §2.1;
    PaLM, appendix B): per token and layer, the Q, K, V and output projections ``2·4·H²``, the FFN
    ``2·2·H·I``, and the attention scores and their weighted sum ``2·2·T·H`` over its row's ``T``
    tokens; embeddings, LayerNorm and softmax are left out.

    Returns:
        FLOPs (a float: bert-base steps exceed 2^53 only after 10^5 of them).
    """
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    lengths = np.asarray(lengths, dtype=np.float64)
    return float(layers * (lengths.sum() * 2 * (4 * h * h + 2 * h * i) + (lengths ** 2).sum() * 4 * h))


def pretraining_model(params, spec, masking, tokenizer, seed: int, init_folder: Path | None = None
                      ) -> PretrainingModel | ElectraPretrainingModel:
    """The encoder to pretrain for ``tokenizer``, with the heads of objective ``spec`` under ``masking``.

    Args:
        seed: the pretraining seed: the new encoder's weights, or a fresh head's.
        init_folder: None: a new encoder of ``params.model``'s size (:func:`new_masked_lm`,
            seeded with ``seed``); else the checkpoint folder of :func:`resolve_init_from`, loaded
            by :func:`init_masked_lm` at its own size (BERT objectives; ELECTRA starts new).
    Raises:
        SourceError, ParamsError: as :func:`init_masked_lm`.
    """
    length = params.pretraining_data.max_seq_length
    if spec.rtd is not None:
        return new_electra(params.model, spec.rtd, len(tokenizer), length, tokenizer.pad_token_id, seed)
    if init_folder is None:
        config = bert_config(params.model, len(tokenizer), length, tokenizer.pad_token_id)
        mlm = new_masked_lm(config, seed, params.model)
    else:
        mlm, _ = init_masked_lm(init_folder, tokenizer, length, seed, vocab_setting=params.tokenizer.vocab)
    return PretrainingModel(mlm, predicts_positions=masking.predicts_positions,
                            sentence_task=spec.sentence_task is not None, space=spec.permutation.space,
                            full_targets=spec.permutation.targets == "full", sbo=spec.sbo)


def electra_configs(size: ModelSize, generator_size: float, vocab_size: int, max_seq_length: int,
                    pad_token_id: int = 0) -> tuple[ElectraConfig, ElectraConfig]:
    """``(discriminator, generator)`` configurations: the discriminator of ``size`` (embeddings of
    its hidden size), the generator with ``generator_size`` of its hidden size, FFN size and heads
    (ELECTRA's ``generator_hidden_size``, §3.2; at least one head) and the same embeddings."""
    common = dict(vocab_size=vocab_size, embedding_size=size.hidden_size, num_hidden_layers=size.num_hidden_layers,
                  hidden_dropout_prob=size.hidden_dropout_prob,
                  attention_probs_dropout_prob=size.attention_probs_dropout_prob,
                  max_position_embeddings=max_seq_length, type_vocab_size=2, pad_token_id=pad_token_id)
    heads = max(1, round(size.num_attention_heads * generator_size))
    hidden = max(heads, round(size.hidden_size * generator_size / heads) * heads)
    return (ElectraConfig(hidden_size=size.hidden_size, num_attention_heads=size.num_attention_heads,
                          intermediate_size=size.intermediate_size, **common),
            ElectraConfig(hidden_size=hidden, num_attention_heads=heads,
                          intermediate_size=max(1, round(size.intermediate_size * generator_size)), **common))


def new_electra(size: ModelSize, rtd, vocab_size: int, max_seq_length: int, pad_token_id: int,
                seed: int) -> ElectraPretrainingModel:
    """A randomly initialised ELECTRA (normal, std 0.02; positions and the locality prior of both
    encoders as :func:`new_masked_lm`) with the generator of ``rtd.generator_size`` and λ = ``rtd.weight``."""
    disc_config, gen_config = electra_configs(size, rtd.generator_size, vocab_size, max_seq_length, pad_token_id)
    torch.manual_seed(seed)
    discriminator, generator = ElectraForPreTraining(disc_config), ElectraForMaskedLM(gen_config)
    init_positions(discriminator.electra.embeddings, [discriminator.electra, generator.electra],
                   amplitude=size.sinusoidal_position_amplitude, local_layers=size.local_attention_layers,
                   local_strength=size.local_attention_strength,
                   head_size=disc_config.hidden_size // disc_config.num_attention_heads)
    return ElectraPretrainingModel(discriminator, generator, rtd.weight)


# --------------------------------------------------------------------------- pretrain.init_from

# Files fetched for a hub id: config, vocabulary and weights, not the TF/Flax/ONNX copies.
HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors", "pytorch_model*.bin"]


def _hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the hub (huggingface_hub's truthy spellings)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def resolve_init_from(name: str | None, params, models: Path = paths.MODELS) -> Path | None:
    """The checkpoint folder that ``pretrain.init_from = name`` designates; the one place
    where its four kinds of name are told apart, in this order:

    1. a ``hub_models`` name or a pipeline model (``<objective>-<seed>``, ``random-<seed>``):
       ``models/<name>``, written by stage ``import_model@<name>``, ``pretrain@<name>`` or
       ``init_random@<seed>``;
    2. an existing local folder;
    3. otherwise a hub id (``owner/model``), downloaded to the Hugging Face cache (only the
       files of :data:`HUB_PATTERNS`) when ``HF_HUB_OFFLINE=0``.

    Returns:
        The folder, or None for ``name=None`` (random init).
    Raises:
        SourceError: (naming ``pretrain.init_from``) a declared model whose folder is not built
            yet (with the stage to run), a name that is none of the above while offline, or a
            hub download that fails.
    """
    if name is None:
        return None
    where = f"pretrain.init_from: {name!r}"
    procedure, seed = paths.procedure_of(name)
    if name in params.hub_models or (seed is not None and (procedure in params.objectives or procedure == "random")):
        folder = models / name
        if not folder.is_dir():  # init_from is never pretrained by this run (Params): the folder is an earlier run's
            how = (f"run `dvc repro import_model@{name}` first" if name in params.hub_models
                   else f"run `dvc repro init_random@{seed}` first" if procedure == "random"
                   else f"pretrain it first (with {procedure} in compare and {seed} in pretrain.seeds)")
            raise SourceError(f"{where}: {folder} does not exist yet; {how}")
        return folder
    if Path(name).is_dir():
        return Path(name)
    if _hub_offline():
        raise SourceError(f"{where} is not a hub_models name, a pipeline model or an existing folder; as a hub id "
                          "it needs the network: run with HF_HUB_OFFLINE=0")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id=name, allow_patterns=HUB_PATTERNS))
    except Exception as exc:  # HTTP, repository-not-found and validation errors of huggingface_hub
        line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise SourceError(f"{where}: cannot download it from the hub ({line})") from None


def init_masked_lm(folder: Path, tokenizer, max_seq_length: int, seed: int,
                   vocab_setting: str = "train") -> tuple[BertForMaskedLM, bool]:
    """A ``BertForMaskedLM`` with the weights and the size (``config.json``) of the BERT
    checkpoint in ``folder``, to continue pretraining it.

    The checkpoint's MLM head is kept when it has one. A ``BertModel`` without one (e.g.
    m3e-small) gets a fresh head: transform at BERT's init (normal, std 0.02; seeded with
    ``seed``), output bias 0, decoder tied to the word embeddings as in BERT; HFL likewise
    started Chinese BERT-wwm from BERT-base-chinese's weights (Cui et al. 2021, "Pre-Training
    with Whole Word Masking for Chinese BERT", pretraining setup).
    Loading goes through :func:`tasks.core.model_dir.load_model` (weights checked first;
    safetensors, or ``.bin`` read with ``weights_only``: unpickling runs no code).

    Args:
        tokenizer: the tokenizer that tokenized the pretraining data (``models/tokenizer``).
        max_seq_length: ``pretraining_data.max_seq_length`` (tokens).
        vocab_setting: ``tokenizer.vocab``, named in the mismatch error.
    Returns:
        ``(model, had_mlm_head)``.
    Raises:
        SourceError: no readable BERT checkpoint in ``folder`` (missing or corrupt config,
            weights or tokenizer, another model type, encoder weights missing or misshapen).
        ParamsError: its vocabulary differs from ``tokenizer``'s, or it has fewer position
            embeddings than ``max_seq_length``.
    """
    where = f"pretrain.init_from: {folder}"
    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise SourceError(f"{where}: no readable config.json ({str(exc).strip().splitlines()[0][:200]})") from None
    if config.model_type != "bert":
        raise SourceError(f"{where} is a {config.model_type!r} model; only BERT checkpoints (model_type bert) "
                          "can be continued")
    if config.max_position_embeddings < max_seq_length:
        raise ParamsError(f"{where} has {config.max_position_embeddings} position embeddings, fewer than "
                          f"pretraining_data.max_seq_length {max_seq_length}; lower it to "
                          f"{config.max_position_embeddings} or use another checkpoint")
    try:
        theirs = load_tokenizer(folder).get_vocab()
    except SourceError as exc:
        raise SourceError(f"pretrain.init_from: {exc}") from None
    if theirs != tokenizer.get_vocab() or config.vocab_size < len(tokenizer):
        raise ParamsError(f"{where} has a vocabulary of {len(theirs)} tokens that differs from the {len(tokenizer)} "
                          f"of {paths.TOKENIZER} (tokenizer.vocab: {vocab_setting}), which tokenized the pretraining "
                          "data; set tokenizer.vocab to the source holding the checkpoint's vocab.txt (bert_vocab "
                          "for Chinese BERT checkpoints) and rerun")
    torch.manual_seed(seed)  # the fresh head, if any, is drawn here: same seed, same weights
    try:
        model, info = load_model(folder, lambda loc: BertForMaskedLM.from_pretrained(loc, output_loading_info=True))
    except SourceError as exc:
        raise SourceError(f"pretrain.init_from: {exc}") from None
    missing = [k for k in info["missing_keys"] if not k.startswith("cls.")]
    if missing or info.get("mismatched_keys"):
        bad = (missing or [str(k) for k in info["mismatched_keys"]])[0]
        raise SourceError(f"{where}: the checkpoint does not fit its own config ({len(missing)} encoder weights "
                          f"missing, {len(info.get('mismatched_keys') or [])} of another shape, e.g. {bad})")
    return model, not any(k.startswith("cls.") for k in info["missing_keys"])


def prepare_model(model: PretrainingModel | ElectraPretrainingModel, cfg: Pretrain, device: torch.device
                  ) -> PretrainingModel | ElectraPretrainingModel:
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


SNAPSHOT_FILE = "snapshot.json"  # beside a snapshot's weights: when it was taken (save_snapshot)
HEADS_FILE = "pretraining_heads.safetensors"  # PerLM / SBO / NSP / SOP heads, not part of the Hugging Face model
HEADS_INFO = "pretraining.json"  # beside the weights: {"heldout": "mlm" | "rtd" | null}, the held-out measure it has


def save_snapshot(model: PretrainingModel | ElectraPretrainingModel, tokenizer, folder: Path, fraction: float,
                  at: dict) -> None:
    """Keep ``model`` as it is at ``fraction`` of its budget (:func:`save_pretrained`), atomically,
    in ``folder/<fraction>`` (a model folder like the final one) with ``snapshot.json`` (``fraction``,
    ``step``, ``tokens``, ``flops``: :data:`tasks.pretraining.pretrain.Snapshot`); its wall-clock
    ``seconds``, which differ from run to run, go beside it (``<fraction>.timing.json``), out of the
    model folder that DVC hashes."""
    at = dict(at)
    with atomic_outputs(folder / f"{fraction:g}", folder / f"{fraction:g}.timing.json") as (out, timing):
        save_pretrained(model, tokenizer, out)
        write_json(timing, {"seconds": at.pop("seconds")})
        write_json(out / SNAPSHOT_FILE, {"fraction": fraction, **at})


def save_pretrained(model: PretrainingModel | ElectraPretrainingModel, tokenizer, folder: Path) -> None:
    """The Hugging Face model(s) with ``tokenizer`` in ``folder`` (ELECTRA: the discriminator, and
    its generator in :data:`GENERATOR_DIR`), and the model's other heads (if any) beside them in
    :data:`HEADS_FILE`, and which held-out measure it has (:mod:`tasks.pretraining.heldout`) in
    :data:`HEADS_INFO`."""
    for sub, hf in model.saved().items():
        hf.save_pretrained(folder / sub)
        tokenizer.save_pretrained(folder / sub)
    write_json(folder / HEADS_INFO, {"heldout": model.heldout})
    if heads := model.extra_heads():
        save_file({k: v.contiguous() for k, v in heads.items()}, folder / HEADS_FILE)
