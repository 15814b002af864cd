"""tasks.core.model_dir: a model folder without tokenizer files or with truncated weights is refused
with a SourceError naming it; a good folder loads exactly as transformers loads it."""

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertForMaskedLM, BertTokenizerFast

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.model_dir import MIN_VOCAB, check_weights, load_model, load_tokenizer, save_model_folder

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHARS = [chr(0x4E00 + i) for i in range(200)]  # 一丁丂...


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A tiny BERT folder as save_pretrained writes it: config, model.safetensors, tokenizer files."""
    folder = tmp_path_factory.mktemp("models") / "tiny"
    vocab = {t: i for i, t in enumerate(SPECIAL + CHARS)}
    BertTokenizerFast(vocab=vocab, do_lower_case=True, tokenize_chinese_chars=True).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertForMaskedLM(config).save_pretrained(folder)
    return folder


def copy(good, tmp_path, name="model"):
    return shutil.copytree(good, tmp_path / name)


def test_good_folder_matches_transformers(good):
    text = ["一丁七万", "丈三上下不与"]
    ours, theirs = load_tokenizer(good), AutoTokenizer.from_pretrained(good)
    assert len(ours) == len(SPECIAL + CHARS)
    assert ours(text)["input_ids"] == theirs(text)["input_ids"]
    assert ours("一丁")["input_ids"] == [2, 5, 6, 3]  # real ids, not [UNK]=1
    check_weights(good)
    model = load_model(good, BertForMaskedLM.from_pretrained)
    expected = BertForMaskedLM.from_pretrained(good)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), expected.state_dict().values()))


def test_vocab_txt_alone_is_a_tokenizer(good, tmp_path):
    folder = copy(good, tmp_path)
    (folder / "vocab.txt").write_text("\n".join(SPECIAL + CHARS) + "\n", encoding="utf-8")
    (folder / "tokenizer.json").unlink()
    assert load_tokenizer(folder)("一丁")["input_ids"] == [2, 5, 6, 3]


def test_folder_without_tokenizer_is_refused(good, tmp_path):
    folder = copy(good, tmp_path, "no_tokenizer")
    (folder / "tokenizer.json").unlink()
    # transformers alone would give a 5-token tokenizer mapping every character to [UNK]
    assert len(AutoTokenizer.from_pretrained(folder)) < MIN_VOCAB
    with pytest.raises(SourceError, match=r"no_tokenizer: no tokenizer file"):
        load_tokenizer(folder)


def test_tiny_vocabulary_is_refused(good, tmp_path):
    folder = copy(good, tmp_path, "tiny_vocab")
    (folder / "tokenizer.json").unlink()
    (folder / "vocab.txt").write_text("\n".join(SPECIAL + ["一"]) + "\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"tiny_vocab: the tokenizer has only 6 tokens"):
        load_tokenizer(folder)


def test_corrupt_tokenizer_file_is_one_line_source_error(good, tmp_path):
    folder = copy(good, tmp_path, "bad_tokenizer")
    (folder / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SourceError, match=r"bad_tokenizer: cannot load the tokenizer") as err:
        load_tokenizer(folder)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("size", [lambda n: n // 2, lambda n: n - 4, lambda n: 5])
def test_truncated_weights_name_the_file(good, tmp_path, size):
    folder = copy(good, tmp_path)
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(size(weights.stat().st_size))
    with pytest.raises(SourceError, match=r"model\.safetensors: truncated or corrupt weights file"):
        check_weights(folder)
    with pytest.raises(SourceError, match=r"model\.safetensors"):
        load_model(folder)


def test_missing_weights_name_the_folder(good, tmp_path):
    folder = copy(good, tmp_path, "no_weights")
    (folder / "model.safetensors").unlink()
    with pytest.raises(SourceError, match=r"no_weights: no weights"):
        load_model(folder)


def test_load_errors_become_source_errors(good, tmp_path):
    # a weights file that parses but does not fit the config (tensor shapes differ)
    folder = copy(good, tmp_path, "mismatch")
    config = BertConfig.from_pretrained(folder)
    config.hidden_size, config.intermediate_size = 32, 64
    BertForMaskedLM(config).save_pretrained(tmp_path / "other")
    shutil.copy(tmp_path / "other" / "model.safetensors", folder / "model.safetensors")
    with pytest.raises(SourceError, match=r"mismatch: cannot load the model"):
        load_model(folder, BertForMaskedLM.from_pretrained)


def test_fit_seed_refuses_truncated_weights(good, tmp_path):
    from tasks.downstream.families import FAMILIES
    from tasks.downstream.finetune import fit_seed

    folder = copy(good, tmp_path)
    weights = folder / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    with pytest.raises(SourceError, match=r"model\.safetensors"):
        fit_seed(FAMILIES["classification"], folder, ["0", "1"], None, None, 0, torch.device("cpu"))


def test_finetune_names_missing_split(good, tmp_path, monkeypatch):
    from flows import finetune as flow

    monkeypatch.chdir(tmp_path)
    shutil.copytree(good, paths.MODELS / "bert")

    class Cfg:
        baselines, seeds = [], [0]

    class Params:
        finetune, finetune_models = Cfg(), ["bert"]

        def finetune_training(self, model_name, task_name):
            return None

        def task(self, name):
            return type("Spec", (), {"family": "classification", "metrics": ["accuracy"]})()

    monkeypatch.setattr(flow, "load_params", Params)
    (paths.DOWNSTREAM / "tnews").mkdir(parents=True)
    pq.write_table(pa.table({"id": ["a"], "text": ["一"], "label": [0]}),
                           paths.downstream_split("tnews", "train"))
    with pytest.raises(SourceError, match=r"data/downstream/tnews/dev\.parquet is missing: stage downstream@tnews"):
        flow.finetune.fn("bert", "tnews")


def test_a_saved_folders_tokenizer_truncates_at_the_position_embeddings(good, tmp_path):
    """Saved without model_max_length, a tokenizer truncates nothing (transformers' default is unbounded) and an
    input past the position embeddings fails inside the model; save_model_folder sets it to them."""
    from transformers import pipeline

    save_model_folder(load_model(good, BertForMaskedLM.from_pretrained), load_tokenizer(good), tmp_path / "saved")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert tokenizer.model_max_length == 64
    long = "".join(CHARS) + "[MASK]"
    assert len(tokenizer(long, truncation=True)["input_ids"]) == 64
    fill = pipeline("fill-mask", model=str(tmp_path / "saved"), device="cpu")
    assert len(fill("一" * 30 + "[MASK]" + "丁" * 150, tokenizer_kwargs={"truncation": True})) == 5
