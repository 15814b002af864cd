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
  ALBERT's reference ``create_pretraining_data.py`` (Lan et al. 2020, §4.1).

Replacements (``MaskingConfig`` shares, ``keep`` is the rest):

* ``mask``/``random``/``keep``: BERT's 80/10/10 (and the MacBERT ablations of
  Table 8: *all mask* 90/0/10, *random replace* 0/90/10, *partial mask* 80/10/10);
* ``similar``: Mac, MLM as correction (MacBERT §3.2): a chosen word becomes a
  similar word (:class:`SimilarWords`), never [MASK];
* ``permute``: PerLM (PERT §3.2): the chosen tokens are shuffled among
  themselves and the labels are positions, not token ids.

Every function works on whole batches at once (NumPy, no per-example Python
loop), takes an explicit :class:`numpy.random.Generator`, and is called both when
static pretraining data is written and at batch time (dynamic masking, RoBERTa,
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
from functools import partial

import numpy as np

from tasks.corpus.similar_words import SimilarWords
from tasks.training.batching import IGNORE_INDEX

MASKING_SCHEMES = ("mlm", "wwm", "ngram")


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
            permutation; the rest (``keep``) stay as they are.
        ngram_probs: probability of a span of 1, 2, ... words (``ngram`` only).

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

    def __post_init__(self) -> None:
        if self.scheme not in MASKING_SCHEMES:
            raise ValueError(f"unknown masking scheme {self.scheme!r}; known: {', '.join(MASKING_SCHEMES)}")
        shares = (self.mask, self.random, self.similar, self.permute)
        if min(shares) < 0 or sum(shares) > 1 + 1e-9:
            raise ValueError("mask, random, similar and permute must be probabilities summing to at most 1")
        if self.permute and (self.mask or self.random or self.similar):
            raise ValueError("permute (PerLM) cannot be combined with mask, random or similar: "
                             "PerLM predicts positions, the others predict tokens")
        if self.similar and self.scheme == "mlm":
            raise ValueError("similar-word replacement (Mac) needs word units: use scheme wwm or ngram")
        if not self.ngram_probs or min(self.ngram_probs) < 0 or not math.isclose(sum(self.ngram_probs), 1.0,
                                                                                 abs_tol=1e-6):
            raise ValueError(f"ngram_probs must be non-negative and sum to 1, got {list(self.ngram_probs)}")

    @property
    def predicts_positions(self) -> bool:
        """PerLM: labels are input positions (a classifier over positions), not vocabulary ids."""
        return self.permute > 0


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


def _unit_lengths(unit_ids: np.ndarray, n_units: int) -> np.ndarray:
    """``int64 [N, n_units]`` tokens per unit (0 for absent units)."""
    # one bincount over (row, unit + 1): column 0 counts the unchosen tokens (-1), then is dropped
    n_rows, width = unit_ids.shape[0], n_units + 1
    flat = unit_ids + np.arange(1, n_rows * width, width)[:, None]
    return np.bincount(flat.reshape(-1), minlength=n_rows * width).reshape(n_rows, width)[:, 1:]


def _count_at_most(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.searchsorted(edges, values, side="right")`` (``int64``, the shape of ``values``) for a
    handful of sorted ``edges``: one comparison per edge, about 10x faster at these sizes."""
    count = np.zeros(values.shape, dtype=np.int64)
    for edge in edges:
        count += values >= edge
    return count


def _absent_last(priority: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``priority`` (``float64 [N, U]`` uniform draws, one per unit) with absent units (length 0)
    set to 2.0, visited after every present one: each row then visits its present units in a
    uniformly random order, by increasing priority."""
    priority[lengths == 0] = 2.0
    return priority


# Rows per block: what follows the random draws runs block by block, so that its temporaries stay
# in cache and reuse memory instead of faulting in fresh pages; rows are independent, so the
# result is the same for any block size.
ROW_BLOCK = 1024


def _by_row_blocks(fn, *arrays: np.ndarray):
    """``fn(*arrays)`` computed on blocks of ``ROW_BLOCK`` rows and concatenated (``fn`` returns one
    array or a tuple of arrays)."""
    parts = [fn(*(a[s:s + ROW_BLOCK] for a in arrays)) for s in range(0, len(arrays[0]), ROW_BLOCK)]
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p) for p in zip(*parts))
    return np.concatenate(parts)


