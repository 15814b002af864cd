"""The pinyin kind (PLOME's pronunciation prediction): its classes, its head beside MLM's, its logged parts,
its gate, and that an objective without it builds the very model it built before the kind existed."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast

from tasks.core.params import Objective, load_params
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.modeling import PretrainingModel, pretraining_model
from tasks.pretraining.objectives import build, describe
from tasks.pretraining.objectives.pinyin import Pinyin, pinyin_classes, pinyin_head, trivial_rate
from tasks.pretraining.pretrain import train
from tests.test_pretrain import cfg

VOCAB = Path(__file__).parent / "data" / "multilingual" / "bert_vocab" / "vocab.txt"


@pytest.fixture(scope="module")
def tokenizer():
    return BertTokenizerFast(str(VOCAB))


def test_each_token_gets_its_toneless_syllable_or_the_no_reading_class():
    vocab = {"[PAD]": 0, "[UNK]": 1, "的": 2, "得": 3, "在": 4, "再": 5, "a": 6, "##好": 7, "好": 8}
    classes, names = pinyin_classes(vocab, 10)
    assert names == ["", "de", "hao", "zai"] and classes.tolist() == [0, 0, 1, 1, 3, 3, 0, 0, 2, 0]
    assert trivial_rate(np.array([2, 3, 6, 4]), classes) == 0.5  # "de" twice of four


def _model(tokenizer, seed=0):
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=32, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    model = PretrainingModel(BertForMaskedLM(config))
    model.add_head("pinyin", pinyin_head(config, *pinyin_classes(tokenizer.get_vocab(), len(tokenizer))))
    return model


def _data(tokenizer, n=40, seed=0):
    """Sequences of the vocabulary's Chinese characters, two of each [MASK]ed and labelled."""
    chinese = np.array([i for t, i in tokenizer.get_vocab().items() if len(t) == 1 and "\u4e00" <= t <= "\u9fff"])
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "masked_positions": [], "masked_labels": []}
    for _ in range(n):
        ids = np.concatenate([[tokenizer.cls_token_id], rng.choice(chinese[:40], int(rng.integers(6, 20))),
                              [tokenizer.sep_token_id]])
        pos = np.sort(rng.choice(np.arange(1, len(ids) - 1), 2, replace=False))
        rows["masked_labels"].append(ids[pos].tolist())
        ids[pos] = tokenizer.mask_token_id
        rows["input_ids"].append(ids.tolist())
        rows["masked_positions"].append(pos.tolist())
    return PretrainingExamples.from_table(pa.table(rows))


def test_the_head_adds_its_cross_entropy_to_the_token_loss_and_its_flops(tokenizer):
    model, data = _model(tokenizer), _data(tokenizer)
    batch = data.batch(np.arange(8), step=0)
    loss, parts = model(batch)
    assert {"pinyin_loss", "pinyin_correct"} <= set(parts)
    hidden = model.mlm.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    head = model.heads["pinyin"]
    logits = head.decoder(head.transform(hidden[batch["rows"], batch["cols"]]))
    targets = head.classes[batch["labels"]]
    assert (targets > 0).all()  # Chinese characters: each has a reading
    torch.testing.assert_close(parts["pinyin_loss"], F.cross_entropy(logits, targets))
    torch.testing.assert_close(loss, parts["token_loss"] + parts["pinyin_loss"])
    lengths, predicted = batch["attention_mask"].sum(1).numpy(), len(batch["labels"])
    without = PretrainingModel(model.mlm)
    assert model.flops(lengths, predicted) - without.flops(lengths, predicted) == pytest.approx(
        3 * head.flops(predicted))
    assert set(model.extra_heads()) == {"heads.pinyin.transform.0.weight", "heads.pinyin.transform.0.bias",
                                        "heads.pinyin.transform.2.weight", "heads.pinyin.transform.2.bias",
                                        "heads.pinyin.decoder.weight", "heads.pinyin.decoder.bias"}


def test_training_logs_the_head_and_its_gate_must_beat_the_most_frequent_reading(tokenizer, tmp_path):
    model, data = _model(tokenizer), _data(tokenizer)
    recipe = cfg(token_budget=6000, learning_rate=3e-3)
    summary = train.fn(model, data, recipe, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "last.pt",
                       fingerprint="f", log=lambda _: None, logged=Pinyin.logged)
    rows = summary["rows"]
    assert {"pinyin_loss", "pinyin_accuracy"} <= set(rows[0]) and summary["final_pinyin_accuracy"] is not None
    assert rows[-1]["pinyin_loss"] < rows[0]["pinyin_loss"]
    [gate] = Pinyin().log_gates(rows, data, recipe, model, None)
    trivial = trivial_rate(np.concatenate(data.labels), model.heads["pinyin"].classes.numpy())
    assert gate.threshold == pytest.approx(trivial) and 0 < trivial < 0.5 and gate.above  # 19% vs 6%
    assert "pinyin" in gate.name


def test_the_registry_builds_it_from_its_params_and_leaves_other_objectives_models_as_they_were(tokenizer):
    params = load_params()
    objective = build(params, "mlm_pinyin")
    assert "pinyin (PLOME)" in describe(objective.spec) and objective.logged == Pinyin.logged
    model = objective.model(params, tokenizer, seed=3)
    assert list(model.heads) == ["pinyin"] and model.heads["pinyin"].decoder.in_features == params.model.hidden_size
    plain, direct = build(params, "mlm").model(params, tokenizer, seed=3), pretraining_model(params, tokenizer, 3)
    assert not list(plain.heads) and plain.state_dict().keys() == direct.state_dict().keys()
    assert all(torch.equal(v, direct.state_dict()[k]) for k, v in plain.state_dict().items())
    mlm_part = {k: v for k, v in model.state_dict().items() if not k.startswith("heads.")}
    assert all(torch.equal(v, direct.state_dict()[k]) for k, v in mlm_part.items())  # the head comes after


@pytest.mark.parametrize("other", [{"replacement": {"permute": 0.9, "keep": 0.1}},
                                   {"rtd": {"generator_size": 0.25, "weight": 50}}])
def test_pinyin_needs_the_original_tokens_as_labels(other):
    spec = {"masking": "ngram", "replacement": {"mask": 0.8, "random": 0.1, "keep": 0.1}, "pinyin": True, **other}
    with pytest.raises(ValueError, match="pinyin reads the original character"):
        Objective(**spec)
