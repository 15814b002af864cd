"""Token corruption on thousands of sequences: MLM and WWM budgets and the 80/10/10 split,
N-gram span lengths, Mac replacements drawn from the lexicon with counted fallbacks, the
PerLM permutation and its position labels, the MacBERT ablation shares; plus hand-worked cases."""

import numpy as np
import pytest

from tasks.corpus.similar_words import SimilarWords
from tasks.pretraining.masking import MaskingConfig, corrupt, mask_batch
from tasks.pretraining.selection import prediction_budget, select_ngrams, select_units, unit_ids_for

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


def run(scheme, ids, words, seed=1, lex_ids=None, lexicon=None, **kw):
    cfg = MaskingConfig(scheme=scheme, **kw)
    return mask_batch(ids, words, cfg, np.random.default_rng(seed), mask_token_id=MASK, random_token_ids=RANDOM_IDS,
                      lex_ids=lex_ids, similar=lexicon)


def test_prediction_budget_follows_bert_rule():
    n = np.array([0, 1, 3, 7, 10, 100, 126, 200])
    assert prediction_budget(n, 0.15, 20).tolist() == [0, 1, 1, 1, 2, 15, 19, 20]
    # round half to even, like Python's round(): 0.15 * 30 = 4.5 -> 4, 0.15 * 50 = 7.5 -> 8
    assert prediction_budget(np.array([30, 50]), 0.15, 20).tolist() == [4, 8]


@pytest.mark.parametrize("scheme", ["mlm", "wwm", "ngram"])
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


@pytest.mark.parametrize("scheme", ["mlm", "wwm", "ngram"])
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


@pytest.mark.parametrize("scheme", ["wwm", "ngram"])
def test_whole_words_are_never_split(batch, scheme):
    ids, words = batch
    out = run(scheme, ids, words)
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


def test_mlm_chooses_the_first_visited_tokens(batch):
    """On single-token units (MLM) the greedy rule takes each row's ``budget`` tokens of smallest
    priority, in stable order: ``budget`` tokens uniformly without replacement."""
    _, words = batch
    maskable = words >= 0
    budget = prediction_budget(maskable.sum(axis=1), 0.15, 20)
    units = unit_ids_for("mlm", words)
    chosen = select_units(units, budget, np.random.default_rng(4))
    priority = np.random.default_rng(4).random((len(words), int(units.max()) + 1))
    priority[~maskable[:, :priority.shape[1]]] = 2.0
    for r in range(300):
        first = np.argsort(priority[r], kind="stable")[:budget[r]]
        assert set(np.flatnonzero(chosen[r])) == set(first.tolist())


def test_visits_break_ties_by_index():
    """Tied priorities are visited in index order, a tie across the window edges included."""
    from tasks.pretraining.selection import _select_units_rows

    units = np.array([[0, 1, 2, 3, 4]] * 3)
    priority = np.array([[0.5, 0.2, 0.5, 0.9, 0.99], [0.3, 0.3, 0.3, 0.1, 0.99], [0.3, 0.3, 0.3, 0.1, 0.99]])
    chosen = _select_units_rows(units, np.array([2, 2, 0]), priority)
    assert chosen[0].tolist() == [True, True, False, False, False]  # 0.2, then the first 0.5
    assert chosen[1].tolist() == [True, False, False, True, False]  # 0.1, then the first 0.3
    assert not chosen[2].any()


def test_same_seed_same_masks(batch):
    ids, words = batch
    a, b, c = run("wwm", ids, words, seed=7), run("wwm", ids, words, seed=7), run("wwm", ids, words, seed=8)
    assert (a.input_ids == b.input_ids).all() and (a.chosen == b.chosen).all()
    assert (a.chosen != c.chosen).any()


# --------------------------------------------------------------------------- N-gram masking