def _uniform_keys(uniform: np.ndarray) -> tuple[np.ndarray, int]:
    """Integer sort keys for the rows of ``uniform`` (``float64 [N, W]`` draws of NumPy's
    ``Generator.random()``; values from 1.0 up, such as absent units' 2.0, rank after every draw).

    Returns ``(keys, bits)``: ``keys`` ``int64 [N, W]`` distinct within a row, in the order a
    stable argsort gives the columns, with a column's index in the low ``bits`` bits, so that
    ``np.sort(keys) & (2**bits - 1)`` is that argsort, several times faster. The keys are
    ``uniform * 2**53 << bits | column``, exact because ``random()`` draws are multiples of
    2**-53; rows of more than 512 columns (the keys would overflow) are ranked by the argsort.
    """
    width = uniform.shape[1]
    bits = max(width - 1, 1).bit_length()
    columns = np.arange(width)
    if bits <= 9:
        keys = (np.minimum(uniform, 1.0) * 2.0**53).astype(np.int64) << bits
    else:
        keys = np.empty(uniform.shape, dtype=np.int64)
        np.put_along_axis(keys, np.argsort(uniform, axis=1, kind="stable"), columns << bits, axis=1)
    keys |= columns
    return keys, bits


def _visit_order(priority: np.ndarray) -> np.ndarray:
    """``int64 [N, U]``: each row's units in visit order, by increasing priority (ties by index)."""
    keys, bits = _uniform_keys(priority)
    return np.sort(keys, axis=1) & ((1 << bits) - 1)


def _tokens_of_units(unit_ids: np.ndarray, unit_chosen: np.ndarray) -> np.ndarray:
    """``bool [N, L]``: tokens whose unit is chosen in ``unit_chosen`` (``[N, U]``)."""
    n_rows, n_units = unit_chosen.shape
    flat = np.arange(0, n_rows * n_units, n_units)[:, None] + np.maximum(unit_ids, 0)
    return (unit_ids >= 0) & unit_chosen.reshape(-1)[flat]


