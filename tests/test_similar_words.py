"""Mac's similar-word lexicon: the word-vector file is read as plain data only, neighbours are
the most cosine-similar words, candidates keep the word's token length, and the lexicon ids
line up with the tokens; checked by hand and against the packaged excerpt."""

import gzip
import os
import pickle

import numpy as np
import pyarrow as pa
import pytest

from tasks.core.errors import SourceError
from tasks.corpus.similar_words import (build_lexicon, lexicon_ids, load_word_vectors, nearest_neighbours,
                                        similar_words_from_table)
from tasks.corpus.tokenize import SPECIAL_TOKENS, load_vocab_tokenizer
from tests.conftest import DATA


def write_model(path, lines):
    with gzip.open(path, "wb") as f:
        pickle.dump((lines, {}, {}), f)
    return path


@pytest.fixture
def tokenizer(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL_TOKENS + list("国家政府民族朝代新年春节元旦中华人")) + "\n", encoding="utf-8")
    return load_vocab_tokenizer(vocab)


def test_vectors_are_read_without_running_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "evil.model"
    with gzip.open(path, "wb") as f:
        pickle.dump(([Evil()], {}, {}), f)
    with pytest.raises(SourceError, match="refusing to load posix.system|refusing to load os.system"):
        load_word_vectors(path)


def test_malformed_vector_line_is_named(tmp_path):
    path = write_model(tmp_path / "bad.model", ["国家 1 0", "政府 1"])
    with pytest.raises(SourceError, match=r"bad.model: vector line 2 has 1 values, expected 2"):
        load_word_vectors(path)
    with pytest.raises(SourceError, match="word-vector file not found"):
        load_word_vectors(tmp_path / "missing.model")


def test_nearest_neighbours_hand_worked():
    vectors = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0], [0.7, 0.7]], dtype=np.float32)
    index, sims = nearest_neighbours(np.array([0, 2]), vectors, k=2, block=1)
    assert index.tolist() == [[1, 4], [4, 1]]
    assert sims[0, 0] == pytest.approx(0.9 / np.hypot(0.9, 0.1), abs=1e-6)


def test_lexicon_keeps_same_length_candidates_in_similarity_order(tmp_path, tokenizer):
    lines = ["国家 1 0 0", "政府 0.9 0.1 0", "民族 0.8 0.2 0", "中华人 0.95 0 0.05", "新年 0 1 0", "春节 0 0.9 0.1",
             "元旦 0 0.8 0.2", "朝代 0.85 0.1 0", "家 1 0.01 0"]
    words, vectors = load_word_vectors(write_model(tmp_path / "v.model", lines))
    corpus = pa.array(["国家", "新年", "国家", "没有", "朝代"])
    table, stats = build_lexicon(corpus, words, vectors, tokenizer, neighbours=3)
    rows = {r["word"]: r for r in table.to_pylist()}
    assert list(rows) == ["国家", "新年", "朝代"]  # corpus words with a vector, first-seen order
    # 国家's 3 nearest: 家 (1 token), 中华人 (3 tokens), 政府 (2 tokens): only 政府 has its length
    assert rows["国家"]["similar"] == ["政府"]
    assert rows["新年"]["similar"] == ["春节", "元旦", "民族"]  # 民族: cosine 0.24, the third nearest
    assert rows["国家"]["similar_ids"] == tokenizer("政府", add_special_tokens=False)["input_ids"]
    assert stats["corpus_occurrences_in_lexicon"] == pytest.approx(4 / 5)
    similar = similar_words_from_table(table)
    e = list(rows).index("新年")
    got = [similar.tokens[s:s + similar.lengths[e]].tolist() for s in similar.starts[similar.offsets[e]:similar.offsets[e + 1]]]
    assert got == [tokenizer(w, add_special_tokens=False)["input_ids"] for w in ("春节", "元旦", "民族")]


def test_lexicon_ids_line_up_with_tokens():
    lexicon = pa.table({"word": ["新年", "国家"]})
    words = pa.chunked_array([pa.array([["新年", "的", "国家"], ["国家"]])])
    word_ids = pa.chunked_array([pa.array([[0, 0, 1, 2, 2], [0, 0]], pa.list_(pa.int32()))])
    out = lexicon_ids(words, word_ids, lexicon)
    assert [x.tolist() for x in out] == [[0, 0, -1, 1, 1], [1, 1]]


@pytest.mark.skipif(not (DATA / "word_vectors_sample.model").is_file(), reason="excerpt missing")
def test_packaged_excerpt_gives_sensible_neighbours():
    words, vectors = load_word_vectors(DATA / "word_vectors_sample.model")
    assert len(words) == 1200 and vectors.shape == (1200, 200)
    index, _ = nearest_neighbours(np.array([words.index("中国")]), vectors, k=10)
    assert {"我国", "国内", "全国", "世界"} & {words[i] for i in index[0]}
