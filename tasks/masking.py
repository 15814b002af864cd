"""Masked language model corruption: MLM and whole word masking (WWM).

All functions work on whole batches at once (NumPy, no per-example Python
loop), take an explicit :class:`numpy.random.Generator`, and are used both to
build static pretraining data and at batch time (dynamic masking), so the two
paths cannot drift apart.

Conventions for a batch of ``N`` packed sequences of length ``L``:

* ``input_ids``: ``int32 [N, L]`` token ids, padding included.
* ``word_ids``: ``int32 [N, L]``, the index of the word each token belongs to,
  dense and increasing within a row; ``-1`` for tokens that must never be
  chosen ([CLS], [SEP], [PAD]).

Sources: BERT, Devlin et al. 2019, §3.1 "Task #1: Masked LM" and Google's
reference ``create_pretraining_data.py`` (``create_masked_lm_predictions``);
whole word masking as released by Google (2019-05-31) and applied to Chinese
with a word segmenter in Chinese BERT-wwm, Cui et al. 2021 (IEEE/ACM TASLP),
§3.1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MASKING_SCHEMES = ("mlm", "wwm")


@dataclass(frozen=True)
class MaskingConfig:
    """What to choose and how to corrupt it.

    Attributes:
        scheme: ``"mlm"`` (units are single tokens) or ``"wwm"`` (units are words).
        masked_lm_prob: share of the maskable tokens of a sequence to choose (0.15).
        max_predictions: cap on chosen tokens per sequence (BERT: 20 for length 128).
        mask: probability that a chosen token becomes [MASK] (0.8).
        random: probability that it becomes a random token (0.1); the rest are kept.
    """

    scheme: str = "mlm"
    masked_lm_prob: float = 0.15
    max_predictions: int = 20
    mask: float = 0.8
    random: float = 0.1

    def __post_init__(self) -> None:
        if self.scheme not in MASKING_SCHEMES:
            raise ValueError(f"unknown masking scheme {self.scheme!r}; known: {', '.join(MASKING_SCHEMES)}")
        if not (0 <= self.mask and 0 <= self.random and self.mask + self.random <= 1):
            raise ValueError("mask and random must be probabilities with mask + random <= 1")


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


def select_units(unit_ids: np.ndarray, budget: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Choose whole units in random order until each row's token budget is met.

    A unit is a run of tokens sharing a unit id (a word for WWM, one token for
    MLM). Units are visited in a uniformly random order; a unit is taken if it
    still fits in the budget and skipped otherwise, so a chosen set never splits
    a unit and never exceeds the budget (BERT's ``create_masked_lm_predictions``:
    ``if len(masked_lms) + len(index_set) > num_to_predict: continue``).

    Args:
        unit_ids: ``int [N, L]`` dense unit index per token (0..U-1 per row), -1 = never chosen.
        budget: ``int [N]`` tokens to choose per row.
        rng: the random generator (consumes ``N * U`` uniforms).
    Returns:
        ``bool [N, L]``: the chosen tokens.
    """
    n_rows, _ = unit_ids.shape
    maskable = unit_ids >= 0
    n_units = int(unit_ids.max(initial=-1)) + 1
    if n_units == 0:
        return np.zeros(unit_ids.shape, dtype=bool)
    rows = np.broadcast_to(np.arange(n_rows)[:, None], unit_ids.shape)
    flat = rows[maskable] * n_units + unit_ids[maskable]
    lengths = np.bincount(flat, minlength=n_rows * n_units).reshape(n_rows, n_units)

    priority = rng.random((n_rows, n_units))
    priority[lengths == 0] = 2.0  # absent units sort last
    order = np.argsort(priority, axis=1, kind="stable")
    sorted_len = np.take_along_axis(lengths, order, axis=1)

    if lengths.max() <= 1:  # single-token units: the first `budget` in random order
        chosen_sorted = np.arange(n_units)[None, :] < budget[:, None]
    else:
        chosen_sorted = np.zeros((n_rows, n_units), dtype=bool)
        total = np.zeros(n_rows, dtype=np.int64)
        budget = np.asarray(budget, dtype=np.int64)
        for j in range(n_units):
            length = sorted_len[:, j]
            take = (length > 0) & (total + length <= budget)
            chosen_sorted[:, j] = take
            total += np.where(take, length, 0)
            if (total >= budget).all():
                break
    chosen = np.zeros((n_rows, n_units), dtype=bool)
    np.put_along_axis(chosen, order, chosen_sorted, axis=1)
    return maskable & chosen[rows, np.maximum(unit_ids, 0)]