def _first_visited(priority: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """``bool [N, U]``: the ``budget`` units each row visits first (``priority``: ``float64 [N, U]``
    from :func:`_absent_last`; ``budget``: ``int64 [N]``).

    They are the units whose priority is at most the row's ``budget``-th smallest: one sort of
    the values, several times cheaper than ordering the indices. A row where that threshold is
    shared by two units (distinct uniform doubles never are) is ranked by the stable sort that
    defines the visit order instead.
    """
    kth = np.sort(priority, axis=1)[np.arange(len(priority)), np.maximum(budget - 1, 0)]
    chosen = (priority <= kth[:, None]) & (budget > 0)[:, None]
    tied = np.flatnonzero(chosen.sum(axis=1) != np.minimum(budget, priority.shape[1]))
    if tied.size:
        rank = np.argsort(np.argsort(priority[tied], axis=1, kind="stable"), axis=1, kind="stable")
        chosen[tied] = rank < budget[tied, None]
    return chosen


def select_tokens(maskable: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """MLM: choose ``budget`` maskable tokens per row, uniformly without replacement.

    The same choice, from the same draws, as :func:`select_units` on single-token units
    (:func:`unit_ids_for` ``("mlm", ...)``: unit ``u`` is the token at position ``u``), without
    building the units.

    Args:
        maskable: ``bool [N, L]`` tokens that may be chosen.
        budget: ``int [N]`` tokens to choose per row (at most the row's maskable tokens).
        rng: the random generator (consumes ``N * U`` uniforms, ``U`` = the last maskable position + 1).
    Returns:
        ``bool [N, L]``: the chosen tokens.
    """
    columns = np.flatnonzero(maskable.any(axis=0))
    chosen = np.zeros(maskable.shape, dtype=bool)
    if not columns.size:
        return chosen
    n_units = int(columns[-1]) + 1

    def block(maskable: np.ndarray, budget: np.ndarray) -> np.ndarray:
        priority = rng.random((len(maskable), n_units))  # blocks in turn: the draws of one call
        priority[~maskable[:, :n_units]] = 2.0
        return _first_visited(priority, budget)

    chosen[:, :n_units] = _by_row_blocks(block, maskable, np.asarray(budget, dtype=np.int64))
    return chosen & maskable


def select_units(unit_ids: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Choose whole units in random order until each row's token budget is met.

    A unit is a run of tokens sharing a unit id (a word for WWM, one token for
    MLM). Units are visited in a uniformly random order; a unit is taken if it
    still fits in the budget and skipped otherwise, so a chosen set never splits
    a unit and never exceeds the budget (BERT's ``create_masked_lm_predictions``:
    ``if len(masked_lms) + len(index_set) > num_to_predict: continue``).

    Vectorised over rows: every unit visited before the first that overflows the budget is
    taken (a cumulative sum in visit order), then the loop fills each row's gap with the next
    units that fit, at most (longest unit - 1) rounds.

    Args:
        unit_ids: ``int [N, L]`` dense unit index per token (0..U-1 per row), -1 = never chosen.
        budget: ``int [N]`` tokens to choose per row.
        rng: the random generator (consumes ``N * U`` uniforms).
    Returns:
        ``bool [N, L]``: the chosen tokens.
    """
    n_units = int(unit_ids.max(initial=-1)) + 1
    if n_units == 0:
        return np.zeros(unit_ids.shape, dtype=bool)
    # blocks in turn, each drawing its rows' priorities: the same draws as one call for all rows
    return _by_row_blocks(lambda ids, b: _choose_units(ids, b, rng.random((len(ids), n_units))),
                          unit_ids, np.asarray(budget, dtype=np.int64))


def _choose_units(unit_ids: np.ndarray, budget: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """:func:`select_units` on a block of rows, given their draws (``priority``, ``[N, U]``)."""
    lengths = _unit_lengths(unit_ids, priority.shape[1])
    priority = _absent_last(priority, lengths)
    if lengths.max() <= 1:  # single-token units: the first `budget` in random order
        return _tokens_of_units(unit_ids, _first_visited(priority, budget))
    keys, bits = _uniform_keys(priority)
    visits = np.sort(keys, axis=1)
    order = visits & ((1 << bits) - 1)
    visited = np.take_along_axis(lengths, order, axis=1)  # [N, U] unit lengths in visit order
    n_present = np.count_nonzero(lengths, axis=1)  # absent units (length 0) are visited last
    # Every unit visited before the first that would overflow the budget is taken.
    cum = np.cumsum(visited, axis=1)
    taken = np.minimum((cum <= budget[:, None]).sum(axis=1), n_present)
    last = taken - 1
    rows = np.arange(len(budget))
    total = np.where(taken > 0, cum[rows, last], 0)
    chosen = keys <= np.where(taken > 0, visits[rows, last], -1)[:, None]  # the first `taken` visits
    # Then, in turn, the next unit that fits in the gap left; each take shrinks the gap.
    columns = np.arange(visited.shape[1])
    rows = np.flatnonzero((total < budget) & (taken < n_present))
    while rows.size:
        fits = ((visited[rows] <= (budget[rows] - total[rows])[:, None]) & (columns > last[rows, None])
                & (columns < n_present[rows, None]))
        j = fits.argmax(axis=1)
        found = fits[np.arange(len(rows)), j]
        rows, j = rows[found], j[found]
        chosen[rows, order[rows, j]] = True
        total[rows] += visited[rows, j]
        last[rows] = j
        rows = rows[total[rows] < budget[rows]]
    return _tokens_of_units(unit_ids, chosen)


def select_ngrams(word_ids: np.ndarray, budget: np.ndarray, rng: np.random.Generator,
                  ngram_probs: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)) -> tuple[np.ndarray, np.ndarray]:
    """N-gram masking: choose spans of 1..K consecutive whole words until the token budget is met.

    The rules of ALBERT's ``create_masked_lm_predictions`` (the reference for
    N-gram masking that MacBERT and PERT cite), per row:

    1. visit the words in a uniformly random order as span starts;
    2. draw the span length ``n`` in words with probability ``ngram_probs[n-1]``,
       renormalised over the lengths that fit before the row's last word;
    3. while the span would exceed the budget, shorten it (``n -= 1``); if even
       one word does not fit, skip this start;
    4. skip the span if any of its words is already chosen; otherwise choose it.

    As in :func:`select_units`, the loop runs over visits, vectorised over the rows
    still choosing.

    Args:
        word_ids: ``int [N, L]`` dense word index per token, -1 = never chosen.
        budget: ``int [N]`` tokens to choose per row.
        ngram_probs: probability of a span of 1, 2, ... K words.
    Returns:
        ``(chosen, span_words)``: ``bool [N, L]`` chosen tokens, and ``int64 [S]``
        the length in words of every span taken (for statistics and tests).
    """
    n_rows = word_ids.shape[0]
    n_words_max = int(word_ids.max(initial=-1)) + 1
    if n_words_max == 0:
        return np.zeros(word_ids.shape, dtype=bool), np.zeros(0, dtype=np.int64)
    k = len(ngram_probs)
    cdf = np.cumsum(ngram_probs)
    priority = rng.random((n_rows, n_words_max))
    draws = rng.random((n_rows, n_words_max))
    order, cum, n_words = _by_row_blocks(partial(_ngram_visits, k=k), word_ids, priority)
    order, cum_flat = order.reshape(-1), cum.reshape(-1)
    budget = np.asarray(budget, dtype=np.int64)
    covered = np.zeros((n_rows, n_words_max + k), dtype=bool)
    total = np.zeros(n_rows, dtype=np.int64)
    spans = []
    span_range = np.arange(1, k + 1)
    rows = np.flatnonzero(budget > 0)  # the rows still choosing
    for j in range(n_words_max):
        if not rows.size:
            break
        start = order[rows * n_words_max + j]  # a present word: rows whose words are all visited are gone
        room = np.clip(n_words[rows] - start, 1, k)  # longest span that stays inside the row
        n = np.minimum(_count_at_most(cdf, draws[rows, j] * cdf[room - 1]) + 1, room)
        # tokens of spans of 1..k words from `start`; nondecreasing in the span, so what fits is a prefix
        at = (rows * cum.shape[1] + start)[:, None]  # flat index of cum[rows, start]
        span_tokens = cum_flat[at + span_range] - cum_flat[at]
        gap = budget[rows] - total[rows]
        n_fit = ((span_range <= n[:, None]) & (span_tokens <= gap[:, None])).sum(axis=1)
        words = (rows * covered.shape[1] + start)[:, None] + span_range - 1  # flat indices into covered
        in_span = span_range <= n_fit[:, None]
        take = (n_fit > 0) & ~(covered.reshape(-1)[words] & in_span).any(axis=1)
        if take.any():
            covered.reshape(-1)[words[take][in_span[take]]] = True
            total[rows[take]] += span_tokens[take, n_fit[take] - 1]
            spans.append(n_fit[take])
        rows = rows[(total[rows] < budget[rows]) & (n_words[rows] > j + 1)]
    chosen = _by_row_blocks(_tokens_of_units, word_ids, covered[:, :n_words_max])
    return chosen, (np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64))


def _ngram_visits(word_ids: np.ndarray, priority: np.ndarray, k: int) -> tuple[np.ndarray, ...]:
    """For :func:`select_ngrams`, on a block of rows given their priorities (``float64 [N, W]``):
    ``order`` (``[N, W]`` the visit order), ``cum`` (``[N, W + k + 1]``: tokens of words
    ``0..w-1``, padded so that a span of ``k`` words from any word stays inside) and ``n_words``
    (``int64 [N]``); ``int16`` for rows of fewer than 32,768 tokens: fewer bytes to concatenate."""
    small = np.int16 if word_ids.shape[1] < 2**15 else np.int64
    lengths = _unit_lengths(word_ids, priority.shape[1])
    order = _visit_order(_absent_last(priority, lengths)).astype(small)
    cum = np.zeros((len(lengths), lengths.shape[1] + k + 1), dtype=small)
    np.cumsum(lengths, axis=1, out=cum[:, 1:lengths.shape[1] + 1])
    cum[:, lengths.shape[1] + 1:] = cum[:, lengths.shape[1]:lengths.shape[1] + 1]
    return order, cum, np.count_nonzero(lengths, axis=1)


def unit_ids_for(scheme: str, word_ids: np.ndarray) -> np.ndarray:
    """Unit ids of a masking scheme: each maskable token alone (MLM) or its word (WWM, N-gram)."""
    if scheme in ("wwm", "ngram"):
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


def _word_occurrences(positions: np.ndarray, unit_ids: np.ndarray) -> tuple[np.ndarray, ...]:
    """The chosen words as occurrences: ``first, length`` (``int64 [K]`` each: flat position of the
    first token, tokens) and, per chosen token (``positions``: flat, increasing), its occurrence."""
    width = unit_ids.shape[1]
    units = unit_ids.reshape(-1)[positions]
    new = np.ones(len(positions), dtype=bool)
    new[1:] = (positions[1:] // width != positions[:-1] // width) | (units[1:] != units[:-1])
    starts = np.flatnonzero(new)
    return positions[starts], np.diff(starts, append=len(positions)), np.cumsum(new) - 1


def _similar_replacement(occ_first, occ_len, lex_ids, similar: SimilarWords, rng):
    """Pick a similar word for each occurrence; ``(ok, token_values, fallback counts)``."""
    lex = lex_ids.reshape(-1)[occ_first] if lex_ids is not None else np.full(len(occ_first), -1)
    has_entry = lex >= 0
    safe = np.maximum(lex, 0)
    n_cand = np.where(has_entry, similar.counts[safe], 0)
    whole = has_entry & (similar.lengths[safe] == occ_len)  # a word cut at a sequence boundary is shorter
    ok = has_entry & (n_cand > 0) & whole
    pick = similar.offsets[safe] + np.minimum((rng.random(len(lex)) * n_cand).astype(np.int64),
                                              np.maximum(n_cand - 1, 0))
    reps = np.where(ok, occ_len, 0)
    # token i of the replacements is token (i - the word's first i) of its candidate
    shift = similar.starts[np.where(ok, pick, 0)] - (np.cumsum(reps) - reps)
    values = similar.tokens[np.repeat(shift, reps) + np.arange(reps.sum())]
    fallbacks = {
        "similar_fallback_not_in_lexicon": int((~has_entry).sum()),
        "similar_fallback_no_candidate": int((has_entry & (n_cand == 0)).sum()),
        "similar_fallback_length_mismatch": int((has_entry & (n_cand > 0) & ~whole).sum()),
    }
    return ok, values, fallbacks


def _shuffle_within_rows(rows: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``np.lexsort((keys, rows))`` for non-decreasing ``rows`` and ``keys`` drawn by
    ``Generator.random()``: each row's entries in a random order, sorted as one short row of a
    padded matrix (:func:`_uniform_keys`)."""
    per_row = np.bincount(rows)
    starts = np.cumsum(per_row) - per_row
    slot = np.arange(len(rows)) - starts[rows]
    padded = np.ones((len(per_row), int(per_row.max(initial=1))))  # 1.0: after every draw
    padded[rows, slot] = keys
    sort_keys, bits = _uniform_keys(padded)
    return starts[rows] + (np.sort(sort_keys, axis=1)[rows, slot] & ((1 << bits) - 1))


def corrupt(input_ids: np.ndarray, chosen: np.ndarray, unit_ids: np.ndarray, config: MaskingConfig,
            rng: np.random.Generator, *, mask_token_id: int, random_token_ids: np.ndarray,
            lex_ids: np.ndarray | None = None, similar: SimilarWords | None = None) -> MaskedBatch:
    """Corrupt the chosen tokens and build the labels.

    One uniform draw per decision unit picks, in this order, [MASK] (``mask``),
    a random token (``random``), a similar word (``similar``), the PerLM
    permutation (``permute``), or keep. The decision unit is the token (BERT §3.1
    and appendix A.1; Google's code decides per token also under WWM), except
    with ``similar > 0``, where it is the chosen word (MacBERT §3.2: "we will find
    similar words individually" for each word of an N-gram), and a random
    replacement then gives every token of the word a random token.

    Mac: a word takes a uniformly drawn candidate of :class:`SimilarWords` of the
    same token length; a word with no candidate (not in the lexicon, no
    same-length neighbour, or cut by a sequence boundary) gets a random word
    instead, as MacBERT specifies ("in rare cases, when there is no similar word,
    we will degrade to use random word replacement"); each fallback is counted.

    PerLM (PERT §3.2): the tokens drawn for ``permute`` are shuffled among
    themselves within their row (a uniformly random permutation of those
    positions); at every chosen position ``i`` the label is the position where
    the original token ``input_ids[i]`` now stands (``i`` itself for kept tokens).

    Args:
        input_ids: ``int [N, L]``; chosen: ``bool [N, L]``; unit_ids: ``int [N, L]``
            (the words of the chosen tokens, used with ``similar``).
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
    out = original.astype(np.int32)  # a copy
    labels = np.full(out.shape, IGNORE_INDEX, dtype=np.int32)
    positions = np.flatnonzero(chosen)
    edges = np.cumsum([config.mask, config.random, config.similar, config.permute])
    if not config.similar:  # 0 mask, 1 random, 2 similar, 3 permute, 4 keep
        kind = _count_at_most(edges, rng.random(len(positions)))
    else:
        if similar is None:
            raise ValueError("similar-word replacement (Mac) needs a SimilarWords lexicon")
        occ_first, occ_len, occurrence = _word_occurrences(positions, unit_ids)
        word_kind = _count_at_most(edges, rng.random(len(occ_first)))
        to_similar = np.flatnonzero(word_kind == 2)
        ok, values, fallbacks = _similar_replacement(occ_first[to_similar], occ_len[to_similar], lex_ids,
                                                     similar, rng)
        word_kind[to_similar[~ok]] = 1  # no similar word: a random word instead
        kind = word_kind[occurrence]
        out[positions[kind == 2]] = values
    counts = {"chosen": len(positions)}
    if config.similar:
        counts.update(fallbacks, similar_words=int(ok.sum()))
    counts.update(zip(("mask", "random", "similar", "permute", "keep"), np.bincount(kind, minlength=5).tolist()))
    out[positions[kind == 0]] = mask_token_id
    out[positions[kind == 1]] = random_token_ids[rng.integers(0, len(random_token_ids), counts["random"])]
    if config.permute:
        labels[positions] = positions % width  # kept tokens point at themselves
        permuted = positions[kind == 3]
        source = permuted[_shuffle_within_rows(permuted // width, rng.random(len(permuted)))]
        out[permuted] = original[source]  # the token from `source` now stands at `permuted`
        labels[source] = permuted % width
    else:
        labels[positions] = original[positions]
    return MaskedBatch(out.reshape(input_ids.shape), chosen, labels.reshape(input_ids.shape), counts)


def mask_batch(input_ids: np.ndarray, word_ids: np.ndarray, config: MaskingConfig, rng: np.random.Generator, *,
               mask_token_id: int, random_token_ids: np.ndarray, lex_ids: np.ndarray | None = None,
               similar: SimilarWords | None = None) -> MaskedBatch:
    """Choose ``config.masked_lm_prob`` of the maskable tokens of every sequence with the
    configured scheme, then corrupt them (:func:`corrupt`).

    Args:
        input_ids: ``int [N, L]`` original token ids.
        word_ids: ``int [N, L]`` word index per token, -1 for special and padding tokens.
        lex_ids, similar: for Mac only (see :func:`corrupt`).
    Returns:
        A :class:`MaskedBatch`.
    """
    maskable = word_ids >= 0
    budget = prediction_budget(np.count_nonzero(maskable, axis=1), config.masked_lm_prob, config.max_predictions)
    if config.scheme == "ngram":
        chosen, _ = select_ngrams(word_ids, budget, rng, config.ngram_probs)
    elif config.scheme == "wwm":
        chosen = select_units(word_ids, budget, rng)
    else:
        chosen = select_tokens(maskable, budget, rng)
    return corrupt(input_ids, chosen, word_ids, config, rng, mask_token_id=mask_token_id,
                   random_token_ids=random_token_ids, lex_ids=lex_ids, similar=similar)