def single_token_words(n=4000, length=256, seed=0):
    """Rows whose words are one token each, so spans in words = spans in tokens."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, 21128, (n, length)).astype(np.int32)
    words = np.broadcast_to(np.arange(-1, length - 1, dtype=np.int32), (n, length)).copy()
    words[:, -1] = -1
    ids[:, 0], ids[:, -1] = CLS, SEP
    return ids, words


def test_ngram_span_lengths_follow_40_30_20_10():
    """On long rows with a low masking rate (few overlaps; the budget shortens only the last
    of ~40 spans per row) the spans taken follow the N-gram distribution: sd at ~20k spans
    is ~0.0035, and the tolerance 0.02 covers the small bias towards short spans."""
    ids, words = single_token_words(n=500, length=2048)
    budget = prediction_budget((words >= 0).sum(1), 0.04, 10_000)
    spans = select_ngrams(words, budget, np.random.default_rng(3), (0.4, 0.3, 0.2, 0.1)).words
    assert len(spans) > 10_000
    shares = np.bincount(spans, minlength=5)[1:] / len(spans)
    assert np.abs(shares - [0.4, 0.3, 0.2, 0.1]).max() < 0.02, shares
    # a different distribution is followed too (the probabilities are a param)
    spans = select_ngrams(words, budget, np.random.default_rng(3), (0.1, 0.2, 0.7)).words
    shares = np.bincount(spans, minlength=4)[1:] / len(spans)
    assert np.abs(shares - [0.1, 0.2, 0.7]).max() < 0.03, shares


def test_ngram_spans_are_consecutive_words_and_fill_the_budget():
    ids, words = single_token_words(n=2000, length=128)
    budget = prediction_budget((words >= 0).sum(1), 0.15, 20)
    selection = select_ngrams(words, budget, np.random.default_rng(0))
    chosen, spans = selection.chosen, selection.words
    # single-token words: the budget is always met exactly (a span is shortened to fit)
    assert (chosen.sum(1) == budget).all() and spans.sum() == budget.sum()
    # runs of chosen tokens are unions of spans: there are at most as many runs as spans
    starts = chosen[:, 1:] & ~chosen[:, :-1]
    assert starts.sum() <= len(spans) and (spans >= 2).mean() > 0.4


def test_ngram_hand_worked():
    # [CLS] A B B C [SEP]: words A(1) B(2) C(1); only 4-grams -> one span of all 3 words (4 tokens)
    words = np.array([[-1, 0, 1, 1, 2, -1]])
    for seed in range(20):
        chosen = select_ngrams(words, np.array([4]), np.random.default_rng(seed), (0, 0, 0, 1)).chosen
        # a 4-gram never fits 3 words: it is cut to the words left before the row's end, then
        # shortened until it fits the budget; whole words only
        assert chosen[0].tolist() == [False, True, True, True, True, False] or chosen[0, 1:5].sum() < 4
        assert chosen[0, 2] == chosen[0, 3]
    # budget 2 with unigrams only: never a partial word, never over budget
    for seed in range(20):
        selection = select_ngrams(words, np.array([2]), np.random.default_rng(seed), (1.0,))
        chosen, spans = selection.chosen, selection.words
        assert chosen.sum() <= 2 and chosen[0, 2] == chosen[0, 3] and (spans == 1).all()


# --------------------------------------------------------------------------- Mac (MLM as correction)


def lexicon_for(ids, words, n_entries=500, seed=0):
    """A lexicon over the synthetic words: entry e is a word of length 1-4 tokens with 0-3
    candidates of the same length (ids 30000+ so that they are recognisable)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 5, n_entries).astype(np.int32)
    counts = rng.choice([0, 1, 2, 3], n_entries, p=[0.1, 0.3, 0.3, 0.3])
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    cand_len = np.repeat(lengths, counts)
    starts = np.concatenate([[0], np.cumsum(cand_len)[:-1]]).astype(np.int64)
    tokens = (30000 + np.arange(cand_len.sum())).astype(np.int32)
    similar = SimilarWords(lengths, offsets, starts, tokens)
    # each word occurrence gets the entry whose length matches, or -1 (not in the lexicon) for 20%
    rows = np.broadcast_to(np.arange(len(ids))[:, None], ids.shape)
    key = rows * 1000 + np.maximum(words, 0)
    size = np.bincount(key.ravel(), weights=(words >= 0).ravel())[key]
    by_length = {k: np.flatnonzero(lengths == k) for k in range(1, 5)}
    pick = rng.integers(0, 10**9, key.max() + 1)
    lex = np.full(ids.shape, -1, dtype=np.int32)
    for k in range(1, 5):
        sel = (words >= 0) & (size == k) & (pick[key] % 5 != 0)
        lex[sel] = by_length[k][pick[key][sel] % len(by_length[k])]
    return lex, similar


def test_mac_replaces_words_with_their_similar_words_never_mask(batch):
    ids, words = batch
    lex, similar = lexicon_for(ids, words)
    out = run("ngram", ids, words, lex_ids=lex, lexicon=similar, mask=0, random=0.1, similar=0.8)
    assert not (out.input_ids == MASK).any()
    new, old = out.input_ids, ids
    replaced = out.chosen & (new >= 30000)
    assert replaced.sum() > 10_000
    # every replaced word holds exactly one candidate of its own lexicon entry, all its tokens
    r, c = np.nonzero(replaced)
    entry = lex[r, c]
    first = np.ones(len(r), bool)
    first[1:] = (r[1:] != r[:-1]) | (words[r[1:], c[1:]] != words[r[:-1], c[:-1]])
    for i in np.flatnonzero(first)[:3000]:
        e, k = entry[i], similar.lengths[entry[i]]
        got = new[r[i], c[i]:c[i] + k]
        candidates = [similar.tokens[s:s + k].tolist() for s in similar.starts[similar.offsets[e]:similar.offsets[e + 1]]]
        assert got.tolist() in candidates
        assert (words[r[i], c[i]:c[i] + k] == words[r[i], c[i]]).all()
    assert (out.labels[out.chosen] == old[out.chosen]).all()


