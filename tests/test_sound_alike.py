"""The sound-alike objective, the kind added in one module (tasks/pretraining/objectives/sound_alike.py):
its table holds each character's same-pinyin characters of the vocabulary, never itself; the data
replaces the chosen characters by them (a random token where there is none, counted), never by
[MASK]; the held-out text is corrupted the same way, so that its gate must beat copying the input;
and the registry builds it from params.yaml with no other kind's part."""

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tasks.core import paths
from tasks.core.params import load_params
from tasks.corpus.tokenize import SPECIAL_TOKENS, load_vocab_tokenizer
from tasks.pretraining.gates import unigram_log_probs
from tasks.pretraining.heldout import evaluate_mlm, measure_models
from tasks.pretraining.masking import mask_batch
from tasks.pretraining.objectives import build, describe
from tasks.pretraining.objectives.sound_alike import SoundAlike, sound_alikes
from tests.conftest import ROOT

CHARS = "的得地在再是事市国果"  # de de di | zai zai | shi shi shi | guo guo; 地 has no sound-alike here


@pytest.fixture
def tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL_TOKENS + list(CHARS) + ["ab"]) + "\n", encoding="utf-8")
    return load_vocab_tokenizer(vocab)


def candidates(table, token: int) -> list[int]:
    return table.candidates[table.offsets[token]:table.offsets[token + 1]].tolist()


def test_the_table_holds_each_characters_other_same_pinyin_characters(tokenizer):
    vocab = tokenizer.get_vocab()
    table = sound_alikes(vocab, len(tokenizer))
    assert table.name == "sound" and len(table.offsets) == len(tokenizer) + 1
    ids = {c: vocab[c] for c in CHARS}
    assert candidates(table, ids["的"]) == [ids["得"]] and candidates(table, ids["在"]) == [ids["再"]]
    assert candidates(table, ids["是"]) == [ids["事"], ids["市"]]  # in id order
    assert candidates(table, ids["地"]) == [] and candidates(table, vocab["ab"]) == []  # alone; not Chinese
    assert candidates(table, vocab["[MASK]"]) == []
    assert all(t not in candidates(table, t) for t in range(len(tokenizer)))


def test_chosen_characters_become_sound_alikes_never_mask_and_a_character_without_one_a_random_token(tokenizer):
    mlm = build(load_params(ROOT / "params.yaml"), "sound_alike")
    config = mlm.masking(tokenizer)
    assert config.substitute == 0.8 and config.mask == 0 and config.substitution.name == "sound"
    vocab, table = tokenizer.get_vocab(), config.substitution
    rng = np.random.default_rng(0)
    ids = np.array([vocab[c] for c in rng.choice(list(CHARS), 4000 * 30)], dtype=np.int32).reshape(4000, 30)
    words = np.broadcast_to(np.arange(30, dtype=np.int32), ids.shape).copy()
    random_ids = np.array([vocab["ab"]], dtype=np.int32)  # never a sound-alike: each substitute is told apart
    config = dataclasses.replace(config, masked_lm_prob=0.5, max_predictions=15)
    out = mask_batch(ids, words, config, np.random.default_rng(1), mask_token_id=vocab["[MASK]"],
                     random_token_ids=random_ids)
    n = out.counts
    assert n["mask"] == 0 and not (out.input_ids == vocab["[MASK]"]).any()
    assert n["substitute"] + n["random"] + n["keep"] == n["chosen"]
    rows, cols = np.nonzero(out.chosen)
    original, seen = ids[rows, cols], out.input_ids[rows, cols]
    assert (out.labels[rows, cols] == original).all()
    alike = np.array([s in candidates(table, o) for o, s in zip(original, seen)])
    assert alike.sum() == n["substitute"]  # every substitute is a sound-alike of the token it replaced
    # 地 (a tenth of the characters) has none: its share of the 80% falls back to a random token
    drawn = n["substitute"] + n["substitute_fallback"]
    assert drawn / n["chosen"] == pytest.approx(0.8, abs=0.01)
    assert n["substitute_fallback"] / drawn == pytest.approx(0.1, abs=0.01)
    assert n["random"] == pytest.approx(0.1 * n["chosen"] + n["substitute_fallback"], rel=0.05)
    assert not alike[original == vocab["地"]].any() and (seen[original == vocab["地"]] != vocab["[MASK]"]).all()


def test_the_held_out_text_is_corrupted_by_sound_alikes_and_its_gate_must_beat_copying(tokenizer, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths.EVAL_TEXTS.mkdir(parents=True)
    texts = ["的在是国", "得再事果", "市的国在"] * 40
    pq.write_table(pa.table({"text": texts, "split": ["dev"] * len(texts)}), paths.eval_texts("news"))
    params = load_params(ROOT / "params.yaml")
    params = params.model_copy(update={"curves": params.curves.model_copy(update={"heldout_task": "news"})})
    objective = build(params, "sound_alike")
    ids, offsets, masks = objective.heldout_inputs(params, tokenizer, torch.device("cpu"))
    measure = objective.measure("mlm", masks)
    assert measure.name == "sound" and measure.loss_field == "loss"
    from transformers import BertConfig, BertForMaskedLM

    model = BertForMaskedLM(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=32))
    again = evaluate_mlm(model, ids, offsets, positions=True, **masks)
    scores = evaluate_mlm(model, ids, offsets, positions=True, **masks)
    at = scores["positions"]
    assert (at["inputs"] == again["positions"]["inputs"]).all()  # the same corruption on every call
    table = masks["substitution"][0]
    alike = np.array([i in candidates(table, label) for i, label in zip(at["inputs"], at["labels"])])
    assert alike.mean() > 0.8  # 在 ... have a sound-alike here; none is [MASK]
    assert not (at["inputs"] == tokenizer.mask_token_id).any()
    unigram = unigram_log_probs(np.bincount(ids, minlength=len(tokenizer)))
    point = measure_models(measure, {"": model}, model.bert, ids, offsets, unigram, masks)
    assert point["gates"][0]["name"] == "accuracy above copying the input and the top token's"
    assert point["copy_accuracy"] < 0.2


def test_the_registry_builds_it_from_its_params_alone():
    params = load_params(ROOT / "params.yaml")
    objective = build(params, "sound_alike")
    assert [kind.name for kind in objective.kinds] == ["masked", "sound_alike"]
    assert isinstance(objective.kinds[1], SoundAlike) and not objective.needs_lexicon
    assert describe(objective.spec) == "mlm; sound 80 / random 10 / keep 10; static"
    assert [kind.name for kind in build(params, "mac_sop").kinds] == ["masked", "mac", "sentence"]
