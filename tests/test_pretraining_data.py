"""Packing never crosses documents and keeps words; NSP/SOP pairs follow their rules; shards
are deterministic and decode back; dynamic shards keep what batch-time masking needs; packing
by stream, pairing and writing from the on-disk store, and reading shards memory-mapped give
what the same steps give in memory."""

import re

import numpy as np
import pytest
import pyarrow as pa
import pyarrow.parquet as pq

import torch

from tasks.core.errors import SourceError
from tasks.core.params import Executor
from tasks.corpus.similar_words import lexicon_ids
from tasks.pretraining.masking import MaskingConfig
from tasks.pretraining.examples import DynamicMasker, PretrainingExamples
from tasks.pretraining.packed import Packed, PackedStore
from tasks.pretraining.packing import pack_corpus, pack_documents
from tasks.pretraining.pairing import sentence_pairs
from tasks.pretraining.pretraining_data import read_shards, write_arrow, write_shards

CLS, SEP, MASK = 101, 102, 103


def sentences(n_docs=40, seed=0):
    rng = np.random.default_rng(seed)
    doc_ids, ids, words = [], [], []
    for d in range(n_docs):
        for _ in range(int(rng.integers(1, 8))):
            n = int(rng.integers(1, 60))
            ids.append(rng.integers(1000, 2000, n).astype(np.int32))
            words.append(np.sort(rng.integers(0, max(1, n // 2), n)).astype(np.int32))
            doc_ids.append(f"d{d}")
    return doc_ids, ids, words


def test_packing_respects_documents_length_and_order():
    doc_ids, ids, words = sentences()
    packed = pack_documents(doc_ids, ids, words, 32, CLS, SEP)
    assert packed.lengths.max() <= 32
    assert (packed.input_ids[:, 0] == CLS).all()
    assert (packed.input_ids[np.arange(len(packed.lengths)), packed.lengths - 1] == SEP).all()
    # concatenating the bodies per document gives back that document's tokens, in order
    doc_of_token = np.concatenate([[d] * len(x) for d, x in zip(doc_ids, ids)])
    flat = np.concatenate(ids)
    pos = 0
    for r, n in enumerate(packed.lengths):
        body = packed.input_ids[r, 1:n - 1]
        docs = set(doc_of_token[pos:pos + len(body)])
        assert len(docs) == 1, "a sequence crosses a document boundary"
        assert (flat[pos:pos + len(body)] == body).all()
        pos += len(body)
    assert pos == len(flat)


def test_packing_word_ids_are_dense_per_row_and_specials_excluded():
    doc_ids, ids, words = sentences()
    packed = pack_documents(doc_ids, ids, words, 32, CLS, SEP)
    for r, n in enumerate(packed.lengths):
        w = packed.word_ids[r]
        assert w[0] == -1 and (w[n - 1:] == -1).all()
        body = w[1:n - 1]
        assert body[0] == 0 and (np.diff(body) >= 0).all() and (np.diff(body) <= 1).all()


def test_long_sentence_is_cut_into_full_sequences():
    ids = [np.arange(1000, 1070, dtype=np.int32)]
    words = [np.repeat(np.arange(35), 2).astype(np.int32)]
    packed = pack_documents(["d"], ids, words, 32, CLS, SEP)
    assert packed.lengths.tolist() == [32, 32, 12]
    assert (packed.word_ids[0, 1:31] == np.repeat(np.arange(15), 2)).all()


def test_full_sentences_packing_goes_on_into_the_next_document_after_a_sep():
    """RoBERTa's FULL-SENTENCES: the same token stream, a [SEP] (word id -1) exactly where a row
    passes a document boundary, every row full up to the piece that did not fit, fewer rows."""
    doc_ids, ids, words = sentences()
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP, cross_documents=True)
    by_doc = pack_documents(doc_ids, ids, words, 64, CLS, SEP)
    pieces, doc_of_piece = [], []  # sentences of at most 62 tokens here, so one piece each
    for d, x in zip(doc_ids, ids):
        assert len(x) <= 62
        pieces.append(x)
        doc_of_piece.append(d)
    k = 0
    for r, n in enumerate(packed.lengths):
        body, body_words = packed.input_ids[r, 1:n - 1], packed.word_ids[r, 1:n - 1]
        assert packed.input_ids[r, 0] == CLS and packed.input_ids[r, n - 1] == SEP and n <= 64
        expected, first = [], k
        while k < len(pieces) and len(expected) + (k > first and doc_of_piece[k] != doc_of_piece[k - 1]) \
                + len(pieces[k]) <= 62:
            if k > first and doc_of_piece[k] != doc_of_piece[k - 1]:
                expected.append(SEP)
            expected.extend(pieces[k].tolist())
            k += 1
        assert body.tolist() == expected, f"row {r}"
        assert (body_words[body == SEP] == -1).all() and (body_words[body != SEP] >= 0).all()
        kept = body_words[body_words >= 0]
        assert kept[0] == 0 and set(np.diff(kept).tolist()) <= {0, 1}
    assert k == len(pieces)
    separators = int((packed.input_ids == SEP).sum()) - len(packed)
    assert separators > 0 and packed.lengths.sum() == sum(map(len, ids)) + 2 * len(packed) + separators
    assert len(packed) < len(by_doc) and packed.lengths.mean() > by_doc.lengths.mean()


def test_shards_are_deterministic_and_decode(tmp_path):
    doc_ids, ids, words = sentences(200)
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP)
    kwargs = dict(objective="wwm", seed=3, dupe_factor=2, shard_size=50, mask_token_id=MASK, dynamic=False,
                  random_token_ids=np.arange(1000, 2000, dtype=np.int32))
    cfg = MaskingConfig(scheme="wwm")
    stats = write_shards.fn(packed, cfg, tmp_path / "a", **kwargs)
    write_shards.fn(packed, cfg, tmp_path / "b", executor=Executor(kind="processes", workers=2), **kwargs)  # same bytes
    files_a = sorted((tmp_path / "a").iterdir())
    assert [f.read_bytes() for f in files_a] == [f.read_bytes() for f in sorted((tmp_path / "b").iterdir())]
    assert stats["sequences"] == 2 * len(packed.lengths)
    table = read_shards(tmp_path / "a")
    first = table.slice(0, len(packed.lengths))
    for r in range(0, len(packed.lengths), 7):
        row = first.slice(r, 1).to_pylist()[0]
        original = packed.input_ids[r, :packed.lengths[r]]
        restored = np.array(row["input_ids"])
        restored[row["masked_positions"]] = row["masked_labels"]
        assert (restored == original).all()
        assert len(row["input_ids"]) == packed.lengths[r]
    # the two copies are masked differently
    assert table.column("masked_positions")[0] != table.column("masked_positions")[len(packed.lengths)] or \
        table.column("input_ids")[0] != table.column("input_ids")[len(packed.lengths)]
    assert pa.ipc.open_file(files_a[0]).num_record_batches == 1 and read_shards(tmp_path / "a").num_rows == 2 * len(packed)
    assert pa.ipc.open_file(files_a[0]).get_batch(0).num_rows == 50


def pairs(task, n_docs=300, seed=0):
    doc_ids, ids, words = sentences(n_docs, seed)
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP, reserve=1)
    return packed, *sentence_pairs(packed, task, np.random.default_rng(seed), CLS, SEP)


def segments(row_ids, length, b):
    return row_ids[1:b - 1], row_ids[b:length - 1]


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_pairs_layout_and_balanced_labels(task):
    packed, out, stats = pairs(task)
    n = len(out)
    assert n > 500 and stats["pairs"] == n
    assert abs(out.sentence_labels.mean() - 0.5) < 0.05
    rows = np.arange(n)
    assert (out.input_ids[:, 0] == CLS).all()
    assert (out.input_ids[rows, out.segment_b - 1] == SEP).all() and (out.input_ids[rows, out.lengths - 1] == SEP).all()
    assert (out.lengths <= 64).all() and (out.segment_b >= 2).all() and (out.segment_b < out.lengths - 1).all()
    for r in range(n):  # word ids are dense over A then B; specials are never maskable
        w = out.word_ids[r, :out.lengths[r]]
        body = w[w >= 0]
        assert body[0] == 0 and (np.diff(body) >= 0).all() and (np.diff(body) <= 1).all()
        assert (w[[0, out.segment_b[r] - 1, out.lengths[r] - 1]] == -1).all()


def test_sop_negatives_are_the_same_two_segments_swapped():
    packed, out, _ = pairs("sop")
    originals = {tuple(packed.input_ids[r, 1:packed.lengths[r] - 1]) for r in range(len(packed))}
    for r in range(len(out)):
        a, b = segments(out.input_ids[r], out.lengths[r], out.segment_b[r])
        in_order = np.concatenate([b, a]) if out.sentence_labels[r] else np.concatenate([a, b])
        assert tuple(in_order) in originals  # positive: A then B as in the text; negative: swapped


def test_nsp_negatives_take_segment_b_from_another_document():
    packed, out, _ = pairs("nsp")
    doc_of_body = {}
    for r in range(len(packed)):
        doc_of_body[tuple(packed.input_ids[r, 1:packed.lengths[r] - 1])] = packed.documents[r]
    positives = negatives = 0
    for r in range(len(out)):
        a, b = segments(out.input_ids[r], out.lengths[r], out.segment_b[r])
        if out.sentence_labels[r] == 0:
            assert tuple(np.concatenate([a, b])) in doc_of_body
            positives += 1
        else:  # B is not the continuation of A; it comes from a row of another document
            assert tuple(np.concatenate([a, b])) not in doc_of_body
            negatives += 1
    assert positives > 200 and negatives > 200


def test_dynamic_shards_hold_unmasked_rows_with_word_ids(tmp_path):
    doc_ids, ids, words = sentences(50)
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP)
    stats = write_shards.fn(packed, MaskingConfig(scheme="wwm"), tmp_path, objective="d", seed=0, dynamic=True,
                         dupe_factor=5, shard_size=40, mask_token_id=MASK,
                         random_token_ids=np.arange(1000, 2000, dtype=np.int32))
    table = read_shards(tmp_path)
    assert stats["dynamic"] and table.num_rows == len(packed)  # one copy: masks are drawn per batch
    assert set(table.column_names) == {"input_ids", "word_ids"}
    row = table.slice(3, 1).to_pylist()[0]
    assert row["input_ids"] == packed.input_ids[3, :packed.lengths[3]].tolist()
    assert row["word_ids"] == packed.word_ids[3, :packed.lengths[3]].tolist()


