"""Distillation losses, importance, slicing and loading of pruned models (tasks.compression)."""

import copy
import math

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from transformers import (AutoModel, BertConfig, BertForQuestionAnswering, BertForSequenceClassification,
                          BertForTokenClassification, BertModel)

from tasks.compression.distill import (KdConfig, Match, SoftLabels, check_student, distill, layer_map_for,
                                       student_encoder, student_layer_map)
from tasks.compression.losses import LABEL_KEYS, attention_mse, hidden_mse, kd_loss, prediction_logits, temperature_at
from tasks.compression.encoder import encoder_of, gates, heads_of, record_shape, slice_layer
from tasks.compression.prune import (Importance, Renumbered, choose, importance, load_pruned, prune, prune_vocabulary,
                                     save_pruned, used_ids)
from tasks.core.errors import ParamsError
from tasks.core.params import Student, load_params
from tasks.downstream.families import FAMILIES
from tasks.downstream.finetune import fit
from tasks.training.batching import pad_batch

VOCAB = 60


def tiny_config(**overrides) -> BertConfig:
    values = dict(vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=24, max_position_embeddings=32, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0)
    return BertConfig(**{**values, **overrides})


class Toy:
    """An encoded classification split: random ids of varied lengths, labels from the first token."""

    def __init__(self, n: int = 48, seed: int = 0, length: int = 12):
        rng = np.random.default_rng(seed)
        self.lengths = rng.integers(4, length + 1, n)
        self.ids = np.zeros((n, length), dtype=np.int64)
        for i, k in enumerate(self.lengths):
            self.ids[i, :k] = rng.integers(5, VOCAB, k)
        self.labels = (self.ids[:, 0] % 2).astype(np.int64)

    def __len__(self):
        return len(self.lengths)

    def batch(self, index):
        index = np.asarray(index)
        ids = torch.from_numpy(self.ids[index])
        return {"input_ids": ids, "attention_mask": (ids != 0).long(), "token_type_ids": torch.zeros_like(ids),
                "labels": torch.from_numpy(self.labels[index])}


def classifier(seed: int = 0, **overrides) -> BertForSequenceClassification:
    torch.manual_seed(seed)
    return BertForSequenceClassification(tiny_config(num_labels=2, **overrides)).eval()


# ---- distillation losses -------------------------------------------------------------------------

def test_kd_loss_by_hand():
    # p_T = (3/4, 1/4), p_S = (1/2, 1/2): KL = 3/4 ln(3/2) + 1/4 ln(1/2)
    kl = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    student, teacher = torch.zeros(1, 2), torch.tensor([[math.log(3.0), 0.0]])
    assert kd_loss(student, teacher, 1.0).item() == pytest.approx(kl, rel=1e-6)
    # at τ = 2 the same distributions need logits twice as far apart; τ² scales the KL
    assert kd_loss(student, 2 * teacher, 2.0).item() == pytest.approx(4 * kl, rel=1e-6)
    assert kd_loss(student, 2 * teacher, 2.0, scale_by_t2=False).item() == pytest.approx(kl, rel=1e-6)
    # zero when the student matches up to a shift; mean over rows
    logits = torch.randn(5, 7)
    assert kd_loss(logits + 3.0, logits, 4.0).item() == pytest.approx(0.0, abs=1e-6)
    rows = torch.cat([student, student]), torch.cat([teacher, student])
    assert kd_loss(*rows, 1.0).item() == pytest.approx(kl / 2, rel=1e-6)


def test_kd_loss_is_textbrewer_cross_entropy_minus_teacher_entropy():
    """TextBrewer's kd_ce_loss (−Σ p_T log p_S, unscaled) = our KL (unscaled) + H(p_T): same gradient."""
    torch.manual_seed(0)
    s, t, tau = torch.randn(6, 5, requires_grad=True), torch.randn(6, 5), 3.0
    p_t = torch.softmax(t / tau, -1)
    textbrewer_ce = -(p_t * torch.log_softmax(s / tau, -1)).sum(-1).mean()
    entropy = -(p_t * torch.log(p_t)).sum(-1).mean()
    ours = kd_loss(s, t, tau, scale_by_t2=False)
    assert ours.item() == pytest.approx((textbrewer_ce - entropy).item(), abs=1e-6)
    g_ours, = torch.autograd.grad(ours, s)
    g_tb, = torch.autograd.grad(textbrewer_ce, s)
    torch.testing.assert_close(g_ours, g_tb)


