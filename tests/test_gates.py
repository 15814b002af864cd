"""The learned-its-objective gates: their statistics, a model trained on a learnable task passes,
the same model trained with shuffled labels (nothing to learn from context) fails, a collapsed
encoder fails the collapse gate, and the local-attention initialisation looks at the neighbours."""

import numpy as np
import pyarrow as pa
import pytest
import torch

from tasks.core.params import ModelSize
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.gates import (Gate, clustered_mean, collapse_gate, mlm_gates,
                                     perlm_trivial_rate, proportion_gate, training_log_gate,
                                     unigram_log_probs)
from tasks.pretraining.heldout import evaluate_mlm, token_state_sums
from tasks.pretraining.modeling import PretrainingModel, bert_config, new_masked_lm
from tasks.pretraining.pretrain import train
from tests.test_pretrain import cfg

VOCAB, MASK = 40, 3


def test_clustered_mean_is_the_sandwich_variance_of_a_ratio_mean():
    values = np.array([1.0, 3.0, 2.0, 2.0, 6.0])
    clusters = np.array([0, 0, 1, 1, 2])
    mean, se = clustered_mean(values, clusters)
    sums = np.array([4 - 2 * 2.8, 4 - 2 * 2.8, 6 - 2.8])
    assert mean == pytest.approx(2.8)
    assert se == pytest.approx(np.sqrt(3 / 2 * (sums ** 2).sum()) / 5)


def test_collapse_gate_tells_one_direction_from_many():
    rng = np.random.default_rng(0)
    counts = np.full(20, 10)
    same = np.tile(np.eye(8)[0] * 10, (20, 1))  # every token state the same unit vector: cosine 1
    spread = np.stack([rng.normal(size=(10, 8)) for _ in range(20)])
    spread = (spread / np.linalg.norm(spread, axis=-1, keepdims=True)).sum(1)
    assert collapse_gate(same, counts).value == pytest.approx(1.0) and not collapse_gate(same, counts).passed
    assert abs(collapse_gate(spread, counts).value) < 0.1 and collapse_gate(spread, counts).passed


def test_proportion_and_training_log_gates():
    assert proportion_gate("x", 600, 1000, 0.5).passed and not proportion_gate("x", 510, 1000, 0.5).passed
    rows = [{"sentence_accuracy": 0.5, "token_accuracy": 0.2}] * 9 + [{"sentence_accuracy": 0.9,
                                                                     "token_accuracy": 0.4}]
    sop = training_log_gate(rows, "sentence_accuracy", 160, "SOP accuracy above chance", 0.5)
    perlm = training_log_gate(rows, "token_accuracy", 2000, "PerLM accuracy above its trivial rate", 0.1)
    assert sop.name.startswith("SOP") and sop.value == pytest.approx(0.9) and sop.passed  # the last tenth only
    assert perlm.value == pytest.approx(0.4) and perlm.passed
    assert not training_log_gate(rows[:9], "sentence_accuracy", 160, "NSP accuracy above chance", 0.5).passed


def test_perlm_trivial_rate_counts_the_tokens_that_stay():
    positions, labels = np.array([1, 2, 3, 4]), np.array([1, 3, 2, 4])  # two stay where they are
    assert perlm_trivial_rate(positions, labels, tokens=10, full_targets=False) == 0.5
    assert perlm_trivial_rate(positions, labels, tokens=10, full_targets=True) == 0.8  # + 6 unchosen


def test_a_gate_passes_only_when_its_whole_interval_is_on_the_right_side():
    assert Gate("g", 0.8, 0.75, 0.85, 0.7, above=True).passed
    assert not Gate("g", 0.8, 0.65, 0.95, 0.7, above=True).passed
    assert Gate("g", 0.1, 0.05, 0.15, 0.2, above=False).record()["passed"] is True
    nan = Gate("g", float("nan"), float("nan"), float("nan"), 0.7, above=True)
    assert not nan.passed and nan.record()["value"] is None  # a value the data cannot give fails, and is JSON


def test_the_unigram_loss_is_finite_for_every_label_unk_included():
    logp = unigram_log_probs(np.array([0, 5, 0, 0, 90, 3]))  # [PAD] [UNK] [CLS] [SEP] x y: [UNK] can be a label
    assert np.isfinite(logp).all() and np.exp(logp).sum() == pytest.approx(1) and logp.argmax() == 4