def test_mac_shares_and_fallbacks_are_counted(batch):
    ids, words = batch
    lex, similar = lexicon_for(ids, words)
    out = run("ngram", ids, words, lex_ids=lex, lexicon=similar, mask=0, random=0.1, similar=0.8)
    n = out.counts
    drawn_similar = n["similar_words"] + n["similar_fallback_not_in_lexicon"] + n["similar_fallback_no_candidate"] \
        + n["similar_fallback_length_mismatch"]
    # per word: ~80% drawn for a similar word; 20% of occurrences are not in the lexicon, and
    # ~10% of entries have no candidate, so ~28% of them fall back to a random word
    words_chosen = drawn_similar / 0.8
    assert n["similar_fallback_not_in_lexicon"] / drawn_similar == pytest.approx(0.2, abs=0.02)
    assert n["similar_fallback_no_candidate"] / drawn_similar == pytest.approx(0.08, abs=0.02)
    assert n["similar_fallback_length_mismatch"] == 0
    assert n["chosen"] == out.chosen.sum() and n["mask"] == 0
    assert n["similar"] + n["random"] + n["keep"] == n["chosen"]
    # tokens: what was replaced by a lexicon candidate is exactly the `similar` count
    assert ((out.input_ids >= 30000) & out.chosen).sum() == n["similar"]
    # kept words are kept whole: the decision is per word
    kept_share = n["keep"] / n["chosen"]
    assert kept_share == pytest.approx(0.1, abs=0.015) and words_chosen > 10_000


def test_mac_needs_a_lexicon(batch):
    ids, words = batch
    with pytest.raises(ValueError, match="needs a SimilarWords lexicon"):
        run("wwm", ids[:10], words[:10], mask=0, random=0.1, similar=0.8)


def test_mac_hand_worked():
    # [CLS] w0 w0 w1 [SEP]; w0 is entry 0 (2 tokens, one candidate 7 8); w1 is not in the lexicon
    ids = np.array([[CLS, 50, 51, 52, SEP]])
    words = np.array([[-1, 0, 0, 1, -1]])
    lex = np.array([[-1, 0, 0, -1, -1]])
    similar = SimilarWords(np.array([2], np.int32), np.array([0, 1]), np.array([0]), np.array([7, 8], np.int32))
    cfg = MaskingConfig(scheme="wwm", masked_lm_prob=1.0, max_predictions=3, mask=0, random=0, similar=1.0)
    out = corrupt(ids, words >= 0, words, cfg, np.random.default_rng(0), mask_token_id=MASK,
                  random_token_ids=np.array([99], np.int32), lex_ids=lex, similar=similar)
    assert out.input_ids.tolist() == [[CLS, 7, 8, 99, SEP]]  # w1 falls back to a random word
    assert out.counts["similar_words"] == 1 and out.counts["similar_fallback_not_in_lexicon"] == 1
    assert out.labels.tolist() == [[-100, 50, 51, 52, -100]]


# --------------------------------------------------------------------------- PerLM


def test_perlm_labels_point_at_where_each_original_token_now_stands(batch):
    ids, words = batch
    out = run("ngram", ids, words, mask=0, random=0, permute=0.9)
    r, c = np.nonzero(out.chosen)
    target = out.labels[r, c]
    assert (out.input_ids[r, target] == ids[r, c]).all()
    assert not np.isin(out.input_ids, [MASK]).any() or (ids == MASK).any()
    # no token is created or lost: each row's chosen tokens are a permutation of the originals
    assert (out.input_ids[~out.chosen] == ids[~out.chosen]).all()
    for row in range(0, len(ids), 97):
        sel = out.chosen[row]
        assert sorted(out.input_ids[row, sel]) == sorted(ids[row, sel])
        # labels are a permutation of the chosen positions (a bijection)
        assert sorted(out.labels[row, sel]) == sorted(np.flatnonzero(sel))
    # 90% of chosen tokens take part in the permutation, 10% keep their place (label = own position)
    moved_share = out.counts["permute"] / out.counts["chosen"]
    assert moved_share == pytest.approx(0.9, abs=0.005)
    assert out.counts["keep"] + out.counts["permute"] == out.counts["chosen"]
    kept = target == c
    assert kept.mean() >= 0.1 - 0.005  # kept ones, plus permuted ones that landed in place