def test_intermediate_losses_by_hand():
    mask = torch.tensor([[1, 1, 0]])
    s, t = torch.zeros(1, 3, 2), torch.zeros(1, 3, 2)
    t[0, 0] = torch.tensor([1.0, 1.0])
    t[0, 2] = torch.tensor([100.0, 100.0])  # padding: ignored
    assert hidden_mse(s, t, mask).item() == pytest.approx(2 / 4)  # squared errors 1+1 over 2 tokens x 2 dims
    a = torch.softmax(torch.randn(2, 4, 3, 3), -1)
    assert attention_mse(a, a, torch.ones(2, 3)).item() == 0.0
    b = a.clone()
    b[:, :, 2, :] += 1.0  # only the padded query row differs
    assert attention_mse(a, b, torch.tensor([[1, 1, 0], [1, 1, 0]])).item() == 0.0
    # different head counts: compared after averaging over heads
    assert attention_mse(a, a.mean(1, keepdim=True).expand(2, 2, 3, 3), torch.ones(2, 3)).item() == pytest.approx(0)


def test_temperature_schedules():
    assert temperature_at(0, 10, 4.0, "constant") == temperature_at(9, 10, 4.0, "constant") == 4.0
    assert temperature_at(0, 10, 4.0, "anneal") == 4.0
    assert temperature_at(9, 10, 4.0, "anneal") == pytest.approx(1.0)
    assert temperature_at(3, 10, 4.0, "anneal") == pytest.approx(3.0)


def test_prediction_logits_per_family():
    logits = torch.randn(2, 4, 3)
    labels = torch.tensor([[-100, 1, 2, -100], [-100, 0, -100, -100]])
    (rows,) = prediction_logits({"logits": logits}, {"labels": labels})
    assert rows.shape == (3, 3)
    torch.testing.assert_close(rows[2], logits[1, 1])
    start, end = torch.randn(2, 4), torch.randn(2, 4)
    s, e = prediction_logits({"start_logits": start, "end_logits": end},
                             {"attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])})
    assert torch.softmax(s, -1)[0, 3] == 0 and torch.softmax(e, -1)[1, 2:].sum() == 0


# ---- students ------------------------------------------------------------------------------------

def test_student_from_teacher_layers_and_bad_configs():
    torch.manual_seed(0)
    base = BertModel(tiny_config(num_hidden_layers=4), add_pooling_layer=False)
    student = student_encoder(base, 2, 16, 4, 24, layer_map_for(2, 4), seed=1)
    assert layer_map_for(2, 4) == [1, 3] and layer_map_for(3, 12) == [3, 7, 11]
    size = dict(num_hidden_layers=2, hidden_size=16, num_attention_heads=4, intermediate_size=24)
    assert student_layer_map(Student(**size, init="teacher"), 4) == [1, 3]
    assert student_layer_map(Student(**size, init="teacher", layer_map=[0, 2]), 4) == [0, 2]
    assert student_layer_map(Student(**size, init="random"), 4) is None
    for j, t in enumerate([1, 3]):
        for (name, a), b in zip(student.encoder.layer[j].state_dict().items(), base.encoder.layer[t].state_dict().values()):
            assert torch.equal(a, b), name
    assert torch.equal(student.embeddings.word_embeddings.weight, base.embeddings.word_embeddings.weight)
    random = student_encoder(base, 2, 8, 2, 12, None, seed=1)
    assert random.config.hidden_size == 8 and len(random.encoder.layer) == 2
    with pytest.raises(ParamsError, match="teacher's widths"):
        student_encoder(base, 2, 8, 2, 12, [0, 1], seed=1)
    with pytest.raises(ParamsError, match=r"students.l1: layer_map\[1\] = 4 is not a teacher layer \(0..3\).*"
                                          r"matches\[0\].teacher = 9"):
        check_student(2, 4, [0, 4], [Match("hidden_mse", 1, 9)], "compression.students.l1")
    with pytest.raises(ValidationError, match="hidden_size 30 is not a multiple of num_attention_heads 4"):
        Student(num_hidden_layers=1, hidden_size=30, num_attention_heads=4, intermediate_size=8, init="random")
    with pytest.raises(ValidationError, match="layer_map has 1 entries for 2 layers"):
        Student(num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=8, init="teacher",
                layer_map=[0])


def train_args(seed=3):
    return dict(epochs=2, batch_size=8, lr=1e-3, warmup_fraction=0.1, weight_decay=0.01, max_grad_norm=1.0,
                seed=seed, device=torch.device("cpu"), log=lambda _: None)


def test_labels_only_student_trains_exactly_as_finetune():
    """kd_weight 0, no teachers: the same loop as finetune's fit, bit for bit."""
    data = Toy()
    a, b = classifier(1).train(), classifier(1).train()
    fit(a, data, **train_args())
    distill(b, [], data, KdConfig(), **train_args())
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_distillation_pulls_the_student_to_the_teacher():
    data, teacher = Toy(seed=1), classifier(7)
    with torch.no_grad():
        teacher.classifier.weight.mul_(300)  # confident, non-trivial soft labels

    def gap(model):
        model.eval()
        with torch.no_grad():
            batch = data.batch(np.arange(len(data)))
            inputs = {k: v for k, v in batch.items() if k != "labels"}
            return kd_loss(model(**inputs).logits, teacher(**inputs).logits, 1.0).item()

    before = gap(classifier(2))
    args = {**train_args(), "epochs": 8, "lr": 3e-3}
    soft_only, labels_only = classifier(2).train(), classifier(2).train()
    distill(soft_only, [teacher], data, KdConfig(temperature=2.0, kd_weight=1.0, hard_weight=0.0), **args)
    distill(labels_only, [teacher], data, KdConfig(), **args)
    matched = classifier(2, hidden_size=8, num_attention_heads=2).train()  # narrower: learned projection
    summary = distill(matched, [teacher], data, KdConfig(temperature=2.0, kd_weight=1.0, hard_weight=0.0, matches=(
        Match("hidden_mse", 2, 2), Match("attention_mse", 1, 1), Match("cos", 0, 0))), **args)
    assert gap(soft_only) < 0.5 * before and gap(soft_only) < 0.5 * gap(labels_only)
    assert gap(matched) < before and summary["match_loss"] > 0


class Ragged:
    """Examples of 4-12 tokens, right-padded to the longest of each batch, with the labels of
    one family: a class, a tag per token (ends unlabelled), or an answer span."""

    def __init__(self, family: str, n: int = 37, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.family, self.lengths = family, rng.integers(4, 13, n)
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)])
        self.ids = rng.integers(5, VOCAB, self.offsets[-1])
        ends = np.concatenate([self.offsets[:-1], self.offsets[1:] - 1])  # [CLS] and [SEP]: unlabelled
        self.tags = np.where(np.isin(np.arange(self.offsets[-1]), ends), -100, self.ids % 3)

    def __len__(self):
        return len(self.lengths)

    def batch(self, index):
        index = np.asarray(index)
        ids, valid = pad_batch(self.ids, self.offsets, index)
        batch = {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(valid.astype(np.int64)),
                 "token_type_ids": torch.zeros(ids.shape, dtype=torch.int64)}
        if self.family == "classification":
            batch["labels"] = torch.from_numpy(self.ids[self.offsets[index]] % 2)
        elif self.family == "ner":
            batch["labels"] = torch.from_numpy(pad_batch(self.tags, self.offsets, index, pad_value=-100)[0])
        else:
            batch["start_positions"] = torch.ones(len(index), dtype=torch.int64)
            batch["end_positions"] = torch.from_numpy(self.lengths[index] - 2)
        return batch


