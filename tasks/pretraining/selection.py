"""Which tokens a pretraining objective chooses to predict (the selection schemes of
``MaskingConfig.scheme``; what replaces them: :mod:`tasks.pretraining.masking`):

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

Batches follow :mod:`tasks.pretraining.masking`'s conventions (``word_ids``: ``int32 [N, L]``,
-1 on tokens never chosen).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from tasks.core.params.pretraining import MASKING_SCHEMES


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
