"""CINO's fast MLM (tasks/multilingual/fast_mlm.py): the vocabularies are each language's tokens, the
loss is the cross-entropy over them, it equals the full softmax when they are the whole vocabulary,
and training with gradient accumulation follows the single-batch curve."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM

from tasks.core.params import Pretrain
from tasks.multilingual.fast_mlm import FastMLM, GroupedExamples, language_vocabularies
from tasks.pretraining.heldout import word_ids_for
from tasks.pretraining.masking import MaskingConfig
from tasks.pretraining.modeling import PretrainingModel
from tasks.pretraining.examples import DynamicMasker, _rows
from tasks.pretraining.pretrain import train

VOCAB, MASK = 60, 3


def grouped(n=48, seed=0):
    """Sequences of two languages with disjoint token ranges (5-29 and 30-59), masked dynamically."""
    rng = np.random.default_rng(seed)
    groups = np.arange(n) % 2
    seqs = [np.concatenate([[1], rng.integers(5 + 25 * g, 30 + 30 * g, int(rng.integers(8, 20))), [2]])
            for g in groups]
    ids = np.concatenate(seqs).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    masker = DynamicMasker(MaskingConfig(scheme="mlm", masked_lm_prob=0.15, max_predictions=5), 0, "t", MASK,
                           np.arange(5, VOCAB, dtype=np.int32))
    return GroupedExamples(ids, offsets, word_ids=word_ids_for(ids, offsets), masker=masker, groups=groups)


def mlm(seed=0):
    torch.manual_seed(seed)
    return BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0))  # no dropout: curves comparable


def test_vocabularies_are_the_sorted_tokens_of_each_language():
    data = grouped()
    vocab = language_vocabularies(data, 3)
    for g in range(2):
        seqs = [data.ids[0][data.id_offsets[0][i]:data.id_offsets[0][i + 1]] for i in np.flatnonzero(data.groups == g)]
        assert vocab[g].tolist() == sorted(set(np.concatenate(seqs).tolist()))
    assert vocab[0].max() < 30 <= vocab[1][vocab[1] > 2].min() and len(vocab[2]) == 0


def test_loss_is_the_cross_entropy_over_the_language_vocabulary():
    data, model = grouped(), mlm()
    vocab = language_vocabularies(data, 2)
    fast = FastMLM(model, vocab).eval()
    b = data.batch(np.arange(16), step=3)
    loss, parts = fast(b)
    hidden = model.bert(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
    logits = model.cls(hidden[b["rows"], b["cols"]])
    expected, correct = [], 0
    for k, g in enumerate(b["groups"][b["rows"]].tolist()):
        v = torch.as_tensor(vocab[g])
        target = int(torch.nonzero(v == b["labels"][k]))
        expected.append(F.cross_entropy(logits[k, v][None], torch.tensor([target])))
        correct += int(logits[k, v].argmax() == target)
    assert torch.allclose(loss, torch.stack(expected).mean(), atol=1e-5)
    assert int(parts["token_correct"]) == correct
    # over the whole vocabulary it is the plain MLM loss
    whole = FastMLM(model, [np.arange(VOCAB)] * 2).eval()
    assert torch.allclose(whole(b)[0], PretrainingModel(model).eval()(b)[0], atol=1e-5)


def test_a_label_outside_its_language_vocabulary_is_an_error():
    data = grouped()
    vocab = language_vocabularies(data, 2)
    fast = FastMLM(mlm(), [vocab[1], vocab[0]])  # swapped: no label is in its group's vocabulary
    with pytest.raises(ValueError, match="outside its language's vocabulary"):
        fast(data.batch(np.arange(8), step=0))


def test_micro_batches_keep_each_rows_group():
    b = grouped().batch(np.arange(8), step=1)
    part = _rows(b, 2, 6)
    assert part["groups"].tolist() == b["groups"][2:6].tolist()


def test_accumulation_follows_the_single_batch_curve(tmp_path):
    data = grouped(96)
    curves = []
    for accumulation in (1, 2):
        cfg = Pretrain(seeds=[1], snapshots=[], token_budget=2500, batch_size=8, accumulation_steps=accumulation,
                       learning_rate=1e-3,
                       warmup_fraction=0.1, weight_decay=0.01, max_grad_norm=1.0, log_every=5,
                       checkpoint_every=1000, device="cpu")
        model = FastMLM(mlm(), language_vocabularies(data, 2))
        summary = train.fn(model, data, cfg, seed=0, device=torch.device("cpu"), checkpoint=tmp_path / f"{accumulation}.pt",
                           fingerprint="x", log=lambda _: None)
        curves.append([r["loss"] for r in summary["rows"]])
    assert len(curves[0]) > 3
    np.testing.assert_allclose(curves[0], curves[1], rtol=1e-4)