def test_truncated_shard_is_a_source_error_naming_it(tmp_path):
    doc_ids, ids, words = sentences(50)
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP)
    write_shards.fn(packed, MaskingConfig(scheme="wwm"), tmp_path, objective="d", seed=0, dynamic=True,
                 dupe_factor=1, shard_size=20, mask_token_id=MASK,
                 random_token_ids=np.arange(1000, 2000, dtype=np.int32))
    shard = sorted(tmp_path.glob("shard-*.arrow"))[1]
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(SourceError, match=rf"^{re.escape(str(shard))}: unreadable pretraining data shard \(.+\); rerun"):
        read_shards(tmp_path)


def test_shards_with_different_columns_are_a_source_error(tmp_path):
    write_arrow(tmp_path / "shard-00000.arrow", pa.table({"input_ids": [[1, 2]], "word_ids": [[0, 0]]}))
    write_arrow(tmp_path / "shard-00001.arrow", pa.table({"input_ids": [[1, 2]]}))
    with pytest.raises(SourceError,
                       match=r"shard-00001.arrow: columns \(input_ids: [^,]*\) differ from those of shard-00000"):
        read_shards(tmp_path)


def test_parquet_shards_of_the_former_format_ask_for_a_rerun(tmp_path):
    pq.write_table(pa.table({"input_ids": [[1, 2]], "word_ids": [[0, 0]]}), tmp_path / "shard-00000.parquet")
    with pytest.raises(SourceError, match=rf"^{re.escape(str(tmp_path))}: holds Parquet shards of an older format.*"
                                          r"rerun the pretraining_data stage$"):
        read_shards(tmp_path)


