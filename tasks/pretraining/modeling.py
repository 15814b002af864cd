"""BERT encoders: configuration, devices, the pretraining heads and their losses.

The encoder and its MLM head are a plain Hugging Face ``BertForMaskedLM``, so
every saved model loads with ``AutoModelForMaskedLM`` / ``AutoModel`` and any
fine-tuning head. The other pretraining heads (PerLM positions, NSP/SOP) live
beside it in :class:`PretrainingModel` and are saved to their own file (:func:`save_pretrained`).

The encoder starts random (``model.preset``'s size) or from a checkpoint
(``pretrain.init_from``: :func:`resolve_init_from`, :func:`init_masked_lm`), and
:func:`prepare_model` applies the GPU options (TF32, activation checkpointing, compile).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn
from transformers import AutoConfig, BertConfig, BertForMaskedLM

from tasks.core import paths
from tasks.core.errors import ParamsError, SourceError
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import ModelSize, Pretrain
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
                ``sentence_labels`` (``int64 [B]``, with a sentence head); optional
                ``token_weight``, ``sentence_weight`` (float scalars) scale the two mean
                losses (a micro-batch's share of the global batch under gradient accumulation).
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


def pretraining_model(params, spec, masking, tokenizer, init_folder: Path | None = None) -> PretrainingModel:
    """The encoder to pretrain for ``tokenizer``, with the heads of objective ``spec`` under ``masking``.

    Args:
        init_folder: None: a new encoder of ``params.model``'s size (:func:`new_masked_lm`,
            seeded with ``params.seed``); else the checkpoint folder of
            :func:`resolve_init_from`, loaded by :func:`init_masked_lm` at its own size.
    Raises:
        SourceError, ParamsError: as :func:`init_masked_lm`.
    """
    if init_folder is None:
        config = bert_config(params.model, len(tokenizer), params.pretraining_data.max_seq_length,
                             tokenizer.pad_token_id)
        mlm = new_masked_lm(config, params.seed, params.model.sinusoidal_position_amplitude)
    else:
        mlm, _ = init_masked_lm(init_folder, tokenizer, params.pretraining_data.max_seq_length, params.seed,
                                vocab_setting=params.tokenizer.vocab)
    return PretrainingModel(mlm, predicts_positions=masking.predicts_positions,
                            sentence_task=spec.sentence_task is not None)


# --------------------------------------------------------------------------- pretrain.init_from

# Files fetched for a hub id: config, vocabulary and weights, not the TF/Flax/ONNX copies.
HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors", "pytorch_model*.bin"]


def _hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the hub (huggingface_hub's truthy spellings)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def resolve_init_from(name: str | None, params, models: Path = paths.MODELS) -> Path | None:
    """The checkpoint folder that ``pretrain.init_from = name`` designates; the one place
    where its four kinds of name are told apart, in this order:

    1. a ``hub_models`` name or a pipeline model (an objective, ``random``): ``models/<name>``,
       written by stage ``import_model@<name>`` or ``pretrain@<name>`` / ``init_random``;
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
    if name in params.hub_models or name in params.objectives or name == "random":
        folder = models / name
        if not folder.is_dir():  # init_from is never in compare (Params): an objective's folder is an earlier run's
            how = (f"run `dvc repro import_model@{name}` first" if name in params.hub_models
                   else "run `dvc repro init_random` first" if name == "random"
                   else f"pretrain it first (with {name} in compare: `dvc repro pretrain@{name}`)")
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


def prepare_model(model: PretrainingModel, cfg: Pretrain, device: torch.device) -> PretrainingModel:
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
    if cfg.activation_checkpointing:
        model.mlm.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    if cfg.compile:
        model.mlm.bert.compile()
    return model


HEADS_FILE = "pretraining_heads.safetensors"  # PerLM / NSP / SOP heads, not part of the Hugging Face model


def save_pretrained(model: PretrainingModel, tokenizer, folder: Path) -> None:
    """The Hugging Face masked LM and ``tokenizer`` in ``folder``, and the model's other heads
    (if any) beside them in :data:`HEADS_FILE`."""
    model.mlm.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if heads := model.extra_heads():
        save_file({k: v.contiguous() for k, v in heads.items()}, folder / HEADS_FILE)
