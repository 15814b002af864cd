"""Linear probes: a layer that encodes the label is decoded (~100%), noise is not; POS reading
and the mapping of word predictions back to sentences."""

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

from tasks.core.errors import SourceError
from tasks.downstream.conll import NerSentence
from tasks.downstream.ner import EncodedNer
from tasks.interpretability.probe import linear_probe, read_pos_tagged, tags_by_sentence, word_features


def test_probe_decodes_a_layer_that_encodes_the_label_and_not_noise():
    rng = np.random.default_rng(0)
    classes, dim = 8, 32
    y = rng.integers(classes, size=4000)
    signal = np.eye(classes, dim)[y] + rng.normal(0, 0.1, size=(len(y), dim))  # the label, linearly
    noise = rng.normal(size=(len(y), dim))
    train, test = slice(0, 3000), slice(3000, None)
    assert np.mean(linear_probe(signal[train], y[train], signal[test]) == y[test]) > 0.99
    assert np.mean(linear_probe(noise[train], y[train], noise[test]) == y[test]) < 1 / classes + 0.06


def test_read_pos_tagged(tmp_path):
    path = tmp_path / "pd.txt"
    path.write_text("迈向/v  充满/v  希望/n\n\n中共中央/nt  总书记/n\n", encoding="utf-8")
    sentences = list(read_pos_tagged(path))
    assert [s.tokens for s in sentences] == [["迈向", "充满", "希望"], ["中共中央", "总书记"]]
    assert [s.tags for s in sentences] == [["v", "v", "n"], ["nt", "n"]]
    assert [s.id for s in sentences] == ["pd.txt:1", "pd.txt:3"]
    path.write_text("迈向/v\n充满 希望/n\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"pd\.txt:2: token '充满'"):
        list(read_pos_tagged(path))


def test_word_features_take_each_words_first_character(tmp_path):
    chars = list("迈向充满希望的新世纪")
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars]) + "\n")
    tokenizer = BertTokenizerFast(str(tmp_path / "vocab.txt"))
    sentences = [NerSentence("a", ["迈向", "充满", "希望"], ["v", "v", "n"]), NerSentence("b", ["新", "世纪"], ["a", "n"])]
    data = EncodedNer.encode(sentences, tokenizer, ["a", "n", "v"], max_length=16)
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=len(chars) + 5, hidden_size=8, num_hidden_layers=2,
                                   num_attention_heads=2, intermediate_size=16, max_position_embeddings=16)).eval()
    features, labels, example, word = word_features(encoder, data, 1, torch.device("cpu"))
    assert features.shape == (3, 5, 8) and labels.tolist() == [2, 2, 1, 0, 1]
    assert example.tolist() == [0, 0, 0, 1, 1] and word.tolist() == [0, 1, 2, 0, 1]
    with torch.no_grad():  # layer 2 of the word 充满 = the last hidden state at its first character (position 3)
        ids = tokenizer(["迈向充满希望"], return_tensors="pt")
        expected = encoder(**ids).last_hidden_state[0, 3].numpy()
    np.testing.assert_allclose(features[2, 1], expected, atol=1e-5)
    tags = tags_by_sentence(np.array([2, 0, 1, 1, 1]), example, word, sentences, ["a", "n", "v"])
    assert tags == [["v", "a", "n"], ["n", "n"]]