def tokens_file(path, doc_ids, ids, words):
    """A tokenized corpus (stage ``tokenize``'s columns) and its segmented words (one string per word)."""
    pq.write_table(pa.table({"doc_id": doc_ids, "input_ids": pa.array([x.tolist() for x in ids], pa.list_(pa.int32())),
                             "word_ids": pa.array([w.tolist() for w in words], pa.list_(pa.int32()))}),
                   path / "tokens.parquet", row_group_size=50)
    segmented = [[f"w{(d * 7 + k) % 40}" for k in range(int(w.max()) + 1)] for d, w in enumerate(words)]
    pq.write_table(pa.table({"words": segmented}), path / "segmented.parquet", row_group_size=17)
    return path / "tokens.parquet", path / "segmented.parquet"


def assert_same_rows(a: Packed, b: Packed):
    assert len(a) == len(b)
    for f in Packed.__dataclass_fields__:
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and np.array_equal(x, y), f


@pytest.mark.parametrize("batch_rows", [3, 1000])
def test_packing_a_stream_of_record_batches_equals_packing_the_whole_table(tmp_path, batch_rows):
    """3 sentences a batch: documents (and sequences) cross batch boundaries; the words file's
    row groups (17) are cut differently from the tokens' batches."""
    doc_ids, ids, words = sentences(60)
    tokens, segmented = tokens_file(tmp_path, doc_ids, ids, words)
    lexicon = pa.table({"word": [f"w{k}" for k in range(0, 40, 3)]})
    whole_lex = lexicon_ids(pq.read_table(segmented).column("words"), pq.read_table(tokens).column("word_ids"), lexicon)
    for reserve, cross in ((0, False), (1, False), (0, True)):
        expected = pack_documents(doc_ids, ids, words, 32, CLS, SEP, lex_ids=whole_lex, reserve=reserve,
                                  cross_documents=cross)
        store = pack_corpus.fn(tokens, tmp_path / f"store{reserve}{cross}", 32, CLS, SEP, reserve=reserve,
                               cross_documents=cross, words=segmented, lexicon=lexicon, batch_rows=batch_rows)
        assert_same_rows(store.rows(slice(None)), expected)
        assert (expected.lex_ids >= 0).any() and (expected.documents[-1] == 59)
        assert_same_rows(store.rows(np.array([5, 2, 40])), expected.rows(np.array([5, 2, 40])))


