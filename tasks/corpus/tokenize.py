"""Tokenization: build the WordPiece tokenizer and turn segmented sentences into ids.

The tokenizer is either the 21,128-entry Chinese BERT vocabulary (layout of
``bert-base-chinese``: [PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102, [MASK]=103)
or a WordPiece vocabulary trained on the corpus with Hugging Face
``tokenizers``. Both are saved in Hugging Face format.

Output (``data/tokens/sentences.parquet``), one row per sentence:
``doc_id``, ``sent_id``, ``input_ids`` (``list<int32>``, no special tokens) and
``word_ids`` (``list<int32>``: for each token, the index of its jieba word in
the sentence).

Corpus text never yields a special-token id: a literal ``[MASK]``, ``[SEP]``...
in the text (a corpus about NLP has them) is word-pieced like any other text,
``[`` ``mask`` ``]``, by tokenizing with ``split_special_tokens=True``.

The stage streams: the vocabulary is trained from an iterator over the segmented
file, and the sentences are tokenized shard by shard by :func:`tokens_step` with
:mod:`tasks.core.shards` (resumable, out of core, on any executor).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from transformers import BertTokenizerFast, PreTrainedTokenizerBase

from tasks.core.errors import SourceError
from tasks.core.io import stream_parquet
from tasks.core.paths import source_file
from tasks.core.shards import ShardedStep, iter_column
from tasks.core.stage import stage_task
from tasks.corpus.wordpiece import train_wordpiece, word_counts

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def load_vocab_tokenizer(vocab_file: Path) -> BertTokenizerFast:
    """A BERT WordPiece tokenizer (lower-casing, CJK characters split) over ``vocab_file``.

    Raises:
        SourceError: the vocabulary lacks a special token.
    """
    vocab = {}
    # split on "\n" only: str.splitlines() also splits on U+2028, U+0085... which are vocab entries.
    lines = Path(vocab_file).read_text(encoding="utf-8").removesuffix("\n").split("\n")
    for i, token in enumerate(lines):
        vocab.setdefault(token.rstrip("\r"), i)
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise SourceError(f"{vocab_file}: vocabulary lacks special token(s) {', '.join(missing)}")
    # transformers 5 ignores ``vocab_file=``; the vocabulary must be passed as ``vocab``.
    return BertTokenizerFast(vocab=vocab, do_lower_case=True, tokenize_chinese_chars=True)


def train_tokenizer(texts: Iterable[str], vocab_size: int, min_frequency: int) -> BertTokenizerFast:
    """A BERT tokenizer over a WordPiece vocabulary trained on ``texts`` (any iterable, read
    once: memory holds the word counts, not the corpus)
    (:func:`tasks.corpus.wordpiece.train_wordpiece`, deterministic), special tokens first."""
    tokens = train_wordpiece(word_counts(texts), vocab_size, min_frequency, SPECIAL_TOKENS)
    return BertTokenizerFast(vocab={t: i for i, t in enumerate(tokens)}, do_lower_case=True,
                             tokenize_chinese_chars=True)


def random_token_ids(tokenizer: PreTrainedTokenizerBase) -> np.ndarray:
    """Ids a random replacement may take: every id except special and ``[unusedN]`` tokens."""
    vocab = tokenizer.get_vocab()
    skip = set(tokenizer.all_special_ids)
    return np.array(sorted(i for t, i in vocab.items() if i not in skip and not t.startswith("[unused")),
                    dtype=np.int32)


def tokenize_words(tokenizer: PreTrainedTokenizerBase, texts: list[str], words: list[list[str]],
                   batch_size: int = 10_000) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Token ids of each text and, per token, the index of the word it starts in.

    A token's word is the word containing the token's first character (from the
    tokenizer's character offsets and the cumulative word lengths). Special-token
    strings in the text are split like ordinary text (module docstring), so no id
    is a special token's except [UNK] for pieces outside the vocabulary. WordPiece
    never crosses a jieba word in Chinese text; where a token spans two words
    (e.g. ``"98年"`` segmented as ``98 | 年`` is two tokens anyway), the first wins.

    Returns:
        ``(input_ids, word_ids)``: two lists of ``int32`` arrays, one per text.
    """
    all_ids, all_words = [], []
    for start in range(0, len(texts), batch_size):
        batch = texts[start:start + batch_size]
        enc = tokenizer(batch, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True,
                        return_attention_mask=False, return_token_type_ids=False)
        for ids, offsets, ws in zip(enc["input_ids"], enc["offset_mapping"], words[start:start + batch_size]):
            ends = np.cumsum([len(w) for w in ws])
            starts = np.array([o[0] for o in offsets], dtype=np.int64)
            all_ids.append(np.asarray(ids, dtype=np.int32))
            all_words.append(np.searchsorted(ends, starts, side="right").astype(np.int32))
    return all_ids, all_words


