"""CINO-style resampling: the probabilities (β = 0 sample-level, β = 1 − α token-level),
the stratified allocation, even repetition, empirical shares against p_i, and the streamed
mixture (equal to an in-memory reference whatever the batch size)."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tasks.corpus.tokenize import SPECIAL_TOKENS
from tasks.multilingual.multilingual import SCHEMA
from tasks.multilingual.resample import (MIXTURE_SCHEMA, documents_to_draw, draw, largest_remainder, resample,
                                         sampling_probabilities, train_lengths, write_drawn)
from tasks.multilingual.vocabulary import multilingual_tokenizer

N = np.array([100_000, 5_000, 300, 60])          # documents per language
L = np.array([80.0, 20.0, 40.0, 150.0])          # mean tokens per document


def test_beta_zero_is_sample_level_multinomial():
    p = sampling_probabilities(N, L, alpha=0.7, beta=0.0)
    assert np.allclose(p, N**0.7 / (N**0.7).sum())
    assert np.allclose(sampling_probabilities(N, L, 1.0, 0.0), N / N.sum())  # α = 1: natural shares


def test_beta_one_minus_alpha_samples_tokens_with_exponent_alpha():
    alpha = 0.7
    p = sampling_probabilities(N, L, alpha, 1 - alpha)
    token_share = p * L / (p * L).sum()
    c = N * L
    assert np.allclose(token_share, c**alpha / (c**alpha).sum())
    # and β = 0 does not: its token share still rewards long documents
    p0 = sampling_probabilities(N, L, alpha, 0.0)
    assert not np.allclose(p0 * L / (p0 * L).sum(), c**alpha / (c**alpha).sum())


def test_smaller_alpha_flattens_the_distribution():
    shares = [sampling_probabilities(N, L, a, 0.0)[-1] for a in (1.0, 0.7, 0.3, 0.0)]
    assert shares == sorted(shares) and np.isclose(shares[-1], 0.25)


def test_probabilities_reject_empty_languages():
    with pytest.raises(ValueError, match="at least one document"):
        sampling_probabilities(np.array([3, 0]), np.array([5.0, 5.0]), 0.7, 0.3)


def test_largest_remainder_sums_and_rounds():
    out = largest_remainder(np.array([0.5, 0.3, 0.2]), 7)  # 3.5, 2.1, 1.4 -> 3 or 4, 2, 1 or 2
    assert out.sum() == 7 and out.tolist() == [4, 2, 1]


def test_documents_to_draw_meets_the_token_budget():
    p = sampling_probabilities(N, L, 0.7, 0.3)
    m = documents_to_draw(p, L, 1_000_000)
    assert abs((m * L).sum() - 1_000_000) / 1_000_000 < 0.01
    assert np.allclose(m / m.sum(), p, atol=1 / m.sum())


def test_draw_repeats_documents_as_evenly_as_possible():
    rng = np.random.default_rng(0)
    picked = draw(7, 24, rng)  # 3 full copies + 3 distinct extra
    counts = np.bincount(picked, minlength=7)
    assert counts.sum() == 24 and set(counts) == {3, 4} and (counts == 4).sum() == 3
    once = draw(10, 4, rng)
    assert len(set(once.tolist())) == 4  # down-sampling: without replacement


def corpus(seed=0):
    rng = np.random.default_rng(seed)
    langs, lengths = [], []
    for lang, n, mean in [("zh", 20_000, 60), ("yue", 4_000, 15), ("ug", 400, 12), ("bo", 50, 90)]:
        langs += [lang] * n
        lengths += rng.poisson(mean, n).clip(1).tolist()
    return langs, np.array(lengths)


@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (0.7, 0.3), (0.5, 0.0)])
def test_empirical_shares_match_the_probabilities(alpha, beta):
    langs, lengths = corpus()
    rows, copies, stats = resample.fn(langs, lengths, alpha, beta, total_tokens=300_000, seed=1)
    drawn = np.array(langs, dtype=object)[rows]
    for lang, s in stats.items():
        share = float((drawn == lang).mean())
        assert share == pytest.approx(s["probability"], abs=2 / len(rows)), lang
        assert s["token_share_after"] == pytest.approx(s["expected_token_share"], rel=0.05, abs=0.002), lang
    assert abs(lengths[rows].sum() - 300_000) / 300_000 < 0.03
    assert sum(s["drawn_documents"] for s in stats.values()) == len(rows)


def test_resampling_up_samples_small_languages_and_records_repeats():
    langs, lengths = corpus()
    rows, copies, stats = resample.fn(langs, lengths, 0.7, 0.3, total_tokens=300_000, seed=1)
    assert stats["bo"]["token_share_after"] > 3 * stats["bo"]["token_share_before"]
    assert stats["zh"]["token_share_after"] < stats["zh"]["token_share_before"]
    bo = stats["bo"]
    assert bo["repeat_factor"] > 1 and bo["max_copies"] == int(np.ceil(bo["repeat_factor"]))
    # copy numbers count earlier occurrences of the same document
    for r in np.unique(rows[copies > 0])[:20]:
        assert sorted(copies[rows == r].tolist()) == list(range((rows == r).sum()))


def test_resampling_is_deterministic_and_seeded():
    langs, lengths = corpus()
    a = resample.fn(langs, lengths, 0.7, 0.3, 100_000, seed=3)
    b = resample.fn(langs, lengths, 0.7, 0.3, 100_000, seed=3)
    c = resample.fn(langs, lengths, 0.7, 0.3, 100_000, seed=4)
    assert np.array_equal(a[0], b[0]) and a[2] == b[2]
    assert not np.array_equal(a[0], c[0])
    assert {k: v["drawn_documents"] for k, v in a[2].items()} == {k: v["drawn_documents"] for k, v in c[2].items()}


def documents(path):
    """A small multilingual documents file (several row groups): three languages, held-out
    rows between train rows, and a train document the tokenizer turns into nothing."""
    rng = np.random.default_rng(0)
    rows = []
    for lang, chars, n in [("zh", "天气很好今日", 30), ("yue", "佢哋喺度", 6), ("bo", "ཁྱིམཚང", 3)]:
        for i in range(n):
            text = "".join(rng.choice(list(chars), rng.integers(1, 12)))
            rows.append({"doc_id": f"{lang}-{i}", "lang": lang, "script": "x", "source": "s",
                         "text": " " if (lang, i) == ("zh", 4) else text,
                         "split": "heldout" if i % 5 == 3 else "train"})
    order = rng.permutation(len(rows))  # languages interleaved
    pq.write_table(pa.Table.from_pylist([rows[i] for i in order], schema=SCHEMA), path, row_group_size=7)
    return multilingual_tokenizer(SPECIAL_TOKENS + list("天气很好今日佢哋喺度ཁྱིམཚང"))


def in_memory_mixture(path, tokenizer, alpha, beta, total_tokens, seed):
    """The straightforward in-memory mixture: every train text tokenized at once."""
    docs = pq.read_table(path)
    docs = docs.filter(pc.equal(docs.column("split"), "train"))
    ids = tokenizer(docs.column("text").to_pylist(), add_special_tokens=False, split_special_tokens=True,
                    return_attention_mask=False)["input_ids"]
    lengths = np.array([len(x) for x in ids])
    keep = np.flatnonzero(lengths > 0)
    langs = docs.column("lang").to_pylist()
    rows, copies, stats = resample.fn([langs[i] for i in keep], lengths[keep], alpha, beta, total_tokens, seed)
    rows = keep[rows]
    table = pa.table({"doc_id": docs.column("doc_id").take(rows), "lang": docs.column("lang").take(rows),
                      "copy": pa.array(copies, pa.int32()), "text": docs.column("text").take(rows)})
    return table, stats, int(lengths[rows].sum())


@pytest.mark.parametrize("batch_rows", [1, 4, 7, 1000])
@pytest.mark.parametrize("total_tokens", [40, 400])  # every language down-sampled; every one repeated
def test_streamed_mixture_equals_the_in_memory_reference(tmp_path, monkeypatch, batch_rows, total_tokens):
    monkeypatch.setattr("tasks.multilingual.resample.TOKENIZE_DOCUMENTS", 3)  # several tokenizer calls a batch
    tokenizer = documents(tmp_path / "documents.parquet")
    names, codes, lengths = train_lengths(tmp_path / "documents.parquet", tokenizer, batch_rows)
    assert codes.dtype == np.int32 and lengths.dtype == np.int64 and (lengths == 0).sum() == 1
    keep = np.flatnonzero(lengths > 0)
    rows, copies, stats = resample.fn(np.asarray(names, dtype=object)[codes[keep]], lengths[keep], 0.7, 0.3,
                                      total_tokens, seed=2)
    rows = keep[rows]
    write_drawn(tmp_path / "documents.parquet", rows, copies, tmp_path / "mixture.parquet", batch_rows)
    want, want_stats, want_tokens = in_memory_mixture(tmp_path / "documents.parquet", tokenizer, 0.7, 0.3,
                                                      total_tokens, seed=2)
    got = pq.read_table(tmp_path / "mixture.parquet")
    assert got.equals(want) and got.schema.equals(MIXTURE_SCHEMA)
    assert stats == want_stats and int(lengths[rows].sum()) == want_tokens
    meta = pq.ParquetFile(tmp_path / "mixture.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sizes[:-1] == [batch_rows] * (len(sizes) - 1) and sum(sizes) == got.num_rows


def test_no_train_document_is_a_clear_error(tmp_path):
    tokenizer = documents(tmp_path / "documents.parquet")
    table = pq.read_table(tmp_path / "documents.parquet")
    pq.write_table(table.set_column(5, "split", pa.array(["heldout"] * table.num_rows)), tmp_path / "held.parquet")
    names, codes, lengths = train_lengths(tmp_path / "held.parquet", tokenizer, 10)
    assert names == [] and len(codes) == len(lengths) == 0
    with pytest.raises(ValueError, match="at least one document"):
        resample.fn(np.asarray(names, dtype=object)[codes], lengths, 0.7, 0.3, 100, seed=1)
