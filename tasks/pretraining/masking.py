"""Token-level pretraining corruption: which tokens to choose and what to put there.

Selection schemes (``MaskingConfig.scheme``):

* ``mlm``: single tokens (BERT, Devlin et al. 2019, §3.1; Google's
  ``create_pretraining_data.py``, ``create_masked_lm_predictions``);
* ``wwm``: whole words (whole word masking as released by Google 2019-05-31,
  applied to Chinese with a word segmenter in Chinese BERT-wwm, Cui et al. 2021,
  IEEE/ACM TASLP, §3.1);
* ``ngram``: N-gram masking over whole words, spans of 1..4 words drawn with
  probabilities 40/30/20/10% (MacBERT, Cui et al. 2020, Findings of EMNLP, §3.2;
  PERT, Cui et al. 2022, arXiv:2203.06906, §3.2); the span sampling follows
  ALBERT's reference ``create_pretraining_data.py`` (Lan et al. 2020, §4.1);
* ``span``: span masking (SpanBERT, Joshi et al. 2020, TACL, §3.1): span lengths in whole words
  from a geometric distribution (p = 0.2) clipped at 10, spans start at a word, and the 80/10/10
  replacement is decided per span.

Replacements (``MaskingConfig`` shares, ``keep`` is the rest):

* ``mask``/``random``/``keep``: BERT's 80/10/10 (and the MacBERT ablations of
  Table 8: *all mask* 90/0/10, *random replace* 0/90/10, *partial mask* 80/10/10);
* ``similar``: Mac, MLM as correction (MacBERT §3.2): a chosen word becomes a
  similar word (:class:`SimilarWords`), never [MASK];
* ``permute``: PerLM (PERT §3.2): the chosen tokens are shuffled among
  themselves (within the row, or within a word, N-gram or sentence: PERT's
  granularity ablation, §6) and the labels are positions, not token ids.

Every function works on whole batches at once (NumPy, and compiled loops over
rows: no Python loop per example), takes an explicit :class:`numpy.random.Generator`,
and is called both when static pretraining data is written and at batch time (dynamic masking, RoBERTa,
Liu et al. 2019, §4.1), so the two paths cannot drift apart.

Conventions for a batch of ``N`` packed sequences of length ``L``:

* ``input_ids``: ``int32 [N, L]`` token ids, padding included.
* ``word_ids``: ``int32 [N, L]``, the index of the word each token belongs to,
  dense and non-decreasing within a row; ``-1`` for tokens that must never be
  chosen ([CLS], [SEP], [PAD]).
* ``lex_ids``: ``int32 [N, L]``, the :class:`SimilarWords` entry of each token's
  word, ``-1`` when the word has none (only Mac needs it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tasks.core.params.pretraining import MASKING_SCHEMES, Objective, PretrainingData
from tasks.corpus.similar_words import SimilarWords
from tasks.training.batching import IGNORE_INDEX

GRANULARITIES = ("none", "word", "ngram", "sentence")  # PerLM: params Permutation.granularity


@dataclass(frozen=True)
class MaskingConfig:
    """What to choose and how to corrupt it.

    Attributes:
        scheme: ``"mlm"`` (single tokens), ``"wwm"`` (whole words) or ``"ngram"``
            (spans of whole words).
        masked_lm_prob: share of the maskable tokens of a sequence to choose (0.15).
        max_predictions: cap on chosen tokens per sequence (BERT: 20 for length 128).
        mask, random, similar, permute: shares of the chosen units that become
            [MASK], a random token, a similar word, or take part in the PerLM
            permutation; the rest stay as they are (``keep``: given, the five shares
            must sum to 1; None: whatever the four leave).
        ngram_probs: probability of a span of 1, 2, ... words (``ngram`` only).
        span_p, span_max_words: the clipped geometric law of span lengths in words (``span`` only).
        granularity: PerLM: which permuted tokens may trade places: ``none`` (any of the row),
            ``word``, ``ngram`` (one chosen span) or ``sentence`` (needs the sentence starts).

    Raises:
        ValueError: an unknown scheme, shares outside [0, 1] or summing above 1,
            ``permute`` mixed with a token replacement (the labels would be
            positions for some tokens and ids for others), ``similar`` with
            single-token units, or N-gram probabilities that do not sum to 1.
    """

    scheme: str = "mlm"
    masked_lm_prob: float = 0.15
    max_predictions: int = 20
    mask: float = 0.8
    random: float = 0.1
    similar: float = 0.0
    permute: float = 0.0
    ngram_probs: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    keep: float | None = None
    span_p: float = 0.2
    span_max_words: int = 10
    granularity: str = "none"

    def __post_init__(self) -> None:
        if self.scheme not in MASKING_SCHEMES:
            raise ValueError(f"unknown masking scheme {self.scheme!r}; known: {', '.join(MASKING_SCHEMES)}")
        shares = (self.mask, self.random, self.similar, self.permute)
        if min(shares) < 0 or sum(shares) > 1 + 1e-9:
            raise ValueError("mask, random, similar and permute must be probabilities summing to at most 1")
        if self.keep is not None and not math.isclose(sum(shares) + self.keep, 1.0, abs_tol=1e-9):
            raise ValueError(f"mask + random + similar + permute + keep must sum to 1, got {sum(shares) + self.keep:g}")
        if self.permute and (self.mask or self.random or self.similar):
            raise ValueError("permute (PerLM) cannot be combined with mask, random or similar: "
                             "PerLM predicts positions, the others predict tokens")
        if self.similar and self.scheme in ("mlm", "span"):
            raise ValueError("similar-word replacement (Mac) needs word units: use scheme wwm or ngram")
        if not 0 < self.span_p < 1 or self.span_max_words < 1:
            raise ValueError(f"span_p must be in (0, 1) and span_max_words >= 1, got {self.span_p}, "
                             f"{self.span_max_words}")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"unknown granularity {self.granularity!r}; known: {', '.join(GRANULARITIES)}")
        if not self.ngram_probs or min(self.ngram_probs) < 0 or not math.isclose(sum(self.ngram_probs), 1.0,
                                                                                 abs_tol=1e-6):
            raise ValueError(f"ngram_probs must be non-negative and sum to 1, got {list(self.ngram_probs)}")

    @property
    def predicts_positions(self) -> bool:
        """PerLM: labels are input positions (a classifier over positions), not vocabulary ids."""
        return self.permute > 0

    @property
    def span_probs(self) -> tuple[float, ...]:
        """P(span of 1, 2, ... ``span_max_words`` words): Geometric(``span_p``) renormalised over
        them (SpanBERT's ``len_distrib``)."""
        p = self.span_p * (1 - self.span_p) ** np.arange(self.span_max_words)
        return tuple((p / p.sum()).tolist())


def prediction_budget(n_maskable: np.ndarray, masked_lm_prob: float, max_predictions: int) -> np.ndarray:
    """Tokens to choose per sequence: ``min(max_predictions, max(1, round(n * p)))``, 0 if ``n == 0``.

    As in BERT's ``create_masked_lm_predictions``, except that ``n`` counts only
    maskable tokens (not [CLS]/[SEP]), so the rate is exactly ``p`` of the tokens
    that can be chosen. Rounds half to even, like Python's ``round``.

    Args:
        n_maskable: ``int [N]`` maskable tokens per sequence.
    Returns:
        ``int64 [N]``.
    """
    n = np.asarray(n_maskable, dtype=np.int64)
    budget = np.clip(np.rint(n * masked_lm_prob).astype(np.int64), 1, max_predictions)
    return np.where(n > 0, np.minimum(budget, n), 0)


def _count_at_most(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.searchsorted(edges, values, side="right")`` (``int64``, the shape of ``values``) for a
    handful of sorted ``edges``: one comparison per edge, about 10x faster at these sizes."""
    count = np.zeros(values.shape, dtype=np.int64)
    for edge in edges:
        count += values >= edge
    return count


# --------------------------------------------------------------------------- per-row kernels
# The selection rules are greedy loops over each row's units in a random order: compiled
# (Numba, ``cache=True``: once per machine, into ``__pycache__``) they run each row in about a
# microsecond, where vectorised NumPy needed a dozen passes over the batch. The kernels draw
# nothing: the functions that call them draw every uniform with NumPy's Generator, in the order
# and number the vectorised NumPy implementation drew them, so the data artifacts stayed the same
# bytes. They compare and count, never accumulate floats: the same result on every machine.


@njit(cache=True)
def _sort_stable(keys: np.ndarray, values: np.ndarray, start: int, end: int) -> None:
    """Sort ``keys[start:end]`` in place, moving ``values`` along; equal keys keep their order
    (an insertion sort: the runs sorted here are a few dozen entries)."""
    for a in range(start + 1, end):
        k, v, i = keys[a], values[a], a
        while i > start and keys[i - 1] > k:
            keys[i], values[i] = keys[i - 1], values[i - 1]
            i -= 1
        keys[i], values[i] = k, v


@njit(cache=True)
def _unit_lengths(unit_ids: np.ndarray, lengths: np.ndarray) -> int:
    """Tokens per unit of one row (``unit_ids``: ``int [L]``) into ``lengths`` (``int64 [U]``);
    returns the row's tokens in units."""
    lengths[:] = 0
    n_tokens = 0
    for u in unit_ids:
        if u >= 0:
            lengths[u] += 1
            n_tokens += 1
    return n_tokens


@njit(cache=True)
def _visits_between(priority: np.ndarray, lengths: np.ndarray, lo: float, hi: float,
                    units: np.ndarray, keys: np.ndarray) -> int:
    """The present units (``lengths > 0``) of one row with ``lo <= priority < hi``, into
    ``units[:c]`` by increasing priority, ties by index; returns ``c``.

    Visiting a row window by window of priority gives its whole visit order, but a row stops
    after about ``budget / tokens`` of its units: only those are ever sorted. The filter is
    branch-free (a random predicate mispredicts); the insertion sort is stable, and the units
    enter it in index order."""
    c = 0
    for u in range(len(lengths)):
        k = priority[u]
        units[c] = u
        keys[c] = k
        c += (lo <= k) & (k < hi) & (lengths[u] > 0)
    _sort_stable(keys, units, 0, c)
    return c


@njit(cache=True)
def _window(budget: int, n_tokens: int) -> float:
    """Width of a priority window: about the share of the row's units that its budget takes."""
    return min(1.0, budget / max(n_tokens, 1) + 0.02)


@njit(cache=True)
def _select_units_rows(unit_ids: np.ndarray, budget: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """:func:`select_units` given the draws: ``priority`` ``float64 [N, U]``, one per unit."""
    n_rows, width = unit_ids.shape
    n_units = priority.shape[1]
    chosen = np.zeros((n_rows, width), dtype=np.bool_)
    lengths, units = np.empty(n_units, np.int64), np.empty(n_units, np.int64)
    keys, taken = np.empty(n_units), np.empty(n_units, np.bool_)
    for r in range(n_rows):
        if budget[r] <= 0:
            continue
        n_tokens = _unit_lengths(unit_ids[r], lengths)
        step = _window(budget[r], n_tokens)
        taken[:] = False
        total, lo = 0, 0.0
        while total < budget[r] and lo < 1.0:
            for q in range(_visits_between(priority[r], lengths, lo, lo + step, units, keys)):
                u = units[q]
                if total + lengths[u] <= budget[r]:  # BERT: skip a unit that would overflow
                    taken[u] = True
                    total += lengths[u]
                    if total == budget[r]:
                        break
            lo += step
        for i in range(width):
            chosen[r, i] = unit_ids[r, i] >= 0 and taken[unit_ids[r, i]]
    return chosen


@njit(cache=True)
def _row_words(word_ids: np.ndarray, lengths: np.ndarray, cum: np.ndarray) -> tuple[int, int]:
    """Tokens per word of one row into ``lengths``, ``cum[w]`` the tokens of words ``0..w-1``;
    returns the row's tokens in words and its words."""
    n_tokens = _unit_lengths(word_ids, lengths)
    n_words = 0
    for w in range(len(lengths)):
        cum[w + 1] = cum[w] + lengths[w]
        n_words += lengths[w] > 0
    return n_tokens, n_words


@njit(cache=True)
def _span_of_tokens(word_ids: np.ndarray, start_of_word: np.ndarray, out: np.ndarray) -> None:
    """Each token's span (the first word of the span covering its word, -1 if none) into ``out``."""
    for i in range(len(word_ids)):
        out[i] = start_of_word[word_ids[i]] if word_ids[i] >= 0 else -1


@njit(cache=True)
def _select_spans_rows(word_ids: np.ndarray, budget: np.ndarray, priority: np.ndarray, draws: np.ndarray,
                       cdf: np.ndarray, spanbert: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`select_ngrams` (ALBERT's rules) or, with ``spanbert``, :func:`select_spans` given the
    draws: ``priority`` and ``draws`` ``float64 [N, W]`` (one per word, and one per visit for its span
    length), ``cdf`` the cumulative length probabilities. Returns :class:`Spans`' ``start``, ``words``
    and ``drawn``."""
    n_rows, width = word_ids.shape
    n_words_max, k = priority.shape[1], len(cdf)
    start_of = np.full((n_rows, width), -1, dtype=np.int32)
    lengths, units = np.empty(n_words_max, np.int64), np.empty(n_words_max, np.int64)
    keys, start_of_word = np.empty(n_words_max), np.empty(n_words_max, np.int32)
    cum = np.zeros(n_words_max + 1, np.int64)
    spans, drawn = np.empty(max(budget.sum(), 0), np.int64), np.empty(max(budget.sum(), 0), np.int64)
    n_spans = 0
    for r in range(n_rows):
        if budget[r] <= 0:
            continue
        n_tokens, n_words = _row_words(word_ids[r], lengths, cum)
        step = _window(budget[r], n_tokens)
        start_of_word[:] = -1
        total, visit, lo = 0, 0, 0.0
        while total < budget[r] and lo < 1.0:
            for q in range(_visits_between(priority[r], lengths, lo, lo + step, units, keys)):
                start = units[q]
                if spanbert:
                    if start_of_word[start] >= 0:
                        continue  # an anchor already masked is drawn again
                    v = draws[r, visit]
                    visit += 1
                    wanted = 1
                    for e in range(k - 1):
                        wanted += v >= cdf[e]
                    n = 0  # the span ends at the row's end, at a chosen word or at the budget
                    while n < wanted and start + n < n_words and start_of_word[start + n] < 0 \
                            and cum[start + n + 1] - cum[start] <= budget[r] - total:
                        n += 1
                    free = n > 0
                else:
                    room = min(max(n_words - start, 1), k)  # the longest span inside the row
                    v = draws[r, visit] * cdf[room - 1]  # renormalised over 1..room
                    visit += 1
                    n = 1
                    for e in range(k):
                        n += v >= cdf[e]
                    n = min(n, room)
                    wanted = n
                    while n > 0 and cum[start + n] - cum[start] > budget[r] - total:
                        n -= 1  # shorten to fit the budget
                    free = n > 0
                    for w in range(start, start + n):
                        free &= start_of_word[w] < 0  # skip a span over a chosen word
                if free:
                    start_of_word[start:start + n] = start
                    total += cum[start + n] - cum[start]
                    spans[n_spans], drawn[n_spans] = n, wanted
                    n_spans += 1
                    if total == budget[r]:
                        break
            lo += step
        _span_of_tokens(word_ids[r], start_of_word, start_of[r])
    return start_of, spans[:n_spans], drawn[:n_spans]


@njit(cache=True)
def _shuffle_within_rows(rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.lexsort((keys, rows))`` for non-decreasing ``rows`` (``int64 [M]``) and ``keys``
    (``float64 [M]``): each row's entries ordered by key, ties by index (a stable insertion sort
    per row; a row holds at most its prediction budget)."""
    order, keys = np.arange(len(rows)), keys.copy()
    start = 0
    for end in range(1, len(rows) + 1):
        if end == len(rows) or rows[end] != rows[start]:
            _sort_stable(keys, order, start, end)
            start = end
    return order


# --------------------------------------------------------------------------- selection


def select_units(unit_ids: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Choose whole units in random order until each row's token budget is met.

    A unit is a run of tokens sharing a unit id (a word for WWM, one token for
    MLM). Units are visited in a uniformly random order; a unit is taken if it
    still fits in the budget and skipped otherwise, so a chosen set never splits
    a unit and never exceeds the budget (BERT's ``create_masked_lm_predictions``:
    ``if len(masked_lms) + len(index_set) > num_to_predict: continue``). On
    single-token units (MLM) this is ``budget`` tokens uniformly without replacement.

    The visit order is by increasing priority, one uniform draw per unit (ties by
    index); a compiled loop per row (:func:`_select_units_rows`).

    Args:
        unit_ids: ``int [N, L]`` unit index per token (0..U-1 per row), -1 = never chosen.
        budget: ``int [N]`` tokens to choose per row.
        rng: the random generator (consumes ``N * U`` uniforms, ``U`` = the largest unit id + 1).
    Returns:
        ``bool [N, L]``: the chosen tokens.
    """
    n_units = int(unit_ids.max(initial=-1)) + 1
    if n_units == 0:
        return np.zeros(unit_ids.shape, dtype=bool)
    return _select_units_rows(unit_ids, np.asarray(budget, dtype=np.int64), rng.random((len(unit_ids), n_units)))


@dataclass(frozen=True)
class Spans:
    """Spans of whole words chosen by :func:`select_ngrams` or :func:`select_spans`.

    Attributes:
        start: ``int32 [N, L]`` the first word of the span covering each token, -1 for tokens
            not chosen (a span's id: increasing along the row).
        words: ``int64 [S]`` each span's length in words, row by row.
        drawn: ``int64 [S]`` the length drawn for it, before the budget (and, for ``span``, the
            row's end or a chosen word) cut it.
    """

    start: np.ndarray
    words: np.ndarray
    drawn: np.ndarray

    @property
    def chosen(self) -> np.ndarray:
        """``bool [N, L]``: the chosen tokens."""
        return self.start >= 0


def select_ngrams(word_ids: np.ndarray, budget: np.ndarray, rng: np.random.Generator,
                  ngram_probs: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)) -> Spans:
    """N-gram masking: choose spans of 1..K consecutive whole words until the token budget is met.

    The rules of ALBERT's ``create_masked_lm_predictions`` (the reference for
    N-gram masking that MacBERT and PERT cite), per row:

    1. visit the words in a uniformly random order as span starts;
    2. draw the span length ``n`` in words with probability ``ngram_probs[n-1]``,
       renormalised over the lengths that fit before the row's last word;
    3. while the span would exceed the budget, shorten it (``n -= 1``); if even
       one word does not fit, skip this start;
    4. skip the span if any of its words is already chosen; otherwise choose it.

    A compiled loop per row (:func:`_select_spans_rows`); the ``j``-th visit of a row
    draws its length from the ``j``-th of the row's length draws.

    Args:
        word_ids: ``int [N, L]`` dense word index per token, -1 = never chosen.
        budget: ``int [N]`` tokens to choose per row.
        ngram_probs: probability of a span of 1, 2, ... K words.
        rng: the random generator (consumes ``2 * N * W`` uniforms, ``W`` = the largest word id + 1).
    Returns:
        :class:`Spans`.
    """
    return _spans(word_ids, budget, rng, ngram_probs, spanbert=False)


def select_spans(word_ids: np.ndarray, budget: np.ndarray, rng: np.random.Generator,
                 span_probs: tuple[float, ...]) -> Spans:
    """Span masking (SpanBERT, Joshi et al. 2020, §3.1; reference ``PairWithSpanMaskingScheme``):
    per row, until the token budget is met, pick an anchor word uniformly among those not yet
    chosen, draw a length ``n`` in words with probability ``span_probs[n-1]`` (SpanBERT: the
    geometric law clipped at 10, :attr:`MaskingConfig.span_probs`), and choose the words from the
    anchor on, whole, until ``n`` are taken, the row ends, the next word is already chosen or
    would exceed the budget (an anchor word that alone exceeds it is skipped, as BERT skips).

    The drawn lengths of the spans taken follow ``span_probs`` exactly (the draw comes after the
    anchor is accepted); the lengths taken are at most those drawn. A compiled loop per row
    (:func:`_select_spans_rows`) with the draws of :func:`select_ngrams`.

    Args:
        word_ids, budget, rng: as :func:`select_ngrams`.
    Returns:
        :class:`Spans`.
    """
    return _spans(word_ids, budget, rng, span_probs, spanbert=True)


def _spans(word_ids: np.ndarray, budget: np.ndarray, rng: np.random.Generator, probs: tuple[float, ...],
           spanbert: bool) -> Spans:
    n_words_max = int(word_ids.max(initial=-1)) + 1
    if n_words_max == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Spans(np.full(word_ids.shape, -1, dtype=np.int32), empty, empty)
    priority = rng.random((len(word_ids), n_words_max))
    draws = rng.random((len(word_ids), n_words_max))
    return Spans(*_select_spans_rows(word_ids, np.asarray(budget, dtype=np.int64), priority, draws,
                                     np.cumsum(probs, dtype=np.float64), spanbert))


def unit_ids_for(scheme: str, word_ids: np.ndarray) -> np.ndarray:
    """Unit ids of a masking scheme: each maskable token alone (MLM) or its word (WWM, N-gram, span)."""
    if scheme in ("wwm", "ngram", "span"):
        return word_ids
    if scheme == "mlm":
        positions = np.broadcast_to(np.arange(word_ids.shape[1], dtype=word_ids.dtype), word_ids.shape)
        return np.where(word_ids >= 0, positions, -1)
    raise ValueError(f"unknown masking scheme {scheme!r}; known: {', '.join(MASKING_SCHEMES)}")


@dataclass
class MaskedBatch:
    """A corrupted batch.

    Attributes:
        input_ids: ``int32 [N, L]`` corrupted input.
        chosen: ``bool [N, L]`` the positions to predict.
        labels: ``int32 [N, L]`` at chosen positions the original token id (or,
            for PerLM, the position where the original token now stands); -100 elsewhere.
        counts: how the chosen tokens were corrupted (``chosen``, ``mask``,
            ``random``, ``similar``, ``permute``, ``keep``; tokens) and how often a
            similar word was used (``similar_words``) or was unavailable and a
            random word used instead (``similar_fallback_*``; words).
    """

    input_ids: np.ndarray
    chosen: np.ndarray
    labels: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)


@njit(cache=True)
def _word_occurrences(positions: np.ndarray, unit_ids: np.ndarray, width: int) -> tuple[np.ndarray, ...]:
    """The chosen words as occurrences: ``first, length`` (``int64 [K]`` each: flat position of the
    first token, tokens) and, per chosen token (``positions``: flat, increasing; ``unit_ids``:
    flat ``int [N * L]``), its occurrence."""
    first, length = np.empty(len(positions), np.int64), np.zeros(len(positions), np.int64)
    occurrence = np.empty(len(positions), np.int64)
    k = -1
    for q in range(len(positions)):
        p = positions[q]
        if q == 0 or p // width != positions[q - 1] // width or unit_ids[p] != unit_ids[positions[q - 1]]:
            k += 1
            first[k] = p
        length[k] += 1
        occurrence[q] = k
    return first[:k + 1], length[:k + 1], occurrence


@njit(cache=True)
def _similar_words(occ_first: np.ndarray, occ_len: np.ndarray, lex_ids: np.ndarray, draws: np.ndarray,
                   lengths: np.ndarray, offsets: np.ndarray, starts: np.ndarray,
                   tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A similar word for each occurrence, the candidate ``floor(draw * candidates)`` of its
    :class:`SimilarWords` entry (``lex_ids``: flat ``int [N * L]``). Returns ``ok`` (``bool [K]``),
    the replacement tokens of the ``ok`` occurrences in order (``int32``), and the fallbacks
    (``int64 [3]``: not in the lexicon, no candidate, length mismatch)."""
    ok = np.zeros(len(occ_first), np.bool_)
    values = np.empty(occ_len.sum(), np.int32)
    fallbacks = np.zeros(3, np.int64)
    m = 0
    for i in range(len(occ_first)):
        e = lex_ids[occ_first[i]]
        if e < 0:
            fallbacks[0] += 1
            continue
        n_cand = offsets[e + 1] - offsets[e]
        if n_cand == 0:
            fallbacks[1] += 1
        elif lengths[e] != occ_len[i]:  # a word cut at a sequence boundary is shorter
            fallbacks[2] += 1
        else:
            start = starts[offsets[e] + min(np.int64(draws[i] * n_cand), n_cand - 1)]
            values[m:m + occ_len[i]] = tokens[start:start + occ_len[i]]
            m += occ_len[i]
            ok[i] = True
    return ok, values[:m], fallbacks


@njit(cache=True)
def _replace(original: np.ndarray, positions: np.ndarray, kind: np.ndarray, mask_token_id: int,
             random_values: np.ndarray, similar_values: np.ndarray, width: int,
             label_positions: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(out, labels)``, flat ``int32``: ``original`` with each chosen position replaced as its
    ``kind`` says, [MASK] (0), the next random token (1), the next similar-word token (2), itself
    (3 permute, 4 keep); labelled with its original token or (PerLM) its own position."""
    out = original.astype(np.int32)
    labels = np.full(len(original), IGNORE_INDEX, np.int32)
    n_random = n_similar = 0
    for q in range(len(positions)):
        p = positions[q]
        labels[p] = p % width if label_positions else original[p]
        if kind[q] == 0:
            out[p] = mask_token_id
        elif kind[q] == 1:
            out[p] = random_values[n_random]
            n_random += 1
        elif kind[q] == 2:
            out[p] = similar_values[n_similar]
            n_similar += 1
    return out, labels


@njit(cache=True)
def _permute(out: np.ndarray, labels: np.ndarray, original: np.ndarray, permuted: np.ndarray, groups: np.ndarray,
             keys: np.ndarray, width: int) -> None:
    """PerLM, in place: the tokens at ``permuted`` (flat, increasing) shuffled within each group
    (``groups``: ``int64 [M]``, non-decreasing: the row, or the row's word, span or sentence),
    ``permuted[j]`` taking the token from the ``j``-th of its group's positions ordered by ``keys``;
    the label at a token's old position is its new one."""
    source = permuted[_shuffle_within_rows(groups, keys)]
    for j in range(len(permuted)):
        out[permuted[j]] = original[source[j]]
        labels[source[j]] = permuted[j] % width


def corrupt(input_ids: np.ndarray, chosen: np.ndarray, unit_ids: np.ndarray, config: MaskingConfig,
            rng: np.random.Generator, *, mask_token_id: int, random_token_ids: np.ndarray,
            lex_ids: np.ndarray | None = None, similar: SimilarWords | None = None,
            groups: np.ndarray | None = None) -> MaskedBatch:
    """Corrupt the chosen tokens and build the labels.

    One uniform draw per decision unit picks, in this order, [MASK] (``mask``),
    a random token (``random``), a similar word (``similar``), the PerLM
    permutation (``permute``), or keep. The decision unit is the token (BERT §3.1
    and appendix A.1; Google's code decides per token also under WWM), except
    with ``similar > 0``, where it is the chosen word (MacBERT §3.2: "we will find
    similar words individually" for each word of an N-gram), and under span masking,
    where it is the span (SpanBERT §3.1: "all the tokens in a span are replaced with
    [MASK] or sampled tokens"); a random replacement then gives every token of the
    unit a random token.

    Mac: a word takes a uniformly drawn candidate of :class:`SimilarWords` of the
    same token length; a word with no candidate (not in the lexicon, no
    same-length neighbour, or cut by a sequence boundary) gets a random word
    instead, as MacBERT specifies ("in rare cases, when there is no similar word,
    we will degrade to use random word replacement"); each fallback is counted.

    PerLM (PERT §3.2): the tokens drawn for ``permute`` are shuffled among
    themselves within their row, or within their group (a uniformly random
    permutation of those positions); at every chosen position ``i`` the label is
    the position where the original token ``input_ids[i]`` now stands (``i`` itself
    for kept tokens and for a token alone in its group).

    Args:
        input_ids: ``int [N, L]``; chosen: ``bool [N, L]``; unit_ids: ``int [N, L]``
            (the decision unit of each chosen token: its word with ``similar``, its span under
            span masking; unused otherwise).
        groups: PerLM: ``int [N, L]``, non-decreasing along each row: permuted tokens trade places
            only within a group (a word, a span, a sentence); None: within the row.
        random_token_ids: ``int [V']`` ids a random replacement is drawn from, uniformly.
        lex_ids, similar: the lexicon entry of every token's word and the
            similar words (required when ``config.similar > 0``).
    Returns:
        :class:`MaskedBatch`.
    Raises:
        ValueError: ``config.similar > 0`` without ``similar``.
    """
    # flat positions: 1-D gathers and scatters are several times faster than (rows, cols) pairs
    width = input_ids.shape[1]
    original = input_ids.reshape(-1)
    positions = np.flatnonzero(chosen)
    edges = np.cumsum([config.mask, config.random, config.similar, config.permute])
    values = np.zeros(0, dtype=np.int32)
    if not config.similar and config.scheme != "span":  # 0 mask, 1 random, 2 similar, 3 permute, 4 keep
        kind = _count_at_most(edges, rng.random(len(positions)))
    elif not config.similar:  # one decision per span
        _, _, occurrence = _word_occurrences(positions, unit_ids.reshape(-1), width)
        kind = _count_at_most(edges, rng.random(int(occurrence[-1]) + 1 if len(occurrence) else 0))[occurrence]
    else:
        if similar is None:
            raise ValueError("similar-word replacement (Mac) needs a SimilarWords lexicon")
        occ_first, occ_len, occurrence = _word_occurrences(positions, unit_ids.reshape(-1), width)
        word_kind = _count_at_most(edges, rng.random(len(occ_first)))
        to_similar = np.flatnonzero(word_kind == 2)
        lex = lex_ids.reshape(-1) if lex_ids is not None else np.full(original.size, -1)
        ok, values, fallbacks = _similar_words(occ_first[to_similar], occ_len[to_similar], lex,
                                               rng.random(len(to_similar)), similar.lengths, similar.offsets,
                                               similar.starts, similar.tokens)
        word_kind[to_similar[~ok]] = 1  # no similar word: a random word instead
        kind = word_kind[occurrence]
    counts = {"chosen": len(positions)}
    if config.similar:
        counts.update(zip(("similar_fallback_not_in_lexicon", "similar_fallback_no_candidate",
                           "similar_fallback_length_mismatch"), fallbacks.tolist()), similar_words=int(ok.sum()))
    counts.update(zip(("mask", "random", "similar", "permute", "keep"), np.bincount(kind, minlength=5).tolist()))
    random_values = random_token_ids[rng.integers(0, len(random_token_ids), counts["random"])]
    out, labels = _replace(original, positions, kind, mask_token_id, random_values, values, width,
                           config.predicts_positions)
    if config.permute:
        permuted = positions[kind == 3]
        row = (permuted // width).astype(np.int64)
        group = row if groups is None else row * (int(groups.max(initial=0)) + 2) + groups.reshape(-1)[permuted] + 1
        _permute(out, labels, original, permuted, group, rng.random(len(permuted)), width)
    return MaskedBatch(out.reshape(input_ids.shape), chosen, labels.reshape(input_ids.shape), counts)


def mask_batch(input_ids: np.ndarray, word_ids: np.ndarray, config: MaskingConfig, rng: np.random.Generator, *,
               mask_token_id: int, random_token_ids: np.ndarray, lex_ids: np.ndarray | None = None,
               similar: SimilarWords | None = None, sentence_ids: np.ndarray | None = None) -> MaskedBatch:
    """Choose ``config.masked_lm_prob`` of the maskable tokens of every sequence with the
    configured scheme, then corrupt them (:func:`corrupt`).

    Args:
        input_ids: ``int [N, L]`` original token ids.
        word_ids: ``int [N, L]`` word index per token, -1 for special and padding tokens.
        lex_ids, similar: for Mac only (see :func:`corrupt`).
        sentence_ids: ``int [N, L]`` sentence index per token, non-decreasing along each row (PerLM
            with ``granularity`` sentence only).
    Returns:
        A :class:`MaskedBatch`.
    Raises:
        ValueError: granularity ``sentence`` without ``sentence_ids``.
    """
    budget = prediction_budget(np.count_nonzero(word_ids >= 0, axis=1), config.masked_lm_prob,
                               config.max_predictions)
    spans = None
    if config.scheme == "ngram":
        spans = select_ngrams(word_ids, budget, rng, config.ngram_probs)
    elif config.scheme == "span":
        spans = select_spans(word_ids, budget, rng, config.span_probs)
    chosen = spans.chosen if spans is not None else select_units(unit_ids_for(config.scheme, word_ids), budget, rng)
    units = spans.start if config.scheme == "span" else word_ids
    groups = None
    if config.permute and config.granularity != "none":
        if config.granularity == "sentence" and sentence_ids is None:
            raise ValueError("PerLM granularity sentence needs the sentence ids of the rows")
        groups = {"word": word_ids, "sentence": sentence_ids,
                  "ngram": spans.start if spans is not None else unit_ids_for(config.scheme, word_ids)
                  }[config.granularity]
    return corrupt(input_ids, chosen, units, config, rng, mask_token_id=mask_token_id,
                   random_token_ids=random_token_ids, lex_ids=lex_ids, similar=similar, groups=groups)


def masking_config(objective: Objective, data: PretrainingData) -> MaskingConfig:
    """The :class:`tasks.pretraining.masking.MaskingConfig` of an objective under the data params."""
    r = objective.replacement
    return MaskingConfig(scheme=objective.masking, masked_lm_prob=data.masked_lm_prob,
                         max_predictions=data.max_predictions_per_seq, mask=r.mask, random=r.random,
                         similar=r.similar, permute=r.permute, keep=r.keep,
                         ngram_probs=tuple(data.ngram_probabilities), span_p=data.span_p,
                         span_max_words=data.span_max_words, granularity=objective.permutation.granularity)
