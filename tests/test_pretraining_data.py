"""Packing never crosses documents and keeps words; NSP/SOP pairs follow their rules; shards
are deterministic and decode back; dynamic shards keep what batch-time masking needs."""

import re

import numpy as np
import pytest
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.pretraining.masking import MaskingConfig
from tasks.pretraining.pretraining_data import pack_documents, read_shards, sentence_pairs, write_shards

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


def test_shards_are_deterministic_and_decode(tmp_path):
    doc_ids, ids, words = sentences(200)
    packed = pack_documents(doc_ids, ids, words, 64, CLS, SEP)
    kwargs = dict(objective="wwm", seed=3, dupe_factor=2, shard_size=50, mask_token_id=MASK, dynamic=False,
                  random_token_ids=np.arange(1000, 2000, dtype=np.int32))
    cfg = MaskingConfig(scheme="wwm")
    stats = write_shards.fn(packed, cfg, tmp_path / "a", workers=1, **kwargs)
    write_shards.fn(packed, cfg, tmp_path / "b", workers=2, **kwargs)  # parallel: same bytes
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
    assert pq.read_metadata(files_a[0]).num_rows == 50


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
    shard = sorted(tmp_path.glob("shard-*.parquet"))[1]
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(SourceError, match=rf"^{re.escape(str(shard))}: unreadable pretraining data shard \(.+\); rerun"):
        read_shards(tmp_path)


def test_shards_with_different_columns_are_a_source_error(tmp_path):
    pq.write_table(pa.table({"input_ids": [[1, 2]], "word_ids": [[0, 0]]}), tmp_path / "shard-00000.parquet")
    pq.write_table(pa.table({"input_ids": [[1, 2]]}), tmp_path / "shard-00001.parquet")
    with pytest.raises(SourceError,
                       match=r"shard-00001.parquet: columns \(input_ids: [^,]*\) differ from those of shard-00000"):
        read_shards(tmp_path)
