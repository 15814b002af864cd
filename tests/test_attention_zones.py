"""Attention-zone ablation: exact row/column sets, a no-op when nothing is blocked, and the
attention probabilities of blocked layers/heads checked entry by entry."""

import pytest
import torch
from transformers import AlbertConfig, AlbertModel, BertConfig, BertForQuestionAnswering

from tasks.interpretability.ablation import ZONES, ZoneAblation, zone_mask

CLS, SEP, PAD = 2, 3, 0
# [CLS] q q [SEP] p p p [SEP] pad pad: mid = 3, end = 7, Q = {1, 2}, P = {4, 5, 6}
IDS = torch.tensor([[CLS, 5, 6, SEP, 7, 8, 9, SEP, PAD, PAD],
                    [CLS, 5, SEP, 7, 8, 9, 10, 11, SEP, PAD]])
MASK = (IDS != PAD).long()
VALID = [set(range(8)), set(range(9))]


def blocked_pairs(zone: str, b: int) -> set[tuple[int, int]]:
    m = zone_mask(zone, IDS, MASK, SEP)[b]
    return {(i, j) for i, j in m.nonzero().tolist()}


def test_zone_sets_on_a_hand_example():
    v = VALID[0]
    q, p = {1, 2}, {4, 5, 6}
    expected = {"cls": {(i, 0) for i in v}, "sep_mid": {(i, 3) for i in v}, "sep_end": {(i, 7) for i in v},
                "special": {(i, j) for i in v for j in (0, 3, 7)}, "diagonal": {(i, i) for i in v},
                "q2q": {(i, j) for i in q for j in q}, "q2p": {(i, j) for i in q for j in p},
                "p2q": {(i, j) for i in p for j in q}, "p2p": {(i, j) for i in p for j in p}}
    assert set(expected) == set(ZONES)
    for zone, pairs in expected.items():
        assert blocked_pairs(zone, 0) == pairs, zone
    # second feature: one question token, five passage tokens, [SEP]s at 2 and 8
    assert blocked_pairs("p2q", 1) == {(i, 1) for i in range(3, 8)}
    assert blocked_pairs("sep_mid", 1) == {(i, 2) for i in VALID[1]}


def test_zone_mask_errors():
    with pytest.raises(ValueError, match="unknown zone"):
        zone_mask("q2x", IDS, MASK, SEP)
    with pytest.raises(ValueError, match=r"\[SEP\]"):
        zone_mask("q2q", torch.tensor([[CLS, 5, SEP, 6]]), torch.ones(1, 4, dtype=torch.long), SEP)


def tiny_bert(implementation: str) -> BertForQuestionAnswering:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=16, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, attn_implementation=implementation)
    return BertForQuestionAnswering(config).eval()


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_blocking_nothing_reproduces_the_plain_model(implementation):
    model = tiny_bert(implementation)
    ablation = ZoneAblation(model, SEP)
    with torch.no_grad():
        plain = model(input_ids=IDS, attention_mask=MASK)
        with ablation.block(None):
            none = model(input_ids=IDS, attention_mask=MASK)
        with ablation.block("p2p", layers=set()):  # a zone in no layer
            no_layer = model(input_ids=IDS, attention_mask=MASK)
        after = model(input_ids=IDS, attention_mask=MASK)
    for out in (none, no_layer, after):
        assert torch.equal(out.start_logits, plain.start_logits)
        assert torch.equal(out.end_logits, plain.end_logits)
    assert model.config._attn_implementation == implementation


def attentions(model, ablation=None, **block):
    with torch.no_grad():
        if ablation is None:
            return model(input_ids=IDS, attention_mask=MASK, output_attentions=True).attentions
        with ablation.block(**block):
            return model(input_ids=IDS, attention_mask=MASK, output_attentions=True).attentions


@pytest.mark.parametrize("zone", ZONES)
def test_blocking_a_zone_changes_exactly_its_entries(zone):
    model = tiny_bert("eager")
    base = attentions(model)
    ablated = attentions(model, ZoneAblation(model, SEP), zone=zone, layers={0})
    mask = zone_mask(zone, IDS, MASK, SEP)[:, None].expand_as(base[0])  # [B, H, L, L]
    rows = mask.any(-1, keepdim=True).expand_as(mask)
    a, b = ablated[0], base[0]
    assert torch.all(a[mask] == 0)                      # blocked entries: probability 0
    assert torch.equal(a[~rows], b[~rows])              # rows with nothing blocked: untouched
    renormalised = b.masked_fill(mask, 0)
    renormalised = renormalised / renormalised.sum(-1, keepdim=True)
    assert torch.allclose(a[rows], renormalised[rows], atol=1e-6)  # blocked rows: the rest renormalised
    assert not torch.equal(ablated[1], base[1])         # later layers see the changed states


def test_one_head_of_one_layer():
    model = tiny_bert("eager")
    base = attentions(model)
    ablated = attentions(model, ZoneAblation(model, SEP), zone="p2q", layers={1}, heads={1})
    mask = zone_mask("p2q", IDS, MASK, SEP)
    assert torch.equal(ablated[0], base[0])             # the layer before: identical
    assert torch.equal(ablated[1][:, 0], base[1][:, 0])  # the other head: identical
    assert torch.all(ablated[1][:, 1][mask] == 0)
    assert not torch.equal(ablated[1][:, 1], base[1][:, 1])


def test_albert_shared_layer_is_counted_per_application():
    torch.manual_seed(0)
    config = AlbertConfig(vocab_size=16, embedding_size=8, hidden_size=16, num_hidden_layers=3,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16,
                          attn_implementation="eager")
    model = AlbertModel(config).eval()
    base = attentions(model)
    ablated = attentions(model, ZoneAblation(model, SEP), zone="q2q", layers={1})
    assert torch.equal(ablated[0], base[0])
    assert torch.all(ablated[1][zone_mask("q2q", IDS, MASK, SEP)[:, None].expand_as(base[1])] == 0)
    assert not torch.equal(ablated[2], base[2])


def test_out_of_range_layers_and_heads_are_refused():
    ablation = ZoneAblation(tiny_bert("sdpa"), SEP)
    with pytest.raises(ValueError, match="layers"):
        with ablation.block("p2p", layers={3}):
            pass
    with pytest.raises(ValueError, match="heads"):
        with ablation.block("p2p", heads={2}):
            pass
    with pytest.raises(ValueError, match="unknown zone"):
        with ablation.block("everything"):
            pass
