"""PERT's ablations (Cui et al. 2022, §6), each target hand-checked on a small example: permutation
granularity (tokens trade places only within their word, N-gram or sentence; anywhere in the row by
default), prediction space (positions, the original tokens, or both) and partial vs full prediction."""

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from tasks.pretraining.masking import MaskingConfig, corrupt, mask_batch
from tasks.pretraining.modeling import PretrainingModel
from tests.test_masking import MASK, RANDOM_IDS, synthetic_batch

# [CLS] A A | B B B | C C [SEP]: three words of 2, 3 and 2 tokens, two sentences (A B) and (C)
IDS = np.array([[1, 10, 11, 20, 21, 22, 30, 31, 2]], dtype=np.int32)
WORDS = np.array([[-1, 0, 0, 1, 1, 1, 2, 2, -1]], dtype=np.int32)
SENTENCES = np.array([[0, 0, 0, 0, 0, 0, 1, 1, 1]])
EVERYTHING = WORDS >= 0


def permuted(granularity, groups, seed):
    cfg = MaskingConfig(scheme="wwm", mask=0, random=0, permute=1.0, granularity=granularity)
    return corrupt(IDS, EVERYTHING, WORDS, cfg, np.random.default_rng(seed), mask_token_id=MASK,
                   random_token_ids=RANDOM_IDS, groups=groups)


@pytest.mark.parametrize("granularity, groups, blocks", [
    ("word", WORDS, [[1, 2], [3, 4, 5], [6, 7]]),
    ("sentence", SENTENCES, [[1, 2, 3, 4, 5], [6, 7]]),
    ("none", None, [[1, 2, 3, 4, 5, 6, 7]]),
])
def test_permuted_tokens_stay_within_their_block(granularity, groups, blocks):
    seen = set()
    for seed in range(40):
        out = permuted(granularity, groups, seed)
        for block in blocks:  # each block's tokens, shuffled among its own positions
            assert sorted(out.input_ids[0, block]) == sorted(IDS[0, block])
            for i in block:  # the label at a token's old position is where it stands now
                assert out.input_ids[0, out.labels[0, i]] == IDS[0, i] and out.labels[0, i] in block
        seen.add(tuple(out.input_ids[0]))
    assert len(seen) > 5  # it does permute


def test_ngram_granularity_keeps_tokens_within_their_masked_span():
    ids, words = synthetic_batch(n=300, seed=5)
    cfg = MaskingConfig(scheme="ngram", mask=0, random=0, permute=1.0, granularity="ngram")
    out = mask_batch(ids, words, cfg, np.random.default_rng(1), mask_token_id=MASK, random_token_ids=RANDOM_IDS)
    from tasks.pretraining.selection import prediction_budget, select_ngrams

    spans = select_ngrams(words, prediction_budget((words >= 0).sum(1), 0.15, 20), np.random.default_rng(1))
    rows, cols = np.nonzero(out.chosen)
    moved_to = out.labels[rows, cols]
    assert (spans.start[rows, moved_to] == spans.start[rows, cols]).all()  # within the span
    assert (moved_to != cols).mean() > 0.3  # and across its words, not only within one word


def test_sentence_granularity_needs_the_sentence_ids():
    cfg = MaskingConfig(scheme="wwm", mask=0, random=0, permute=1.0, granularity="sentence")
    with pytest.raises(ValueError, match="sentence ids"):
        mask_batch(IDS, WORDS, cfg, np.random.default_rng(0), mask_token_id=MASK, random_token_ids=RANDOM_IDS)


def model(**options):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    return PretrainingModel(BertForMaskedLM(config), predicts_positions=True, **options)


def batch():
    """[CLS] 10 11 20 [SEP] with 11 and 20 swapped: the data's labels are positions."""
    ids = torch.tensor([[1, 10, 20, 11, 2]])
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
            "rows": torch.tensor([0, 0]), "cols": torch.tensor([2, 3]), "labels": torch.tensor([3, 2])}


def targets(m: PretrainingModel, b: dict) -> dict[str, torch.Tensor]:
    """What each head is asked to predict (captured at the loss)."""
    seen = {}
    real = torch.nn.functional.cross_entropy

    def spy(logits, target, *a, **k):
        seen["tokens" if logits.shape[-1] == 40 else "positions"] = target.clone()  # 40: the vocabulary
        return real(logits, target, *a, **k)

    torch.nn.functional.cross_entropy = spy
    try:
        m(b)
    finally:
        torch.nn.functional.cross_entropy = real
    return seen


def test_prediction_space_local_global_and_both():
    b = batch()
    local = targets(model(), b)
    assert set(local) == {"positions"} and local["positions"].tolist() == [3, 2]
    # global: the original token of each chosen position (11 stood at position 2, 20 at 3)
    glob = targets(model(space="global"), b)
    assert set(glob) == {"tokens"} and glob["tokens"].tolist() == [11, 20]
    both = targets(model(space="both"), b)
    assert both["positions"].tolist() == [3, 2] and both["tokens"].tolist() == [11, 20]
    assert model().unused_parameters and not model(space="both").unused_parameters


def test_full_prediction_targets_every_token():
    b = batch()
    full = model(full_targets=True)
    assert full.predictions(b) == 5 and model().predictions(b) == 2
    assert targets(full, b)["positions"].tolist() == [0, 1, 3, 2, 4]  # unchosen tokens stay where they are
    assert targets(model(full_targets=True, space="global"), b)["tokens"].tolist() == [1, 10, 11, 20, 2]
    lengths = np.array([5])
    assert full.flops(lengths, 2) > model().flops(lengths, 2)
