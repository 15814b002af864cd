"""ELECTRA's replaced-token detection: the discriminator's targets (a sample equal to the original
counts as original), one embedding tensor for generator and discriminator, no gradient through the
sampling into the generator, the generator's size, the export Hugging Face loads with the pipeline's
logits, and the ``mlm_flops`` budget: ELECTRA spends an MLM's FLOPs, to within one step."""

import numpy as np
import pytest
import torch
from transformers import AutoModel, ElectraForMaskedLM, ElectraForPreTraining

from tasks.core.params import ModelSize, Rtd
from tasks.pretraining.objectives.electra import GENERATOR_DIR, electra_configs, new_electra, replace_tokens
from tasks.pretraining.objectives.rtd import AUC_FLOOR, binary_entropy, roc_auc, rtd_gates
from tasks.pretraining.modeling import PretrainingModel, bert_config, new_masked_lm
from tasks.pretraining.saving import save_pretrained
from tasks.pretraining.pretrain import equal_flops_steps, train
from tasks.training.batching import BatchSchedule
from tests.test_pretrain import cfg, tiny_data

SIZE = ModelSize(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                 hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, sinusoidal_position_amplitude=0.0)


def tiny_electra(seed=0):
    return new_electra(SIZE, Rtd(generator_size=0.5), 60, 32, 0, seed)


def test_a_sample_equal_to_the_original_counts_as_original():
    ids = torch.tensor([[2, 4, 4, 9, 3]])  # [CLS] [MASK] [MASK] x [SEP]
    rows, cols = torch.tensor([0, 0]), torch.tensor([1, 2])
    labels, sampled = torch.tensor([7, 8]), torch.tensor([7, 5])  # the first sample is the original
    corrupted, replaced = replace_tokens(ids, rows, cols, sampled, labels)
    assert corrupted.tolist() == [[2, 7, 5, 9, 3]]
    assert replaced.tolist() == [[False, False, True, False, False]]


def test_generator_and_discriminator_share_one_embedding_tensor():
    model = tiny_electra()
    d, g = model.discriminator.electra.embeddings, model.generator.electra.embeddings
    assert g is d
    for name in ("word_embeddings", "position_embeddings", "token_type_embeddings"):
        assert getattr(g, name).weight is getattr(d, name).weight
    assert model.generator.generator_lm_head.weight is d.word_embeddings.weight  # the output layer, tied
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for m in model.saved().values()
                                                             for p in m.parameters())  # counted once


def batch_of(data, n=8):
    return data.batch(np.arange(n))


def test_no_gradient_reaches_the_generator_through_the_sampling():
    model, data = tiny_electra(), tiny_data()
    mlm_loss, rtd_loss, parts = model.losses(batch_of(data))
    rtd_loss.backward()
    generator_own = [p for n, p in model.generator.named_parameters() if "embeddings" not in n]
    assert generator_own and all(p.grad is None for p in generator_own)
    assert model.discriminator.electra.encoder.layer[0].attention.self.query.weight.grad.abs().sum() > 0
    assert model.discriminator.electra.embeddings.word_embeddings.weight.grad.abs().sum() > 0  # shared: from RTD
    model.zero_grad()
    mlm_loss.backward()  # the generator learns from its MLM loss only
    assert all(p.grad is not None for p in generator_own)
    assert 0 <= parts["rtd_correct"] <= int(batch_of(data)["attention_mask"].sum())


def test_the_loss_is_mlm_plus_lambda_times_rtd():
    model, data = tiny_electra(), tiny_data()
    torch.manual_seed(3)
    mlm_loss, rtd_loss, _ = model.losses(batch_of(data))
    torch.manual_seed(3)
    loss, _ = model(batch_of(data))
    torch.testing.assert_close(loss, mlm_loss + 50.0 * rtd_loss)