def family_model(family: str, seed: int):
    torch.manual_seed(seed)
    kind = {"classification": BertForSequenceClassification, "ner": BertForTokenClassification,
            "mrc": BertForQuestionAnswering}[family]
    return kind(tiny_config(num_labels=3 if family == "ner" else 2)).eval()


@pytest.mark.parametrize("family", ["classification", "ner", "mrc"])
def test_soft_labels_are_the_teachers_rows_in_any_batch(family):
    """Rows computed once in fixed chunks equal the rows of a teacher forward pass on any other
    batch (another order, another padded width), alone and averaged over teachers."""
    data, teachers = Ragged(family), [family_model(family, 1), family_model(family, 2)]
    soft = [SoftLabels.of(t, data, batch_size=5, device=torch.device("cpu")) for t in teachers]
    ensemble = SoftLabels.mean(soft)
    for index in (np.array([36, 3, 17, 0, 8]), np.array([12]), np.arange(37)[::-1]):
        batch = data.batch(index)
        inputs = {k: v for k, v in batch.items() if k not in LABEL_KEYS}
        with torch.no_grad():
            online = [prediction_logits(t(**inputs), batch) for t in teachers]
        for labels, rows in zip(soft, online):
            assert [r.shape for r in labels.rows(index)] == [r.shape for r in rows]
            for a, b in zip(labels.rows(index), rows):
                torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        for a, *b in zip(ensemble.rows(index), *online):
            torch.testing.assert_close(a, torch.stack(b).mean(0), atol=1e-5, rtol=1e-5)