def test_words_file_shorter_than_the_tokens_is_a_source_error(tmp_path):
    doc_ids, ids, words = sentences(20)
    tokens, segmented = tokens_file(tmp_path, doc_ids, ids, words)
    pq.write_table(pq.read_table(segmented).slice(0, 5), tmp_path / "short.parquet")
    with pytest.raises(SourceError, match=r"short.parquet: fewer sentences than the tokenized corpus"):
        pack_corpus.fn(tokens, tmp_path / "store", 32, CLS, SEP, words=tmp_path / "short.parquet",
                       lexicon=pa.table({"word": ["w0"]}), batch_rows=4)


@pytest.mark.parametrize("task", ["nsp", "sop"])
def test_pairs_from_the_store_in_chunks_equal_pairs_in_memory(tmp_path, task):
    doc_ids, ids, words = sentences(120)
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP, reserve=1)
    store = PackedStore(tmp_path / "packed", 64)
    for start in range(0, len(packed), 100):
        store.append(packed.rows(slice(start, start + 100)))
    expected, expected_stats = sentence_pairs(packed, task, np.random.default_rng(4), CLS, SEP)
    pairs, stats = sentence_pairs(store, task, np.random.default_rng(4), CLS, SEP, out=tmp_path / "pairs",
                                  chunk_rows=7)
    assert isinstance(pairs, PackedStore) and stats == expected_stats
    assert_same_rows(pairs.rows(slice(None)), expected)


@pytest.mark.parametrize("dynamic", [False, True])
def test_shards_from_the_store_equal_shards_from_memory(tmp_path, dynamic):
    doc_ids, ids, words = sentences(80)
    packed, pairs, _ = pairs_of(doc_ids, ids, words)
    store = PackedStore(tmp_path / "packed", 64)
    store.append(pairs)
    kwargs = dict(objective="x", seed=1, dupe_factor=2, shard_size=30, mask_token_id=MASK, dynamic=dynamic,
                  random_token_ids=np.arange(1000, 2000, dtype=np.int32))
    a = write_shards.fn(pairs, MaskingConfig(scheme="wwm"), tmp_path / "a", **kwargs)
    b = write_shards.fn(store, MaskingConfig(scheme="wwm"), tmp_path / "b",
                        executor=Executor(kind="processes", workers=2), **kwargs)
    assert a == b
    files = sorted((tmp_path / "a").iterdir())
    assert [f.name for f in files] == [f.name for f in sorted((tmp_path / "b").iterdir())]
    assert all(f.read_bytes() == (tmp_path / "b" / f.name).read_bytes() for f in files)


def pairs_of(doc_ids, ids, words):
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP, reserve=1)
    return packed, *sentence_pairs(packed, "nsp", np.random.default_rng(0), CLS, SEP)


