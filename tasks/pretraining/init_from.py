"""Where ``pretrain.init_from`` points (a pipeline or ``hub_models`` model, a local folder, a hub id)
and the BERT checkpoint loaded from it to continue pretraining, as HFL started Chinese BERT-wwm from
BERT-base-chinese (Cui et al. 2021)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoConfig, BertForMaskedLM

from tasks.core import paths
from tasks.core.errors import ParamsError, SourceError
from tasks.core.model_dir import load_model, load_tokenizer

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
