"""MLM and WWM masking: exact budgets, rates and the 80/10/10 split on thousands of
sequences, whole words never split, special tokens never chosen."""

import numpy as np
import pytest

from tasks.masking import MaskingConfig, mask_batch, prediction_budget, select_units, unit_ids_for

MASK, CLS, SEP = 103, 101, 102
RANDOM_IDS = np.arange(1000, 21128, dtype=np.int32)


def synthetic_batch(n: int = 6000, length: int = 128, seed: int = 0):
    """Packed-like rows: [CLS] words of 1-4 tokens [SEP] then padding, varied lengths."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((n, length), dtype=np.int32)
    words = np.full((n, length), -1, dtype=np.int32)
    for r in range(n):
        body = int(rng.integers(5, length - 1))
        lens = rng.choice([1, 2, 3, 4], size=body, p=[0.35, 0.45, 0.12, 0.08])
        w = np.repeat(np.arange(body), lens)[: body - 1]
        words[r, 1:len(w) + 1] = w
        ids[r, 1:len(w) + 1] = rng.integers(1000, 21128, len(w))
        ids[r, 0], ids[r, len(w) + 1] = CLS, SEP
    return ids, words


@pytest.fixture(scope="module")
def batch():
    return synthetic_batch()


def run(scheme, ids, words, seed=1, **kw):
    cfg = MaskingConfig(scheme=scheme, **kw)
    return mask_batch(ids, words, cfg, np.random.default_rng(seed), mask_token_id=MASK, random_token_ids=RANDOM_IDS)


def test_prediction_budget_follows_bert_rule():
    n = np.array([0, 1, 3, 7, 10, 100, 126, 200])
    assert prediction_budget(n, 0.15, 20).tolist() == [0, 1, 1, 1, 2, 15, 19, 20]
    # round half to even, like Python's round(): 0.15 * 30 = 4.5 -> 4, 0.15 * 50 = 7.5 -> 8
    assert prediction_budget(np.array([30, 50]), 0.15, 20).tolist() == [4, 8]


@pytest.mark.parametrize("scheme", ["mlm", "wwm"])
def test_special_and_padding_tokens_never_chosen(batch, scheme):
    ids, words = batch
    out = run(scheme, ids, words)
    assert not out.chosen[words < 0].any()
    assert not np.isin(ids[out.chosen], [0, CLS, SEP]).any()
    # nothing outside the chosen set changes
    assert (out.input_ids[~out.chosen] == ids[~out.chosen]).all()
    assert (out.labels[out.chosen] == ids[out.chosen]).all() and (out.labels[~out.chosen] == -100).all()


def test_mlm_chooses_exactly_the_budget_per_sequence(batch):
    ids, words = batch
    out = run("mlm", ids, words)
    budget = prediction_budget((words >= 0).sum(1), 0.15, 20)
    assert (out.chosen.sum(1) == budget).all()
    rate = out.chosen.sum() / (words >= 0).sum()
    assert abs(rate - 0.15) < 0.002


@pytest.mark.parametrize("scheme", ["mlm", "wwm"])
def test_80_10_10_split(batch, scheme):
    ids, words = batch
    out = run(scheme, ids, words)
    new, old = out.input_ids[out.chosen], ids[out.chosen]
    n = len(new)
    assert n > 50_000
    masked = (new == MASK).mean()
    kept = (new == old).mean()
    randomised = ((new != MASK) & (new != old)).mean()
    # binomial sd at n=50k is ~0.002 for 0.8 and ~0.0015 for 0.1: 4-sigma tolerances
    assert abs(masked - 0.8) < 0.008
    assert abs(kept - 0.1) < 0.006
    assert abs(randomised - 0.1) < 0.006
    assert np.isin(new[(new != MASK) & (new != old)], RANDOM_IDS).all()


def test_wwm_never_splits_a_word(batch):
    ids, words = batch
    out = run("wwm", ids, words)
    rows = np.broadcast_to(np.arange(len(ids))[:, None], ids.shape)
    key = rows[words >= 0] * 1000 + words[words >= 0]
    chosen = out.chosen[words >= 0]
    per_word_chosen = np.bincount(key, weights=chosen, minlength=key.max() + 1)
    per_word_size = np.bincount(key, minlength=key.max() + 1)
    present = per_word_size > 0
    whole_or_none = (per_word_chosen == 0) | (per_word_chosen == per_word_size)
    assert whole_or_none[present].all()
    assert (per_word_chosen[present] > 0).sum() > 10_000  # many words were chosen, some of several tokens
    assert ((per_word_chosen > 1) & present).sum() > 1_000


def test_wwm_budget_counts_tokens(batch):
    ids, words = batch
    out = run("wwm", ids, words)
    budget = prediction_budget((words >= 0).sum(1), 0.15, 20)
    chosen = out.chosen.sum(1)
    assert (chosen <= budget).all()
    # skipping words that overflow leaves at most a few tokens unused; on average < 0.5
    assert (budget - chosen).mean() < 0.5
    assert abs(out.chosen.sum() / (words >= 0).sum() - 0.15) < 0.005


def test_wwm_chooses_words_uniformly_not_by_position(batch):
    ids, words = batch
    out = run("wwm", ids, words)
    body = words >= 0
    first_half = body & (np.arange(ids.shape[1])[None, :] < body.sum(1, keepdims=True) // 2 + 1)
    rate_first = out.chosen[first_half].mean()
    rate_second = out.chosen[body & ~first_half].mean()
    assert abs(rate_first - rate_second) < 0.01


def test_select_units_hand_worked():
    # one row: [CLS] A A B C C C D [SEP]; units A(2) B(1) C(3) D(1); budget 3
    unit_ids = np.array([[-1, 0, 0, 1, 2, 2, 2, 3, -1]])
    for seed in range(50):
        chosen = select_units(unit_ids, np.array([3]), np.random.default_rng(seed))[0]
        picked = {u for u in range(4) if chosen[unit_ids[0] == u].any()}
        assert chosen.sum() <= 3
        for u in picked:  # whole units only
            assert chosen[unit_ids[0] == u].all()
        # the greedy fill only stops short when no remaining unit fits
        left = 3 - chosen.sum()
        sizes = {0: 2, 1: 1, 2: 3, 3: 1}
        assert all(sizes[u] > left for u in set(sizes) - picked)


def test_mlm_units_are_single_tokens():
    words = np.array([[-1, 0, 0, 1, -1]])
    assert unit_ids_for("mlm", words).tolist() == [[-1, 1, 2, 3, -1]]
    assert unit_ids_for("wwm", words).tolist() == words.tolist()
    with pytest.raises(ValueError, match="unknown masking scheme"):
        unit_ids_for("xyz", words)


def test_same_seed_same_masks(batch):
    ids, words = batch
    a, b, c = run("wwm", ids, words, seed=7), run("wwm", ids, words, seed=7), run("wwm", ids, words, seed=8)
    assert (a.input_ids == b.input_ids).all() and (a.chosen == b.chosen).all()
    assert (a.chosen != c.chosen).any()


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="unknown masking scheme"):
        MaskingConfig(scheme="span")
    with pytest.raises(ValueError):
        MaskingConfig(mask=0.95, random=0.1)