def unit_ids_for(scheme: str, word_ids: np.ndarray) -> np.ndarray:
    """Unit ids of a masking scheme: each maskable token alone (MLM) or its word (WWM)."""
    if scheme == "wwm":
        return word_ids
    if scheme == "mlm":
        positions = np.broadcast_to(np.arange(word_ids.shape[1], dtype=word_ids.dtype), word_ids.shape)
        return np.where(word_ids >= 0, positions, -1)
    raise ValueError(f"unknown masking scheme {scheme!r}; known: {', '.join(MASKING_SCHEMES)}")


def corrupt(input_ids: np.ndarray, chosen: np.ndarray, rng: np.random.Generator, *, mask_token_id: int,
            random_token_ids: np.ndarray, mask: float = 0.8, random: float = 0.1) -> np.ndarray:
    """Replace chosen tokens: [MASK] with probability ``mask``, a random token with
    probability ``random``, unchanged otherwise; decided independently per token
    (BERT §3.1 and appendix A.1; Google's code decides per token also under WWM).

    Args:
        input_ids: ``int [N, L]``.
        chosen: ``bool [N, L]``.
        random_token_ids: ``int [V']`` ids a random replacement is drawn from
            (uniformly; the pipeline passes every non-special vocabulary id).
    Returns:
        ``int [N, L]`` corrupted copy of ``input_ids``.
    """
    out = input_ids.copy()
    draw = rng.random(input_ids.shape)
    to_mask = chosen & (draw < mask)
    to_random = chosen & (draw >= mask) & (draw < mask + random)
    out[to_mask] = mask_token_id
    n_random = int(to_random.sum())
    out[to_random] = random_token_ids[rng.integers(0, len(random_token_ids), n_random)]
    return out


@dataclass
class MaskedBatch:
    """A corrupted batch.

    Attributes:
        input_ids: ``int32 [N, L]`` corrupted input.
        chosen: ``bool [N, L]`` the positions to predict.
        labels: ``int32 [N, L]`` original ids at chosen positions, -100 elsewhere.
    """

    input_ids: np.ndarray
    chosen: np.ndarray
    labels: np.ndarray


def mask_batch(input_ids: np.ndarray, word_ids: np.ndarray, config: MaskingConfig, rng: np.random.Generator, *,
               mask_token_id: int, random_token_ids: np.ndarray) -> MaskedBatch:
    """Choose ``config.masked_lm_prob`` of the maskable tokens of every sequence
    (whole words for WWM) and corrupt them 80/10/10.

    Args:
        input_ids: ``int [N, L]`` original token ids.
        word_ids: ``int [N, L]`` word index per token, -1 for special and padding tokens.
    Returns:
        A :class:`MaskedBatch`.
    """
    units = unit_ids_for(config.scheme, word_ids)
    budget = prediction_budget((word_ids >= 0).sum(axis=1), config.masked_lm_prob, config.max_predictions)
    chosen = select_units(units, budget, rng)
    corrupted = corrupt(input_ids, chosen, rng, mask_token_id=mask_token_id, random_token_ids=random_token_ids,
                        mask=config.mask, random=config.random)
    labels = np.where(chosen, input_ids, -100).astype(np.int32)
    return MaskedBatch(corrupted.astype(np.int32), chosen, labels)
