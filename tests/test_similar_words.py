"""Mac's similar-word lexicon: the word-vector file is read as plain data only, neighbours are
the most cosine-similar words, candidates keep the word's token length, and the lexicon ids
line up with the tokens; checked by hand and against the packaged excerpt. The lexicon is
byte-identical whatever the BLAS thread count, summation order or query chunking, with exact
ties broken by vector row."""

import functools
import gzip
import hashlib
import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tasks.core.errors import SourceError
from tasks.corpus import similar_words as sw
from tasks.corpus.similar_words import (build_lexicon, lexicon_ids, load_word_vectors, nearest_neighbours, quantise,
                                        similar_words_from_table, word_counts)
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
        load_word_vectors.fn(path)


def test_malformed_vector_line_is_named(tmp_path):
    path = write_model(tmp_path / "bad.model", ["国家 1 0", "政府 1"])
    with pytest.raises(SourceError, match=r"bad.model: vector line 2 has 1 values, expected 2"):
        load_word_vectors.fn(path)
    with pytest.raises(SourceError, match="word-vector file not found"):
        load_word_vectors.fn(tmp_path / "missing.model")


def test_nearest_neighbours_hand_worked():
    vectors = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0], [0.7, 0.7]], dtype=np.float32)
    index, sims = nearest_neighbours(np.array([0, 2]), vectors, k=2, block=1)
    assert index.tolist() == [[1, 4], [4, 1]]
    assert sims[0, 0] == pytest.approx(0.9 / np.hypot(0.9, 0.1), abs=1e-6)


def test_lexicon_keeps_same_length_candidates_in_similarity_order(tmp_path, tokenizer):
    lines = ["国家 1 0 0", "政府 0.9 0.1 0", "民族 0.8 0.2 0", "中华人 0.95 0 0.05", "新年 0 1 0", "春节 0 0.9 0.1",
             "元旦 0 0.8 0.2", "朝代 0.85 0.1 0", "家 1 0.01 0"]
    words, vectors = load_word_vectors.fn(write_model(tmp_path / "v.model", lines))
    corpus = pa.array(["国家", "新年", "国家", "没有", "朝代"])
    table, stats = build_lexicon.fn(word_counts([corpus]), words, vectors, tokenizer, neighbours=3)
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
    words, vectors = load_word_vectors.fn(DATA / "word_vectors_sample.model")
    assert len(words) == 1200 and vectors.shape == (1200, 200)
    index, _ = nearest_neighbours(np.array([words.index("中国")]), vectors, k=10)
    assert {"我国", "国内", "全国", "世界"} & {words[i] for i in index[0]}


def test_quantised_dot_products_are_exact():
    rng = np.random.default_rng(0)
    vectors = rng.normal(0, 3, (50, 200)).astype(np.float32)
    q = quantise(vectors)
    assert np.all(q == np.rint(q)) and 2 ** 21 <= np.abs(q).max() <= 2 ** 22  # 200 * 2**44 < 2**53
    exact = np.array([[sum(int(a) * int(b) for a, b in zip(x, y)) for y in q[:5]] for x in q[:5]])
    assert (q[:5] @ q[:5].T == exact).all()  # integer arithmetic in Python: no rounding at all
    unit = 2.0 ** (np.frexp(np.abs(vectors).max())[1] - 22)  # one power-of-two scale for all values
    assert np.abs(q * unit - vectors).max() <= unit / 2
    assert (quantise(vectors * 4) == q).all()  # a power-of-two rescaling is exact, so changes nothing


def test_exact_ties_go_to_the_lower_row():
    # rows 1, 3 and 4 are copies of row 0 (exact ties at cosine 1); row 2 is orthogonal
    vectors = np.array([[1, 2, 3], [1, 2, 3], [3, -3, 1], [1, 2, 3], [2, 4, 6]], dtype=np.float32)
    index, sims = nearest_neighbours(np.array([0, 3, 4, 1]), vectors, k=3)
    assert index.tolist() == [[1, 3, 4], [0, 1, 4], [0, 1, 3], [0, 3, 4]]
    assert (sims == np.float32(1.0)).all()
    # chunking and row order of the queries change nothing
    assert (nearest_neighbours(np.array([1, 4, 3, 0]), vectors, k=3, block=1)[0] == index[[3, 2, 1, 0]]).all()


def lexicon_digest(table: pa.Table) -> str:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


# sha256 of the Arrow IPC stream of the lexicon built in the test below: pins the neighbour
# ranking, the similarity rounding and the candidate rules; update only for an intended change.
SAMPLE_LEXICON_SHA256 = "6feebfaaf95d1e720746d4f2931de326c4b46473f08b4b988fe5283fcfa55be9"


@pytest.mark.skipif(not (DATA / "word_vectors_sample.model").is_file(), reason="excerpt missing")
def test_sample_lexicon_is_machine_independent(tmp_path, monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    words, vectors = load_word_vectors.fn(DATA / "word_vectors_sample.model")
    # exact ties: 全国 and 国内 get 中国's vector, so they are 中国's first two neighbours, by row
    vectors[[words.index("全国"), words.index("国内")]] = vectors[words.index("中国")]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL_TOKENS + sorted(set("".join(words)))) + "\n", encoding="utf-8")
    tokenizer = load_vocab_tokenizer(vocab)
    corpus = pa.array(words[::-1] + words[:100])  # every sample word, repeats allowed

    def build(vectors=vectors):
        return lexicon_digest(build_lexicon.fn(word_counts([corpus]), words, vectors, tokenizer, neighbours=10)[0])

    digest = build()
    table, _ = build_lexicon.fn(word_counts([corpus]), words, vectors, tokenizer, neighbours=10)
    row = table.to_pylist()[table.column("word").to_pylist().index("中国")]
    assert row["similar"][:2] == ["全国", "国内"] and row["similarity"][:2] == [1.0, 1.0]
    sims = table.column("similarity").to_pylist()
    assert all(s == sorted(s, reverse=True) for s in sims)
    assert all(round(x, 6) == pytest.approx(x, abs=1e-7) for s in sims for x in s)  # stored rounded
    for threads in (1, 2):
        with threadpoolctl.threadpool_limits(limits=threads):
            assert build() == digest
    # another summation order in every dot product: the same vectors with their dimensions permuted
    permuted = vectors[:, np.random.default_rng(1).permutation(vectors.shape[1])]
    assert build(np.ascontiguousarray(permuted)) == digest
    assert build(np.asfortranarray(vectors)) == digest  # the transposed memory layout for BLAS
    monkeypatch.setattr(sw, "nearest_neighbours", functools.partial(nearest_neighbours, block=7))
    assert build() == digest  # other query chunks
    assert digest == SAMPLE_LEXICON_SHA256


def test_word_counts_stream_keeps_first_seen_order_and_totals():
    words = ["国家", "新年", "国家", "没有", "朝代", "新年", "国家", "春节"]
    expected = pc.value_counts(pa.array(words))
    for size in (1, 3, 8):
        distinct, freq = word_counts(pa.array(words[i:i + size]) for i in range(0, len(words), size))
        assert distinct == expected.field("values").to_pylist() == ["国家", "新年", "没有", "朝代", "春节"]
        assert freq.tolist() == expected.field("counts").to_pylist() == [3, 2, 1, 1, 1]
