"""The unpadded encoder (benchmarks/unpadded_bert.py): the padded encoder's function on the real tokens."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM, BertModel

from tasks.pretraining.modeling import PretrainingModel
from benchmarks.unpadded_bert import unpad


def _bert(**kw) -> BertForMaskedLM:
    torch.manual_seed(0)
    return BertForMaskedLM(BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=32, **kw))


def _batch(lengths=(12, 5, 8, 1 + 2), width=12) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor(lengths)
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    ids = torch.randint(5, 120, (len(lengths), width), generator=g) * mask
    types = torch.zeros_like(ids)
    types[0, 7:12] = 1  # a second segment in the first row
    rows = torch.tensor([0, 0, 1, 2, 3])
    cols = torch.tensor([3, 9, 2, 6, 1])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "rows": rows, "cols": cols,
            "labels": ids[rows, cols].clone()}


def test_unpadded_encoder_gives_the_padded_output_and_gradients_at_every_real_token():
    model, batch = PretrainingModel(_bert()).eval(), _batch()
    real = batch["attention_mask"].bool()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    padded = model.mlm.bert(**inputs).last_hidden_state
    loss, _ = model(batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()

    restore = unpad(model.mlm.bert)
    unpadded = model.mlm.bert(**inputs).last_hidden_state
    assert unpadded.shape == padded.shape
    torch.testing.assert_close(unpadded[real], padded[real], atol=1e-5, rtol=1e-5)
    assert unpadded[~real].abs().max() == 0  # padding is zeros, never read by a head
    loss_unpadded, _ = model(batch)
    torch.testing.assert_close(loss_unpadded, loss, atol=1e-5, rtol=1e-5)
    loss_unpadded.backward()
    for name, grad in grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-5, rtol=1e-4, msg=name)

    restore()  # back to the padded encoder, bit for bit
    assert model.mlm.config._attn_implementation == "sdpa"
    assert torch.equal(model.mlm.bert(**inputs).last_hidden_state, padded)


def test_the_state_dict_and_the_saved_config_are_an_ordinary_berts(tmp_path):
    model = _bert()
    keys = set(model.state_dict())
    restore = unpad(model.bert)
    assert set(model.state_dict()) == keys
    model.save_pretrained(tmp_path)
    assert "zhplm" not in (tmp_path / "config.json").read_text(encoding="utf-8")
    restore()


def test_attention_dropout_applies_within_each_sequence_only():
    """Training mode: dropout on the attention weights, and still no token sees another sequence."""
    model, batch = _bert(attention_probs_dropout_prob=0.5, hidden_dropout_prob=0.0), _batch()
    unpad(model.bert)
    model.train()
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    first = model.bert(**inputs).last_hidden_state
    changed = dict(inputs, input_ids=inputs["input_ids"].clone())
    changed["input_ids"][1, :5] = 7  # the second sequence only
    torch.manual_seed(0)
    a = model.bert(**inputs).last_hidden_state
    torch.manual_seed(0)
    b = model.bert(**changed).last_hidden_state
    assert not torch.equal(first, a)  # dropout acts
    assert torch.equal(a[0], b[0]) and torch.equal(a[2:], b[2:]) and not torch.equal(a[1], b[1])


def test_a_model_with_a_pooler_is_refused():
    with pytest.raises(ValueError, match="pooler"):
        unpad(BertModel(_bert().config))


def test_the_varlen_kernel_refuses_attention_dropout():
    """FlashAttention's varlen kernel has none: training with it would silently change BERT's recipe."""
    model, batch = _bert(attention_probs_dropout_prob=0.1), _batch()
    unpad(model.bert, kernel="varlen")
    with pytest.raises(ValueError, match="no attention dropout"):
        model.train().bert(**{k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