@pytest.mark.parametrize("dynamic", [False, True])
def test_memory_mapped_examples_give_the_batches_of_the_table_in_memory(tmp_path, dynamic):
    """Shards read memory-mapped (one chunk per shard, batches across chunk boundaries) give
    exactly the batches of the same rows as one in-memory table (one chunk)."""
    doc_ids, ids, words = sentences(150)
    _, pairs, _ = pairs_of(doc_ids, ids, words)
    write_shards.fn(pairs, MaskingConfig(scheme="wwm"), tmp_path, objective="x", seed=2, dynamic=dynamic,
                    dupe_factor=2, shard_size=37, mask_token_id=MASK,
                    random_token_ids=np.arange(1000, 2000, dtype=np.int32))
    mapped = read_shards(tmp_path)
    in_memory = pa.Table.from_pylist(mapped.to_pylist(), schema=mapped.schema)
    assert mapped.column("input_ids").num_chunks > 3 and in_memory.column("input_ids").num_chunks == 1
    masker = (DynamicMasker(MaskingConfig(scheme="wwm"), 2, "x", MASK, np.arange(1000, 2000, dtype=np.int32))
              if dynamic else None)
    a, b = PretrainingExamples.from_table(mapped, masker), PretrainingExamples.from_table(in_memory, masker)
    assert len(a) == len(b) == mapped.num_rows and np.array_equal(a.lengths, b.lengths)
    assert len(a.ids) == mapped.column("input_ids").num_chunks
    # zero-copy: the token ids of each chunk are a view of the mapped file, not a copy
    assert all(not v.flags.owndata for v in a.ids)
    rng = np.random.default_rng(0)
    for step, index in enumerate([np.array([0, 36, 37, len(a) - 1, 74]), *rng.integers(0, len(a), (20, 8))]):
        x, y = a.batch(index, step), b.batch(index, step)
        assert x.keys() == y.keys() and "sentence_labels" in x
        assert all(x[k].dtype == torch.int64 and torch.equal(x[k], y[k]) for k in x)
    with pytest.raises(IndexError):
        a.batch(np.array([len(a)]))


def test_masking_on_a_dask_cluster_writes_the_same_shards(tmp_path, prefect_server):
    """Each static shard is a Prefect task on Dask: same files as masking in this process."""
    from distributed import LocalCluster

    doc_ids, ids, words = sentences(120)
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP)
    store = PackedStore(tmp_path / "packed", 64)
    store.append(packed)
    kwargs = dict(objective="mlm", seed=5, dupe_factor=2, shard_size=40, mask_token_id=MASK, dynamic=False,
                  random_token_ids=np.arange(1000, 2000, dtype=np.int32))
    local = write_shards.fn(store, MaskingConfig(scheme="mlm"), tmp_path / "local", **kwargs)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask = write_shards.fn(store, MaskingConfig(scheme="mlm"), tmp_path / "dask",
                               executor=Executor(kind="address", workers=2, address=cluster.scheduler_address),
                               **kwargs)
    assert local == dask and local["shards"] > 2
    files = sorted((tmp_path / "local").iterdir())
    assert [f.read_bytes() for f in files] == [(tmp_path / "dask" / f.name).read_bytes() for f in files]


def test_cut_points_hand_worked():
    """A row is cut at a sentence start after its first one or, with one sentence, at a word start
    after its first token; a row of one word has no cut point."""
    from tasks.pretraining.pairing import _cut_point

    # [CLS] s1(w0 w0 w1) s2(w2) s3(w3 w3) [SEP]: sentences start at 1, 4 and 5
    starts = np.array([0, 1, 0, 0, 1, 1, 0, 0], dtype=bool)
    words = np.array([-1, 0, 0, 1, 2, 3, 3, -1])
    assert _cut_point(starts, words, 8, -1) == 2
    assert [_cut_point(starts, words, 8, k) for k in (0, 1)] == [4, 5]
    # a row that starts mid-sentence: its first start is still skipped
    starts = np.array([0, 0, 0, 1, 0, 1, 0, 0], dtype=bool)
    assert _cut_point(starts, words, 8, -1) == 1 and _cut_point(starts, words, 8, 0) == 5
    # one sentence: word starts after the first token (positions 3, 4, 5)
    one = np.array([0, 1, 0, 0, 0, 0, 0, 0], dtype=bool)
    assert _cut_point(one, words, 8, -1) == 3
    assert [_cut_point(one, words, 8, k) for k in range(3)] == [3, 4, 5]
    # one word: nothing to cut
    assert _cut_point(one, np.array([-1, 0, 0, 0, -1]), 5, -1) == 0
