"""SpanBERT's span masking and span boundary objective, and whole words surviving truncation:
the drawn span lengths follow the geometric law clipped at 10 (chi-square on 100,000 spans), spans
are whole words and never exceed the budget, the 80/10/10 choice is made per span, SBO's boundaries
are hand-checked; a sentence longer than a sequence is cut between two words."""

import numpy as np
import torch
from scipy import stats
from transformers import BertConfig, BertForMaskedLM

from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.modeling import PretrainingModel, span_boundaries
from tasks.pretraining.packing import cut_points, pack_documents
from tasks.pretraining.selection import prediction_budget, select_spans
from tests.test_masking import MASK, RANDOM_IDS, synthetic_batch

SPAN = MaskingConfig(scheme="span", mask=0.8, random=0.1)


def test_the_clipped_geometric_law():
    p = 0.2 * 0.8 ** np.arange(10)
    np.testing.assert_allclose(SPAN.span_probs, p / p.sum())
    assert abs(np.dot(np.arange(1, 11), SPAN.span_probs) - 3.8) < 0.05  # SpanBERT's mean span: 3.8 words


def test_drawn_span_lengths_follow_the_clipped_geometric_law():
    """Chi-square goodness of fit of the lengths drawn for 100,000 spans (the draw follows the
    anchor's acceptance, so the spans taken are an unbiased sample of it)."""
    _, words = synthetic_batch(n=9000, seed=1)
    budget = prediction_budget((words >= 0).sum(1), 0.15, 20)
    drawn = np.concatenate([select_spans(words, budget, np.random.default_rng(s), SPAN.span_probs).drawn
                            for s in range(6)])[:100_000]
    assert len(drawn) == 100_000
    observed = np.bincount(drawn, minlength=11)[1:]
    test = stats.chisquare(observed, len(drawn) * np.array(SPAN.span_probs))
    assert test.pvalue > 0.001, (observed, test)
    # a wrong law is rejected by the same test: p = 0.3 instead of 0.2
    q = 0.3 * 0.7 ** np.arange(10)
    assert stats.chisquare(observed, len(drawn) * q / q.sum()).pvalue < 1e-10


def test_spans_are_whole_words_within_the_budget_and_cut_only_by_row_end_chosen_word_or_budget():
    _, words = synthetic_batch(n=2000, seed=2)
    budget = prediction_budget((words >= 0).sum(1), 0.15, 20)
    spans = select_spans(words, budget, np.random.default_rng(0), SPAN.span_probs)
    chosen = spans.chosen
    assert (chosen.sum(1) <= budget).all() and chosen.sum() > 0.95 * budget.sum()
    assert (spans.words <= spans.drawn).all() and (spans.words == spans.drawn).mean() > 0.5
    for r in range(200):  # a word is chosen whole or not at all, and a span is consecutive words
        for w in np.unique(words[r][words[r] >= 0]):
            at = words[r] == w
            assert chosen[r][at].all() or not chosen[r][at].any()
            assert len(set(spans.start[r][at])) == 1
        for start in np.unique(spans.start[r][chosen[r]]):
            covered = np.unique(words[r][spans.start[r] == start])
            assert covered[0] == start and (np.diff(covered) == 1).all()


def test_span_masking_decides_80_10_10_per_span():
    ids, words = synthetic_batch(n=3000, seed=3)
    out = mask_batch(ids, words, SPAN, np.random.default_rng(4), mask_token_id=MASK, random_token_ids=RANDOM_IDS)
    chosen = out.chosen
    spans = select_spans(words, prediction_budget((words >= 0).sum(1), 0.15, 20), np.random.default_rng(4),
                         SPAN.span_probs)
    assert (spans.chosen == chosen).all()  # the same draws: the selection comes first
    kinds = {"mask": 0, "random": 0, "keep": 0}
    for r in range(3000):
        for start in np.unique(spans.start[r][chosen[r]]):
            at = spans.start[r] == start
            masked, kept = out.input_ids[r][at] == MASK, out.input_ids[r][at] == ids[r][at]
            kind = "mask" if masked.all() else "keep" if kept.all() else "random"
            assert kind != "random" or not (masked.any() or kept.all()), (r, start)  # never mixed
            kinds[kind] += 1
    shares = np.array(list(kinds.values())) / sum(kinds.values())
    np.testing.assert_allclose(shares, [0.8, 0.1, 0.1], atol=0.015)


def test_span_boundaries_hand_worked():
    # row 0: positions 2-4 (one span) and 7; row 1: 1-2; touching spans are one run
    rows, cols = torch.tensor([0, 0, 0, 0, 1, 1]), torch.tensor([2, 3, 4, 7, 1, 2])
    left, right, offset = span_boundaries(rows, cols, width=8)
    assert left.tolist() == [1, 1, 1, 6, 0, 0]
    assert right.tolist() == [5, 5, 5, 7, 3, 3]  # position 8 is past the row: clamped to its last
    assert offset.tolist() == [0, 1, 2, 0, 0, 1]


def test_sbo_adds_its_loss_and_learns_from_the_boundaries():
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    plain = PretrainingModel(BertForMaskedLM(config))
    sbo = PretrainingModel(plain.mlm, sbo=True)
    ids = torch.randint(5, 50, (2, 12))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "rows": torch.tensor([0, 0, 1]), "cols": torch.tensor([3, 4, 6]), "labels": torch.tensor([7, 8, 9])}
    mlm_loss, _ = plain(batch)
    loss, _ = sbo(batch)
    assert loss > mlm_loss
    loss.backward()
    assert sbo.sbo_head.offsets.weight.grad[:2].abs().sum() > 0 and sbo.sbo_head.offsets.weight.grad[2:].sum() == 0
    assert set(sbo.extra_heads()) >= {"sbo_head.offsets.weight", "sbo_head.bias"}


def test_a_long_sentence_is_cut_between_words():
    words = np.array([0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 4])
    assert cut_points(words, 4) == [0, 4, 7]         # cuts at word starts; no piece splits a word
    assert cut_points(words, 3) == [0, 1, 4, 7, 10]  # word 4 (4 tokens) alone exceeds 3: cut inside it
    assert cut_points(words, 20) == [0] and cut_points(np.zeros(0, int), 4) == []
    ids = np.arange(100, 111, dtype=np.int32)
    packed = pack_documents(["d"], [ids], [words.astype(np.int32)], max_seq_length=6, cls_id=1, sep_id=2)
    rows = [packed.input_ids[r, 1:packed.lengths[r] - 1].tolist() for r in range(len(packed))]
    # the pieces are packed like sentences: the first two share a row, each row ends between words
    assert rows == [[100, 101, 102, 103], [104, 105, 106], [107, 108, 109, 110]]