@pytest.mark.parametrize("size, generator", [
    ((128, 2, 512), (32, 1, 128)),     # the default tiny model: a quarter, at least one head
    ((768, 12, 3072), (192, 3, 768)),  # BERT-base
    ((256, 4, 1024), (64, 1, 256)),    # ELECTRA-Small's generator (hidden 64)
])
def test_generator_has_a_quarter_of_the_discriminators_width(size, generator):
    h, a, i = size
    model_size = SIZE.model_copy(update=dict(hidden_size=h, num_attention_heads=a, intermediate_size=i))
    disc, gen = electra_configs(model_size, 0.25, 100, 128)
    assert (disc.hidden_size, disc.num_attention_heads, disc.intermediate_size) == size
    assert (gen.hidden_size, gen.num_attention_heads, gen.intermediate_size) == generator
    assert gen.embedding_size == disc.embedding_size == h and gen.num_hidden_layers == disc.num_hidden_layers


def test_the_export_loads_with_auto_model_and_gives_the_pipelines_logits(tmp_path):
    from transformers import BertTokenizerFast

    from tests.test_init_from import VOCAB

    model, data = tiny_electra(), tiny_data()
    tokenizer = BertTokenizerFast(vocab_file=str(VOCAB))
    save_pretrained(model, tokenizer, tmp_path)
    model.eval()
    ids = batch_of(data)["input_ids"]
    with torch.no_grad():
        assert type(AutoModel.from_pretrained(tmp_path)).__name__ == "ElectraModel"
        torch.testing.assert_close(ElectraForPreTraining.from_pretrained(tmp_path).eval()(input_ids=ids).logits,
                                   model.discriminator(input_ids=ids).logits)
        generator = ElectraForMaskedLM.from_pretrained(tmp_path / GENERATOR_DIR).eval()
        torch.testing.assert_close(generator(input_ids=ids).logits, model.generator(input_ids=ids).logits)


def test_mlm_flops_budget_gives_electra_the_flops_of_mlm_within_one_step(tmp_path):
    data = tiny_data(n=200)
    mlm = PretrainingModel(new_masked_lm(bert_config(SIZE, 60, 32), 0))
    electra = tiny_electra()
    budget = cfg(token_budget=5000, checkpoint_every=1000)
    runs = {name: train.fn(model, data, budget, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / f"{name}.pt",
                           fingerprint=name, log=lambda _: None, equal_flops=name == "electra")
            for name, model in (("mlm", mlm), ("electra", electra))}
    step = max(electra.flops(data.lengths[i], int(data.predictions[i].sum()))
               for i in map(BatchSchedule(data.lengths, 4, 1), range(runs["electra"]["steps"])))
    assert abs(runs["electra"]["flops"] - runs["mlm"]["flops"]) <= step
    assert runs["electra"]["steps"] < runs["mlm"]["steps"]  # a generator costs FLOPs: fewer steps for the same
    assert equal_flops_steps(mlm, data, BatchSchedule(data.lengths, 4, 1), runs["mlm"]["steps"]) == runs["mlm"]["steps"]


def test_the_held_out_rtd_measure_is_seeded_and_scores_every_token():
    from tasks.pretraining.objectives.electra import evaluate_rtd

    model, data = tiny_electra(), tiny_data()
    ids, offsets = np.concatenate(data.ids), data.id_offsets[0]
    kwargs = dict(lang="x", seed=3, mask_token_id=3, masked_lm_prob=0.15, max_predictions=5,
                  device=torch.device("cpu"))
    first = evaluate_rtd(model.discriminator, model.generator, ids, offsets, **kwargs)
    again = evaluate_rtd(model.discriminator, model.generator, ids, offsets, **kwargs)
    tokens, tokens_again = first.pop("tokens_measured"), again.pop("tokens_measured")
    assert first == again and all(np.array_equal(tokens[k], tokens_again[k]) for k in tokens)
    assert first["tokens"] == len(ids) and 0 <= first["rtd_accuracy"] <= 1 and first["rtd_loss"] > 0
    assert 0 <= first["sample_match"] <= 1 and len(tokens["scores"]) == len(ids)
    assert tokens["losses"].mean() == pytest.approx(first["rtd_loss"])


