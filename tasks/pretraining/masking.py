"""Token-level pretraining corruption: what to put at the chosen tokens (which tokens are chosen:
:mod:`tasks.pretraining.selection`), and the whole of it for a batch (:func:`mask_batch`).

Replacements (``MaskingConfig`` shares, ``keep`` is the rest):

* ``mask``/``random``/``keep``: BERT's 80/10/10 (Devlin et al. 2019, §3.1; and the MacBERT
  ablations of Table 8: *all mask* 90/0/10, *random replace* 0/90/10, *partial mask* 80/10/10);
* ``similar``: Mac, MLM as correction (MacBERT, Cui et al. 2020, §3.2): a chosen word becomes a
  similar word (:class:`SimilarWords`), never [MASK];
* ``permute``: PerLM (PERT, Cui et al. 2022, §3.2): the chosen tokens are shuffled among
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

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from tasks.core.params.pretraining import Objective, PretrainingData
from tasks.corpus.similar_words import SimilarWords
from tasks.pretraining.selection import (_shuffle_within_rows, prediction_budget, select_ngrams, select_spans,
                                         select_units, unit_ids_for)
from tasks.training.batching import IGNORE_INDEX

@dataclass(frozen=True)
class Substitution:
    """A per-token substitution table (CSR): the candidates a chosen token may become, drawn uniformly
    (e.g. its sound-alikes: :mod:`tasks.pretraining.objectives.sound_alike`).

    Attributes:
        name: what the candidates are (the replacement share's name in params, e.g. ``sound``).
        offsets: ``int64 [V + 1]``: token ``t``'s candidates are ``candidates[offsets[t]:offsets[t + 1]]``.
        candidates: ``int32 [C]`` token ids, never the token itself.
    """

    name: str
    offsets: np.ndarray
    candidates: np.ndarray


@dataclass(frozen=True)
class MaskingConfig:
    """What to choose and how to corrupt it: built from the validated params by :func:`masking_config`
    (the params schema, :class:`tasks.core.params.Objective`, is where its values are checked: an
    objective is validated once), or directly with known-good values by the held-out measures.

    Attributes:
        scheme: ``"mlm"`` (single tokens), ``"wwm"`` (whole words), ``"ngram"`` (spans of whole
            words) or ``"span"`` (SpanBERT's geometric spans).
        masked_lm_prob: share of the maskable tokens of a sequence to choose (0.15).
        max_predictions: cap on chosen tokens per sequence (BERT: 20 for length 128).
        mask, random, similar, permute, substitute: shares of the chosen units that become
            [MASK], a random token, a similar word, take part in the PerLM permutation, or become
            a candidate of ``substitution``; the rest stay as they are.
        ngram_probs: probability of a span of 1, 2, ... words (``ngram`` only).
        span_p, span_max_words: the clipped geometric law of span lengths in words (``span`` only).
        granularity: PerLM: which permuted tokens may trade places: ``none`` (any of the row),
            ``word``, ``ngram`` (one chosen span) or ``sentence`` (needs the sentence starts).
        substitution: the table of ``substitute`` (None without one).
    """

    scheme: str = "mlm"
    masked_lm_prob: float = 0.15
    max_predictions: int = 20
    mask: float = 0.8
    random: float = 0.1
    similar: float = 0.0
    permute: float = 0.0
    ngram_probs: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
    span_p: float = 0.2
    span_max_words: int = 10
    granularity: str = "none"
    substitute: float = 0.0
    substitution: Substitution | None = field(default=None, compare=False, repr=False)

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


def _count_at_most(edges: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.searchsorted(edges, values, side="right")`` (``int64``, the shape of ``values``) for a
    handful of sorted ``edges``: one comparison per edge, about 10x faster at these sizes."""
    count = np.zeros(values.shape, dtype=np.int64)
    for edge in edges:
        count += values >= edge
    return count


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
             random_values: np.ndarray, similar_values: np.ndarray, substitute_values: np.ndarray, width: int,
             label_positions: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(out, labels)``, flat ``int32``: ``original`` with each chosen position replaced as its
    ``kind`` says, [MASK] (0), the next random token (1), the next similar-word token (2), itself
    (3 permute), the next substitute (4), itself (5 keep); labelled with its original token or (PerLM)
    its own position."""
    out = original.astype(np.int32)
    labels = np.full(len(original), IGNORE_INDEX, np.int32)
    n_random = n_similar = n_substitute = 0
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
        elif kind[q] == 4:
            out[p] = substitute_values[n_substitute]
            n_substitute += 1
    return out, labels


def _substitutes(tokens: np.ndarray, table: Substitution, draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(ok, values)``: whether each of ``tokens`` (``int [K]``) has a candidate in ``table``, and the
    candidate ``floor(draw * candidates)`` of each that has (``int32``, in order)."""
    start, end = table.offsets[tokens], table.offsets[tokens + 1]
    ok = end > start
    pick = start[ok] + np.minimum((draws[ok] * (end - start)[ok]).astype(np.int64), (end - start)[ok] - 1)
    return ok, table.candidates[pick].astype(np.int32)


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
    permutation (``permute``), a candidate of ``config.substitution`` (``substitute``: a token
    without one gets a random token, counted in ``substitute_fallback``), or keep. The decision
    unit is the token (BERT §3.1 and appendix A.1; Google's code decides per token also under WWM), except
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
        ValueError: ``config.similar > 0`` without ``similar``, ``config.substitute > 0`` without its table.
    """
    # flat positions: 1-D gathers and scatters are several times faster than (rows, cols) pairs
    width = input_ids.shape[1]
    original = input_ids.reshape(-1)
    positions = np.flatnonzero(chosen)
    # kinds: 0 mask, 1 random, 2 similar, 3 permute, 4 substitute, 5 keep
    edges = np.cumsum([config.mask, config.random, config.similar, config.permute, config.substitute])
    values = substitutes = np.zeros(0, dtype=np.int32)
    if not config.similar and config.scheme != "span":
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
    if config.substitute:  # a token without a candidate gets a random token, as Mac's words do
        if config.substitution is None:
            raise ValueError(f"replacement substitute needs its table ({config.substitution})")
        to_substitute = np.flatnonzero(kind == 4)
        has, substitutes = _substitutes(original[positions[to_substitute]], config.substitution,
                                        rng.random(len(to_substitute)))
        kind[to_substitute[~has]] = 1
        counts["substitute_fallback"] = int((~has).sum())
    names = ("mask", "random", "similar", "permute", "substitute", "keep")
    counts.update((k, v) for k, v in zip(names, np.bincount(kind, minlength=6).tolist())
                  if k != "substitute" or config.substitute)
    random_values = random_token_ids[rng.integers(0, len(random_token_ids), counts["random"])]
    out, labels = _replace(original, positions, kind, mask_token_id, random_values, values, substitutes, width,
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


def masking_config(objective: Objective, data: PretrainingData, substitution: Substitution | None = None
                   ) -> MaskingConfig:
    """The :class:`MaskingConfig` of an objective's validated params under the data params, with the
    table of its substitution share (``replacement.sound``: ``substitution``, None without one)."""
    r = objective.replacement
    return MaskingConfig(scheme=objective.masking, masked_lm_prob=data.masked_lm_prob,
                         max_predictions=data.max_predictions_per_seq, mask=r.mask, random=r.random,
                         similar=r.similar, permute=r.permute, substitute=r.sound, substitution=substitution,
                         ngram_probs=tuple(data.ngram_probabilities), span_p=data.span_p,
                         span_max_words=data.span_max_words, granularity=objective.permutation.granularity)