def tokens_shard(rows: pa.Table, index: int, tokenizer: PreTrainedTokenizerBase) -> pa.Table:
    """``doc_id, sent_id, input_ids, word_ids`` of a shard of the segmented sentence table
    (the sharded step of :func:`tokens_step`; ``index`` is unused: nothing is drawn at random)."""
    ids, word_ids = tokenize_words(tokenizer, rows.column("text").to_pylist(), rows.column("words").to_pylist())
    return pa.table({
        "doc_id": rows.column("doc_id"),
        "sent_id": rows.column("sent_id"),
        "input_ids": pa.array(ids, type=pa.list_(pa.int32())),
        "word_ids": pa.array(word_ids, type=pa.list_(pa.int32())),
    })


def tokens_step(tokenizer: PreTrainedTokenizerBase, segmented_schema: pa.Schema) -> ShardedStep:
    """The ``tokenize`` stage's sharded step over the segmented sentences (schema: module docstring)."""
    schema = pa.schema([pa.field("doc_id", segmented_schema.field("doc_id").type),
                        pa.field("sent_id", segmented_schema.field("sent_id").type),
                        pa.field("input_ids", pa.list_(pa.int32())), pa.field("word_ids", pa.list_(pa.int32()))])
    # the whole tokenizer (vocabulary, normaliser, options) decides the ids
    key = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest()
    return ShardedStep(name="tokenize", fn=tokens_shard, params=tokenizer, key=key, schema=schema,
                       columns=("doc_id", "sent_id", "text", "words"))


def vocab_stats(tokenizer: PreTrainedTokenizerBase, tokens: str | Path, n_chars: int,
                batch_rows: int = 1 << 14) -> dict:
    """[UNK] rate and tokens per character of a tokenized corpus file, streaming over its ``input_ids``.

    Raises:
        SourceError: the file holds no token.
    """
    n_tokens = n_unk = 0
    for batch in stream_parquet(tokens).iter_batches(batch_size=batch_rows, columns=["input_ids"]):
        flat = np.asarray(batch.column(0).flatten())
        n_tokens += int(flat.size)
        n_unk += int((flat == tokenizer.unk_token_id).sum())
    if n_tokens == 0:
        raise SourceError("tokenizer produced no tokens for the corpus")
    return {"vocab_size": len(tokenizer), "tokens": n_tokens, "unk_rate": n_unk / n_tokens,
            "tokens_per_char": n_tokens / max(n_chars, 1)}


def count_chars(path: str | Path, column: str = "text", batch_rows: int = 1 << 14) -> int:
    """Characters (code points) of a text column of a Parquet file, streaming."""
    return sum(pc.sum(pc.utf8_length(batch.column(0))).as_py() or 0
               for batch in stream_parquet(path).iter_batches(batch_size=batch_rows, columns=[column]))


@stage_task
def build_tokenizer(params, segmented: Path, raw_dir: Path) -> BertTokenizerFast:
    """The tokenizer of the ``tokenizer`` params: WordPiece trained on the ``text`` column of
    the Parquet file ``segmented``, streamed (``vocab: train``), or the ``vocab.txt`` of the
    acquired source ``vocab`` under ``raw_dir``."""
    if params.vocab == "train":
        return train_tokenizer(iter_column(segmented, "text"), params.train_vocab_size, params.train_min_frequency)
    return load_vocab_tokenizer(source_file(raw_dir, params.vocab, "vocab.txt"))