# --------------------------------------------------------------------------- learnable vs broken


def _copy_task(n: int, seed: int, shuffle: bool) -> PretrainingExamples:
    """Sequences of runs of one token ("a a a b b b b ..."), 2 positions masked each: a masked token
    is its neighbours' (learnable from context alone); ``shuffle`` permutes the labels over all
    positions of the data, which keeps their unigram distribution and leaves nothing to learn."""
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "masked_positions": [], "masked_labels": []}
    for _ in range(n):
        ids = np.concatenate([[1], np.repeat(rng.integers(4, VOCAB, 6), 4), [2]])
        pos = np.sort(rng.choice(np.arange(2, len(ids) - 2), 2, replace=False))
        rows["masked_labels"].append(ids[pos].tolist())
        ids[pos] = MASK
        rows["input_ids"].append(ids.tolist())
        rows["masked_positions"].append(pos.tolist())
    if shuffle:
        flat = rng.permutation(np.concatenate(rows["masked_labels"]))
        rows["masked_labels"] = flat.reshape(n, 2).tolist()
    return PretrainingExamples.from_table(pa.table(rows))


def _trained(shuffle: bool, tmp_path) -> tuple[list[Gate], Gate]:
    size = ModelSize(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, sinusoidal_position_amplitude=0.1,
                     local_attention_layers=1)
    model = PretrainingModel(new_masked_lm(bert_config(size, VOCAB, 32), 0, size))
    data = _copy_task(300, 0, shuffle)
    train.fn(model, data, cfg(token_budget=60000, batch_size=8, learning_rate=3e-3), seed=0,
             device=torch.device("cpu"), checkpoint=tmp_path / f"{shuffle}.pt", fingerprint="x", log=lambda _: None)
    rng = np.random.default_rng(1)  # held-out text: unmasked runs (evaluate_mlm masks them)
    held = [np.concatenate([[1], np.repeat(rng.integers(4, VOCAB, 6), 4), [2]]) for _ in range(60)]
    ids, offsets = np.concatenate(held), np.arange(61) * len(held[0])
    counts = np.bincount(np.concatenate([*data.ids, *data.labels]), minlength=VOCAB)
    scores = evaluate_mlm(model.mlm, ids, offsets, lang="x", seed=0, mask_token_id=MASK, masked_lm_prob=0.15,
                          max_predictions=3, device=torch.device("cpu"), positions=True)
    at = scores["positions"]
    gates, _ = mlm_gates(at["losses"], at["correct"], at["labels"], at["rows"], unigram_log_probs(counts))
    return gates, collapse_gate(*token_state_sums(model.mlm.bert, ids, offsets, torch.device("cpu")))


def test_a_learnable_objective_passes_and_shuffled_labels_fail(tmp_path):
    learned, collapse = _trained(False, tmp_path)
    assert all(g.passed for g in learned), learned
    assert collapse.passed
    broken, _ = _trained(True, tmp_path)
    assert not any(g.passed for g in broken), broken


def test_a_gate_on_fewer_held_out_sequences_than_its_interval_needs_reads_na_and_fails():
    """One held-out sequence gave a standard error of 0, so the gates passed on zero-width intervals."""
    from pydantic import ValidationError
    from tasks.core.params.pretraining import MIN_GATE_SEQUENCES, Curves
    rng = np.random.default_rng(0)
    labels = rng.integers(4, VOCAB, 200)
    unigram = unigram_log_probs(np.bincount(labels, minlength=VOCAB))
    for sequences, passes in ((1, False), (MIN_GATE_SEQUENCES - 1, False), (MIN_GATE_SEQUENCES, True)):
        rows = np.arange(200) % sequences
        gates, _ = mlm_gates(np.full(200, 0.01), np.ones(200, dtype=bool), labels, rows, unigram)  # a perfect model
        assert all(g.passed == passes for g in gates), sequences
        assert all(np.isnan(g.low) != passes for g in gates)
    counts = np.full(5, 10)
    assert not collapse_gate(rng.normal(size=(5, 8)), counts).passed  # 5 sequences: no jackknife interval
    with pytest.raises(ValidationError, match="greater than or equal to 20"):
        Curves(heldout_task="sentiment", heldout_sequences=1, tasks=[])