def test_perlm_permutation_is_uniform():
    """Three permuted positions in one row: all 3! orders appear about equally often."""
    ids = np.array([[CLS, 10, 11, 12, SEP]] * 6000)
    chosen = np.zeros(ids.shape, bool)
    chosen[:, 1:4] = True
    cfg = MaskingConfig(scheme="mlm", mask=0, random=0, permute=1.0)
    out = corrupt(ids, chosen, ids * 0, cfg, np.random.default_rng(0), mask_token_id=MASK,
                  random_token_ids=RANDOM_IDS)
    _, counts = np.unique(out.input_ids[:, 1:4], axis=0, return_counts=True)
    assert len(counts) == 6 and np.abs(counts / 6000 - 1 / 6).max() < 0.02


# --------------------------------------------------------------------------- MacBERT ablations


@pytest.mark.parametrize("shares, expected", [
    ({"mask": 0.9, "random": 0.0}, {"mask": 0.9, "random": 0.0, "keep": 0.1}),   # all mask
    ({"mask": 0.0, "random": 0.9}, {"mask": 0.0, "random": 0.9, "keep": 0.1}),   # random replace
    ({"mask": 0.8, "random": 0.1}, {"mask": 0.8, "random": 0.1, "keep": 0.1}),   # partial mask
])
def test_ablation_shares(batch, shares, expected):
    ids, words = batch
    out = run("ngram", ids, words, **shares)
    total = out.counts["chosen"]
    for name, share in expected.items():
        assert out.counts[name] / total == pytest.approx(share, abs=0.006), name
    assert (out.input_ids[out.chosen] == MASK).sum() == out.counts["mask"]


def reference_selection(words, budget, seed, scheme, ngram_probs=(0.4, 0.3, 0.2, 0.1)):
    """The selection rules one row at a time in plain Python, from the draws select_units and
    select_ngrams make (N x W priorities, then for N-grams N x W span draws): visit the present
    words by increasing priority (ties by index); WWM takes a word if it fits the budget left;
    N-gram draws a span length over the lengths that fit the row, shortens it to fit, and takes it
    unless a word of it is taken."""
    rng = np.random.default_rng(seed)
    n_words = words.max(axis=1) + 1
    width = int(n_words.max())
    priority = rng.random((len(words), width))
    draws = rng.random((len(words), width)) if scheme == "ngram" else None
    cdf = np.cumsum(ngram_probs)
    chosen = np.zeros(words.shape, dtype=bool)
    for r in range(len(words)):
        size = [int((words[r] == w).sum()) for w in range(n_words[r])]
        taken, total = set(), 0
        visits = sorted(range(n_words[r]), key=lambda w: (priority[r, w], w))
        for j, start in enumerate(visits):
            if total >= budget[r]:
                break
            if scheme == "wwm":
                span = [start] if total + size[start] <= budget[r] else []
            else:
                room = min(len(ngram_probs), n_words[r] - start)
                n = min(int(np.searchsorted(cdf, draws[r, j] * cdf[room - 1], side="right")) + 1, room)
                while n and total + sum(size[start:start + n]) > budget[r]:
                    n -= 1
                span = [] if taken & set(range(start, start + n)) else list(range(start, start + n))
            taken |= set(span)
            total += sum(size[w] for w in span)
        chosen[r] = np.isin(words[r], list(taken)) & (words[r] >= 0)
    return chosen


@pytest.mark.parametrize("rate", [(0.15, 20), (0.5, 64), (1.0, 200)])
@pytest.mark.parametrize("scheme", ["wwm", "ngram"])
def test_selection_matches_the_rules_row_by_row(batch, scheme, rate):
    """The compiled selection (rows visited window by window of priority) chooses what the rules
    choose, one row at a time: at BERT's rate, and with budgets that need several windows or that
    a row cannot fill."""
    _, words = batch
    words = words[:400]
    budget = prediction_budget((words >= 0).sum(axis=1), *rate)
    if scheme == "wwm":
        fast = select_units(words, budget, np.random.default_rng(3))
    else:
        fast = select_ngrams(words, budget, np.random.default_rng(3)).chosen
    np.testing.assert_array_equal(fast, reference_selection(words, budget, 3, scheme))


def test_shuffle_within_rows_is_lexsort():
    from tasks.pretraining.selection import _shuffle_within_rows

    rng = np.random.default_rng(0)
    rows = np.sort(rng.integers(0, 50, 700))
    keys = rng.random(700)
    keys[::7] = 0.5  # ties keep their order, as lexsort does
    np.testing.assert_array_equal(_shuffle_within_rows(rows, keys), np.lexsort((keys, rows)))