def test_auc_of_a_perfect_a_reversed_and_a_constant_score():
    targets = np.array([True, True, False, False, False])
    assert roc_auc(np.array([5.0, 4, 1, 2, 3]), targets)[0] == 1.0
    assert roc_auc(np.array([1.0, 2, 5, 4, 3]), targets)[0] == 0.0
    assert roc_auc(np.zeros(5), targets)[0] == 0.5  # ties count half
    assert np.isnan(roc_auc(np.zeros(3), np.zeros(3, dtype=bool))[0])


def test_a_constant_discriminator_fails_and_a_separating_one_passes():
    rng = np.random.default_rng(0)
    targets = rng.random(4000) < 0.15
    rows = np.repeat(np.arange(100), 40)
    share = targets.mean()
    constant = np.full(len(targets), np.log(share / (1 - share)))
    loss = lambda s: np.logaddexp(0, s) - targets * s  # noqa: E731  binary cross-entropy of logits
    gates, measures = rtd_gates(loss(constant), constant, targets, rows, sample_match=0.01)
    assert measures["base_rate_loss"] == pytest.approx(binary_entropy(share))
    assert gates[0].value == pytest.approx(binary_entropy(share)) and not any(g.passed for g in gates)
    separating = np.where(targets, 2.0, -2.0) + rng.normal(0, 1, len(targets))
    gates, measures = rtd_gates(loss(separating), separating, targets, rows, sample_match=0.01)
    assert all(g.passed for g in gates) and measures["auc"] > AUC_FLOOR and measures["recall"] > 0.5


def test_the_kind_logs_its_parts_and_measures_its_saved_model_as_the_one_in_memory(tmp_path):
    """The kind owns what the loop logs (its Logged parts) and its held-out measure: a saved model, loaded
    by the measure, scores exactly as the model it was saved from (what stage curves and a sweep each read)."""
    from transformers import BertTokenizerFast

    from tasks.pretraining.heldout import heldout_point, measure_models
    from tasks.pretraining.objectives.rtd import Rtd
    from tests.test_init_from import VOCAB

    model, data = tiny_electra(), tiny_data(n=200)
    summary = train.fn(model, data, cfg(token_budget=3000), seed=1, device=torch.device("cpu"),
                       checkpoint=tmp_path / "c.pt", fingerprint="f", log=lambda _: None, logged=Rtd.logged)
    assert all(0 <= r["rtd_accuracy"] <= 1 and r["rtd_loss"] > 0 for r in summary["rows"])
    assert summary["final_rtd_accuracy"] == summary["rows"][-1]["rtd_accuracy"]
    assert "final_sentence_accuracy" not in summary and "sentence_loss" not in summary["rows"][0]
    save_pretrained(model, BertTokenizerFast(vocab_file=str(VOCAB)), tmp_path / "m")
    ids, offsets = np.concatenate(data.ids), data.id_offsets[0]
    masks = dict(lang="x", seed=3, mask_token_id=3, masked_lm_prob=0.15, max_predictions=5, device=torch.device("cpu"))
    unigram = np.log(np.full(60, 1 / 60))
    saved = heldout_point(tmp_path / "m", Rtd.measure, ids, offsets, unigram, masks)
    in_memory = measure_models(Rtd.measure, model.saved(), model.hf.base_model, ids, offsets, unigram, masks)
    assert saved == in_memory and saved["loss"] is None and saved["predictions"] == len(ids)
    assert [g["name"] for g in saved["gates"]] == ["loss 10% below the base rate's entropy", "ROC AUC",
                                                   "mean cosine between token states"]
    assert Rtd.measure.score(saved) == saved["auc"]