def test_distilling_from_soft_labels_is_distilling_from_the_teacher():
    """Precomputed soft labels train the student as the teacher's forward pass at every step
    does, up to float rounding: same loss, same weights."""
    data, teacher = Ragged("classification", n=48), family_model("classification", 7)
    with torch.no_grad():
        teacher.classifier.weight.mul_(30)
    config = KdConfig(temperature=2.0, kd_weight=1.0)
    a, b = family_model("classification", 2).train(), family_model("classification", 2).train()
    online = distill(a, [teacher], data, config, **train_args())
    cached = distill(b, [], data, config, soft_labels=SoftLabels.of(teacher, data, 16, torch.device("cpu")),
                     **train_args())
    assert online["kd_loss"] > 0 and cached["kd_loss"] == pytest.approx(online["kd_loss"], rel=1e-4)
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=name)


# ---- pruning -------------------------------------------------------------------------------------

def _logits(model, data):
    batch = data.batch(np.arange(len(data)))
    with torch.no_grad():
        return model(**{k: v for k, v in batch.items() if k != "labels"}).logits


def test_importance_is_the_gate_gradient_by_finite_differences():
    torch.manual_seed(0)
    model = classifier(3).double()
    data = Toy(n=16)
    score = importance(model, data, "supervised", examples=16, batch_size=16, device=torch.device("cpu"))
    encoder = encoder_of(model)
    batch = data.batch(np.arange(16))

    def loss(layer, kind, j, delta):
        heads = [torch.ones(4, dtype=torch.float64) for _ in range(2)]
        ffn = [torch.ones(24, dtype=torch.float64) for _ in range(2)]
        (heads if kind == "head" else ffn)[layer][j] += delta
        with torch.no_grad(), gates(encoder, heads, ffn):
            return model(**batch).loss.item()

    eps = 1e-5
    for layer, kind, j in [(0, "head", 2), (1, "head", 0), (0, "ffn", 5), (1, "ffn", 23)]:
        numeric = abs(loss(layer, kind, j, eps) - loss(layer, kind, j, -eps)) / (2 * eps)
        analytic = (score.heads if kind == "head" else score.ffn)[layer][j]
        assert analytic == pytest.approx(numeric, rel=1e-4, abs=1e-9)
    self_supervised = importance(model, data, "self_supervised", examples=16, batch_size=16,
                                 device=torch.device("cpu"))
    assert all(h.sum() > 0 for h in self_supervised.heads)
    assert not np.allclose(self_supervised.heads[0], score.heads[0])


def test_slicing_equals_masking_and_nothing_pruned_is_identical():
    data, model = Toy(n=10), classifier(4)
    same = copy.deepcopy(model)
    for layer in encoder_of(same).encoder.layer:
        slice_layer(layer, torch.arange(4), torch.arange(24))
    assert torch.equal(_logits(same, data), _logits(model, data))

    sliced = copy.deepcopy(model)
    keep_heads, keep_ffn = torch.tensor([0, 2, 3]), torch.tensor([1, 4, 7, 20])
    slice_layer(encoder_of(sliced).encoder.layer[1], keep_heads, keep_ffn)
    head_gates = [torch.ones(4), torch.tensor([1.0, 0.0, 1.0, 1.0])]
    ffn_gates = [torch.ones(24), torch.zeros(24).index_fill_(0, keep_ffn, 1.0)]
    with gates(encoder_of(model), head_gates, ffn_gates):
        masked = _logits(model, data)
    torch.testing.assert_close(_logits(sliced, data), masked, atol=1e-6, rtol=1e-5)
    assert heads_of(encoder_of(sliced).encoder.layer[1]) == 3
    with pytest.raises(ValueError, match="keep_heads"):
        slice_layer(encoder_of(sliced).encoder.layer[0], torch.tensor([], dtype=torch.long))


def test_choose_homogeneous_and_uneven():
    scores = [np.array([0.1, 0.9, 0.5, 0.5]), np.array([0.0, 0.05, 0.02, 0.01])]
    assert [k.tolist() for k in choose(scores, 2, "homogeneous")] == [[1, 2], [1, 2]]
    # uneven: 4 in all, each layer keeps its best, the rest ranked across layers (ties: layer, index)
    assert [k.tolist() for k in choose(scores, 2, "uneven")] == [[1, 2, 3], [1]]
    assert [k.tolist() for k in choose(scores, 9, "uneven")] == [[0, 1, 2, 3], [0, 1, 2, 3]]


