"""Checked loading of a Hugging Face model folder (``models/<name>``, or a model to import), and saving one.

Transformers accepts broken folders silently or fails deep inside a library: a folder
without tokenizer files gives a 5-token tokenizer that maps every character to [UNK]
(fine-tuning then "succeeds" at majority-class accuracy), and a truncated
``model.safetensors`` raises an error that names no file. These loaders turn both into
a :class:`~tasks.core.errors.SourceError` naming the folder or file.

A location that is not an existing folder is passed on as a hub id.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Callable, TypeVar

from safetensors import SafetensorError, safe_open
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from tasks.core.errors import SourceError

# Files from which AutoTokenizer builds a real vocabulary (WordPiece, BPE, SentencePiece).
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "tokenizer.model", "spiece.model",
                   "sentencepiece.bpe.model")
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")
MIN_VOCAB = 100  # transformers' fallback tokenizer holds only the special tokens
WEIGHT_ERRORS = (OSError, ValueError, RuntimeError, SafetensorError, pickle.UnpicklingError)

M = TypeVar("M")


def _line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, with its type: stage errors are one line."""
    text = str(exc).strip().split("\n", 1)[0]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_tokenizer(location: str | os.PathLike) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained(location)``, refused unless it holds a real vocabulary.

    Raises:
        SourceError: (naming ``location``) the folder has none of :data:`TOKENIZER_FILES`, the
            tokenizer cannot be loaded, or it has fewer than :data:`MIN_VOCAB` tokens.
    """
    folder = Path(location)
    if folder.is_dir() and not any((folder / name).is_file() for name in TOKENIZER_FILES):
        raise SourceError(f"{folder}: no tokenizer file in the model folder (expected one of "
                          f"{', '.join(TOKENIZER_FILES)})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
    except Exception as exc:  # tokenizers raises bare Exception on a corrupt vocabulary
        raise SourceError(f"{location}: cannot load the tokenizer: {_line(exc)}") from None
    if len(tokenizer) < MIN_VOCAB:
        raise SourceError(f"{location}: the tokenizer has only {len(tokenizer)} tokens (at least {MIN_VOCAB} "
                          "expected); its vocabulary file is missing or nearly empty")
    return tokenizer


def check_weights(folder: str | os.PathLike) -> None:
    """Check that ``folder`` holds weights and that every ``*.safetensors`` file in it is
    complete (its header parses and covers the file). Reads only the headers.

    Raises:
        SourceError: no file of :data:`WEIGHT_FILES` (naming the folder), or a truncated or
            corrupt safetensors file (naming the file).
    """
    folder = Path(folder)
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise SourceError(f"{folder}: no weights in the model folder (expected one of {', '.join(WEIGHT_FILES)})")
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(file, "pt"):
                pass
        except (SafetensorError, OSError) as exc:
            raise SourceError(f"{file}: truncated or corrupt weights file ({_line(exc)})") from None


def load_model(location: str | os.PathLike, load: Callable[[str | os.PathLike], M] = AutoModel.from_pretrained) -> M:
    """``load(location)`` (by default ``AutoModel.from_pretrained``; pass a task head's loader
    to add one), after :func:`check_weights` when ``location`` is a folder.

    Raises:
        SourceError: (naming ``location`` or the weights file) missing, truncated or corrupt
            weights, or a config or weights file transformers cannot read.
    """
    if Path(location).is_dir():
        check_weights(location)
    try:
        return load(location)
    except WEIGHT_ERRORS as exc:
        raise SourceError(f"{location}: cannot load the model: {_line(exc)}") from None


def save_model_folder(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, folder: str | os.PathLike) -> None:
    """``model`` and ``tokenizer`` as one Hugging Face model folder, the tokenizer's ``model_max_length`` set to
    the model's ``max_position_embeddings``: unset, transformers takes it as unbounded, and a pipeline input
    longer than the position embeddings fails inside the model (a tensor-size ``RuntimeError``) instead of
    being truncated."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit:
        tokenizer.model_max_length = limit
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
