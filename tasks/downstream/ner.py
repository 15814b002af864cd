"""Named-entity recognition (token classification): encoding, decoding, metrics (reading:
:mod:`tasks.downstream.conll`).

Tags are BIO (IOB2). Encoding follows the BERT paper's NER setup (Devlin et al., 2019,
§5.3): each original token is labelled on its first sub-token only; the other
sub-tokens, the special tokens and the padding get the ignore index ``-100``.
Predictions are mapped back to the original tokens, and scored at entity level
with ``seqeval`` in strict IOB2 mode (an entity counts only when its type and
both boundaries match, as in the CoNLL ``conlleval`` script).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import PreTrainedTokenizerBase

from tasks.core.errors import SourceError
from tasks.downstream.conll import NerSentence
from tasks.training.batching import IGNORE_INDEX, pad_batch, ragged


@dataclass
class EncodedNer:
    """Tokenized NER sentences, batched for a ``*ForTokenClassification`` head.

    Ragged flat layout (see :mod:`tasks.training.batching`) over sub-tokens: example ``i``
    is positions ``offsets[i]:offsets[i + 1]`` of ``ids``, ``type_ids``,
    ``labels`` and ``words``. ``words`` holds, at each first sub-token, the index
    of its original token within the sentence, and ``-1`` elsewhere (other
    sub-tokens, specials). ``token_offsets`` delimits the original tokens per
    example (``token_offsets[i + 1] - token_offsets[i]`` tokens in sentence ``i``).

    Attributes:
        stats: ``examples``, ``tokens``, ``empty_tokens`` (tokens that give no
            sub-token, e.g. whitespace), ``truncated_tokens`` (tokens cut off by
            ``max_length``) and ``truncated_examples`` (examples that lost a
            token). Both kinds of unlabelled token are left out of training and
            predicted ``O``.
    """

    ids: np.ndarray          # int32 [S] sub-token ids
    offsets: np.ndarray      # int64 [N + 1]
    type_ids: np.ndarray     # int8 [S]
    labels: np.ndarray       # int64 [S] label index at first sub-tokens, IGNORE_INDEX elsewhere
    words: np.ndarray        # int64 [S] original token index at first sub-tokens, -1 elsewhere
    token_offsets: np.ndarray  # int64 [N + 1] original tokens per example
    stats: dict

    @classmethod
    def encode(cls, sentences: list[NerSentence], tokenizer: PreTrainedTokenizerBase, labels: list[str],
               max_length: int) -> "EncodedNer":
        """Tokenize pre-split ``sentences`` (``is_split_into_words=True``), truncated to ``max_length``.

        Args:
            tokenizer: a fast tokenizer (``word_ids`` are needed).
            labels: the label list; a tag's label index is its position here.
        Raises:
            SourceError: a tag is not in ``labels`` (names the sentence id).
        """
        # split_special_tokens: a literal "[MASK]" token is word-pieced, never a special id (as in
        # tasks.corpus.tokenize); [CLS]/[SEP] are still added by id. Same ids for tokens without such strings.
        enc = tokenizer([s.tokens for s in sentences], is_split_into_words=True, truncation=True,
                        max_length=max_length, split_special_tokens=True, return_attention_mask=False)
        ids, offsets = ragged(pa.array(enc["input_ids"], pa.list_(pa.int32())))
        lengths = np.diff(offsets)
        if "token_type_ids" in enc:
            type_ids, _ = ragged(pa.array(enc["token_type_ids"], pa.list_(pa.int8())))
        else:
            type_ids = np.zeros(len(ids), dtype=np.int8)
        word_ids = pa.array([e.word_ids for e in enc.encodings], pa.list_(pa.int64())).flatten()
        words = np.asarray(pc.fill_null(word_ids, -1))  # None (special token) -> -1

        # Gold label index of every original token, flat.
        n_tokens = np.array([len(s.tokens) for s in sentences], dtype=np.int64)
        token_offsets = np.concatenate([[0], np.cumsum(n_tokens)])
        tags, inverse = np.unique(np.array([t for s in sentences for t in s.tags], dtype=str), return_inverse=True)
        index = {label: i for i, label in enumerate(labels)}
        unknown = [str(t) for t in tags if t not in index]
        if unknown:
            where = np.searchsorted(token_offsets, np.flatnonzero(tags[inverse] == unknown[0])[0], side="right") - 1
            raise SourceError(f"sentence {sentences[where].id}: tag {unknown[0]!r} is not in the label list "
                              f"{labels}")
        tag_ids = np.array([index[t] for t in tags], dtype=np.int64)[inverse]

        # First sub-token of each original token: a word position whose word differs from the previous one.
        example = np.repeat(np.arange(len(sentences)), lengths)
        previous = np.concatenate([[-1], words[:-1]])
        previous[offsets[:-1][lengths > 0]] = -1
        first = (words >= 0) & (words != previous)
        words = np.where(first, words, -1)
        label_ids = np.full(len(ids), IGNORE_INDEX, dtype=np.int64)
        label_ids[first] = tag_ids[token_offsets[example[first]] + words[first]]

        kept = np.bincount(example[first], minlength=len(sentences))
        truncated = np.zeros(len(sentences), dtype=np.int64)
        for i in np.flatnonzero(lengths >= max_length):  # tokens whose sub-tokens were all cut off
            e = enc.encodings[i]
            cut = {w for o in e.overflowing for w in o.word_ids if w is not None}
            truncated[i] = len(cut - set(e.word_ids))
        stats = {"examples": len(sentences), "tokens": int(n_tokens.sum()),
                 "empty_tokens": int((n_tokens - kept - truncated).sum()),
                 "truncated_tokens": int(truncated.sum()), "truncated_examples": int((truncated > 0).sum())}
        return cls(ids, offsets, type_ids, label_ids, words, token_offsets, stats)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        """``int64 [N]`` sub-tokens per example, specials included."""
        return np.diff(self.offsets)

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        """Examples ``index`` as ``int64 [B, L]`` tensors ``input_ids``, ``token_type_ids``,
        ``attention_mask`` and ``labels`` (``-100`` where not scored), ``L`` the longest example."""
        ids, valid = pad_batch(self.ids, self.offsets, index)
        types, _ = pad_batch(self.type_ids, self.offsets, index)
        labels, _ = pad_batch(self.labels, self.offsets, index, pad_value=IGNORE_INDEX)
        return {"input_ids": torch.from_numpy(ids.astype(np.int64)),
                "token_type_ids": torch.from_numpy(types.astype(np.int64)),
                "attention_mask": torch.from_numpy(valid.astype(np.int64)),
                "labels": torch.from_numpy(labels.astype(np.int64))}


def decode(logits: list[np.ndarray], encoded: EncodedNer, labels: list[str]) -> list[list[str]]:
    """Predicted BIO tags per original token, for every example of ``encoded`` in order.

    Each token takes the arg-max label of its first sub-token; tokens without a
    sub-token (empty or truncated) are ``O``. Tags are not repaired: a stray
    ``I-X`` is kept, and strict scoring does not count it as an entity.

    Args:
        logits: one ``float [b, L_b, len(labels)]`` array per batch of consecutive
            examples (as :func:`tasks.downstream.finetune.predict` returns them); ``L_b`` at
            least the longest example of the batch.
        labels: the label list the model was trained with.
    Raises:
        ValueError: the logits do not cover ``encoded`` or have the wrong number of labels.
    """
    rows, start = [], 0
    for block in logits:
        if block.ndim != 3 or block.shape[2] != len(labels):
            raise ValueError(f"logits of shape {block.shape} do not match [b, L, {len(labels)}]")
        lengths = encoded.lengths[start:start + len(block)]
        if len(lengths) < len(block) or (len(lengths) and lengths.max() > block.shape[1]):
            raise ValueError(f"logits of shape {block.shape} do not match examples {start}.. of the data")
        rows.append(block.argmax(-1)[np.arange(block.shape[1])[None, :] < lengths[:, None]])
        start += len(block)
    if start != len(encoded):
        raise ValueError(f"logits cover {start} examples, the data has {len(encoded)}")
    predicted = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    first = encoded.words >= 0
    example = np.repeat(np.arange(len(encoded)), encoded.lengths)
    out = np.full(encoded.token_offsets[-1], labels.index("O"), dtype=np.int64)
    out[encoded.token_offsets[example[first]] + encoded.words[first]] = predicted[first]
    names = np.asarray(labels, dtype=object)[out]
    return [names[a:b].tolist() for a, b in zip(encoded.token_offsets[:-1], encoded.token_offsets[1:])]


def ner_metrics(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Entity-level precision, recall and F1 (``seqeval``, ``mode="strict"``, ``scheme=IOB2``).

    Returns:
        ``precision``, ``recall``, ``f1`` (micro over all entities), ``support``
        (gold entities), and ``per_type``: ``{type: {precision, recall, f1, support}}``
        for every type in gold or predictions. Undefined ratios (no entity) are 0.
    Raises:
        ValueError: ``gold`` and ``pred`` differ in sentence count or sentence lengths.
    """
    from seqeval.metrics import classification_report  # imports scikit-learn: ~1 s a stage, when scoring only
    from seqeval.scheme import IOB2

    report = classification_report(gold, pred, mode="strict", scheme=IOB2, output_dict=True, zero_division=0)

    def scores(r: dict) -> dict:
        return {"precision": float(r["precision"]), "recall": float(r["recall"]), "f1": float(r["f1-score"]),
                "support": int(r["support"])}

    return {**scores(report["micro avg"]),
            "per_type": {t: scores(r) for t, r in sorted(report.items()) if not t.endswith(" avg")}}