@pytest.mark.parametrize("allocation,n_iters", [("homogeneous", 1), ("uneven", 3)])
def test_prune_reaches_the_target(allocation, n_iters):
    data, model = Toy(n=32), classifier(5)
    history = prune(model, data, heads=2, ffn=12, kind="supervised", allocation=allocation, n_iters=n_iters,
                    examples=32, batch_size=16, device=torch.device("cpu"))
    assert len(history) == n_iters
    assert sum(history[-1]["heads"]) == 4 and sum(history[-1]["ffn"]) == 24
    if allocation == "homogeneous":
        assert history[-1] == {"heads": [2, 2], "ffn": [12, 12]}
    assert _logits(model, data).shape == (32, 2)


def test_prune_from_a_precomputed_first_importance():
    data, model = Toy(n=32), classifier(6)
    knobs = dict(heads=2, ffn=12, kind="self_supervised", allocation="uneven", examples=32, batch_size=16,
                 device=torch.device("cpu"))
    first = importance(copy.deepcopy(model), data, "self_supervised", examples=32, batch_size=16,
                       device=torch.device("cpu"))
    for n_iters in (3, 1):  # the one-shot and the iterative variant share the unpruned model's IS
        alone, shared = copy.deepcopy(model), copy.deepcopy(model)
        assert prune(alone, data, n_iters=n_iters, **knobs) == prune(shared, data, n_iters=n_iters, first=first,
                                                                       **knobs)
        assert all(torch.equal(a, b) for a, b in zip(alone.state_dict().values(), shared.state_dict().values()))
    # and it is used: reversed scores keep other structures
    flipped = copy.deepcopy(model)
    prune(flipped, data, n_iters=1, first=Importance([-h for h in first.heads], [-f for f in first.ffn]), **knobs)
    assert not torch.equal(_logits(flipped, data), _logits(shared, data))


def test_pruned_models_load(tmp_path):
    params = load_params()
    training, family = params.finetune.for_task(params.task("sentiment")), FAMILIES["classification"]
    torch.manual_seed(0)
    BertModel(tiny_config()).save_pretrained(tmp_path / "base")
    data = Toy(n=20)
    model = family.model(tmp_path / "base", ["0", "1"], training).eval()

    # FFN pruned alike in every layer, every head kept: an ordinary smaller BERT for AutoModel
    ffn_only = copy.deepcopy(model)
    for layer in encoder_of(ffn_only).encoder.layer:
        slice_layer(layer, None, torch.arange(10))
    record_shape(encoder_of(ffn_only))
    encoder_of(ffn_only).save_pretrained(tmp_path / "plain")
    plain = AutoModel.from_pretrained(tmp_path / "plain").eval()
    inputs = {k: v for k, v in data.batch(np.arange(20)).items() if k != "labels"}
    with torch.no_grad():
        torch.testing.assert_close(plain(**inputs).last_hidden_state,
                                   encoder_of(ffn_only)(**inputs).last_hidden_state)

    # uneven heads and FFN, and a pruned vocabulary: the documented loader
    uneven = copy.deepcopy(model)
    layers = encoder_of(uneven).encoder.layer
    slice_layer(layers[0], torch.tensor([1]), torch.arange(5))
    slice_layer(layers[1], torch.tensor([0, 3]), torch.arange(17))
    record_shape(encoder_of(uneven))
    new_id = prune_vocabulary(uneven, used_ids([data], [0, 1, 2, 3, 4]))
    save_pruned(uneven, tmp_path / "uneven")
    loaded = load_pruned(family, tmp_path / "uneven", tmp_path / "base", ["0", "1"], training)
    renumbered = Renumbered(data, new_id)
    assert encoder_of(loaded).config.layer_heads == [1, 2]
    assert torch.equal(_logits(loaded, renumbered), _logits(uneven, renumbered))


def test_vocabulary_pruning_keeps_predictions():
    data = Toy(n=20, seed=3)
    model = classifier(6)
    before = _logits(model, data)
    keep = used_ids([data], [0, 1, 2, 3, 4])
    assert len(keep) < VOCAB
    new_id = prune_vocabulary(model, keep)
    assert model.bert.embeddings.word_embeddings.num_embeddings == len(keep)
    assert torch.equal(_logits(model, Renumbered(data, new_id)), before)


def test_token_classification_students_and_gates_run():
    """NER heads: per-token KD rows, and gates on a token classifier."""
    torch.manual_seed(0)
    model = BertForTokenClassification(tiny_config(num_labels=3)).eval()
    ids = torch.randint(5, VOCAB, (2, 6))
    labels = torch.tensor([[-100, 1, 2, 0, -100, -100], [-100, 2, -100, 1, 1, -100]])
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids))
    (rows,) = prediction_logits(out, {"labels": labels})
    assert rows.shape == (6, 3)
    with gates(encoder_of(model), [torch.zeros(4), torch.zeros(4)], None):
        zeroed = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    assert not torch.allclose(zeroed, out.logits)
