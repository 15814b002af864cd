"""Normalisation, sentence splitting, People's Daily parsing and corpus building."""

from pathlib import Path

import pytest

import pyarrow.parquet as pq

from tasks.core.errors import SourceError
from tasks.core.io import ParquetStream, write_parquet
from tasks.core.text import join_words, normalise, split_sentences
from tasks.corpus.ingest import SCHEMA, build_corpus, read_documents, read_peoples_daily

PD_SAMPLE = (
    "迈向/v  充满/v  希望/n  的/u  新/a  世纪/n  （/w  附/v  图片/n  １/m  张/q  ）/w\n"
    "（/w  一九九七年/t  十二月/t  三十一日/t  ）/w\n"
    "１２月/t  ３１日/t  ，/w  江/nr  泽民/nr  发表/v  讲话/n  。/w  （/w  新华社/nt  记者/n  摄/Vg  ）/w\n"
    "同胞/n  们/k  ：/w\n"
    "北京/ns  举行/v  音乐会/n\n"
    "今晚/t  的/u  长安街/ns  流光溢彩/l  。/w  观众/n  说/v  ：/w  “/w  好/a  ！/w  ”/w\n"
)


def build(tmp_path, inputs, eval_sentences=frozenset(), min_sentence_chars=2, rows=2):
    """build_corpus into a Parquet file of ``rows``-row row groups; the table read back and the stats."""
    with ParquetStream(tmp_path / "corpus.parquet", SCHEMA, rows) as out:
        stats = build_corpus(inputs, set(eval_sentences), min_sentence_chars, out)
    return pq.read_table(tmp_path / "corpus.parquet"), stats


def test_normalise():
    assert normalise("  １９９８年\u200b\tＡＢ  好\x07 ") == "1998年 AB 好"
    assert normalise("，。！“”") == "，。！“”"  # Chinese punctuation is kept
    assert normalise("\u3000\u3000") == ""


def test_split_sentences_keeps_punctuation_and_closing_quotes():
    assert split_sentences("他说：“好。”然后走了！还有") == ["他说：“好。”", "然后走了！", "还有"]
    assert split_sentences("真的吗？？是的……好；") == ["真的吗？？", "是的……", "好；"]
    assert split_sentences("") == []


def test_join_words_spaces_only_between_ascii_alphanumerics():
    assert join_words(["访问", "www", "网站", "Windows", "98"]) == "访问www网站Windows 98"


def test_peoples_daily_strips_tags_and_groups_articles(tmp_path):
    path = tmp_path / "pd.txt"
    path.write_text(PD_SAMPLE, encoding="utf-8")
    docs = list(read_peoples_daily(path))
    assert len(docs) == 2
    assert docs[0][0] == "迈向充满希望的新世纪（附图片１张）"
    assert docs[0][2] == "１２月３１日，江泽民发表讲话。（新华社记者摄）"
    assert docs[1][0] == "北京举行音乐会"
    assert all("/" not in p for d in docs for p in d)


def test_peoples_daily_bad_token_names_file_and_line(tmp_path):
    path = tmp_path / "pd.txt"
    path.write_text("好/a  的/u\n坏的  句子/n\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"pd.txt:2: token '坏的' is not in word/POS format"):
        list(read_peoples_daily(path))


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes("第一行\n".encode() + b"\xff\xfe bad\n")
    with pytest.raises(SourceError, match=r"c.txt:2: not valid UTF-8"):
        list(read_documents(path, "txt"))


@pytest.mark.parametrize("name,content,fmt", [
    ("c.jsonl", '{"text": "一。"}\n{"text": "二。"}\n', "auto"),
    ("c.csv", "id,text\n1,一。\n2,二。\n", "auto"),
    ("c.txt", "一。\n\n二。\n", "txt"),
])
def test_local_formats(tmp_path, name, content, fmt):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert list(read_documents(path, fmt)) == [["一。"], ["二。"]]


def test_parquet_format(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["一。", None, "二。", ""]}), tmp_path / "c.parquet")
    docs = list(read_documents(tmp_path / "c.parquet", "auto", "body"))
    assert docs == [["一。"], [""], ["二。"], [""]]  # null and empty records reach build_corpus, which counts them
    _, stats = build(tmp_path, [("src", "zh", docs)], min_sentence_chars=1)
    assert stats.to_dict()["dropped"]["empty_records"] == 2


def test_malformed_records_name_the_line(tmp_path):
    (tmp_path / "c.jsonl").write_text('{"text": "一"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(SourceError, match=r"c.jsonl:2: invalid JSON"):
        list(read_documents(tmp_path / "c.jsonl", "jsonl"))
    (tmp_path / "d.jsonl").write_text('{"body": "一"}\n', encoding="utf-8")
    with pytest.raises(SourceError, match=r"d.jsonl:1: record has no string field 'text'"):
        list(read_documents(tmp_path / "d.jsonl", "jsonl"))
    (tmp_path / "e.csv").write_text("id,body\n1,x\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"e.csv:1: CSV header has no column 'text'"):
        list(read_documents(tmp_path / "e.csv", "csv"))
    with pytest.raises(SourceError, match="cannot tell the format"):
        read_documents(Path("x.bin"), "auto")


def test_build_corpus_dedupes_filters_and_counts(tmp_path):
    docs = [["今天天气很好。我们去公园。"], ["  "], ["今天天气很好。我们去公园。"],
            ["这是测试集的句子。但这句不是。", "好"], ["这是测试集的句子。"]]
    table, stats = build(tmp_path, [("src", "zh", docs)], eval_sentences={"这是测试集的句子。"})
    assert table.column("text").to_pylist() == ["今天天气很好。", "我们去公园。", "但这句不是。"]
    assert table.column("doc_id").to_pylist() == ["src-000000", "src-000000", "src-000001"]
    assert table.column("sent_id").to_pylist() == [0, 1, 0]
    d = stats.to_dict()
    assert d["languages"]["zh"] == {"documents": 2, "sentences": 3, "characters": 7 + 6 + 6}
    # ["  "] has no text (an empty record); ["这是测试集的句子。"] loses its only sentence (an empty document)
    assert d["dropped"] == {"empty_records": 1, "empty_documents": 1, "duplicate_documents": 1,
                            "eval_overlap_sentences": 2, "short_sentences": 1}


def test_zero_length_records_are_counted(tmp_path):
    docs = [["好的句子。"], [""], ["\u200b\u3000"], ["\t \x07"], ["另一句话。"]]
    table, stats = build(tmp_path, [("src", "zh", docs)])
    assert table.num_rows == 2
    d = stats.to_dict()["dropped"]
    assert d["empty_records"] == 3 and d["empty_documents"] == 0
    # every input record is accounted for: kept, empty or duplicate
    assert stats.documents["zh"] + d["empty_records"] + d["empty_documents"] + d["duplicate_documents"] == len(docs)


def test_json_lines_declared_as_txt_is_refused(tmp_path):
    path = tmp_path / "reviews.txt"
    path.write_text('{"text": "很好。"}\n\n{"text": "不好。", "label": 0}\n一行普通文字\n', encoding="utf-8")
    with pytest.raises(SourceError, match=r"reviews.txt: 2 of its first 3 non-empty lines are JSON objects.*"
                                          r"format: jsonl"):
        list(read_documents(path, "txt"))
    # prose with a few braces, and a lone JSON-looking line among prose, is still text
    path.write_text('{"a": 1}\n第一行。\n{不是JSON}\n第三行。\n', encoding="utf-8")
    assert len(list(read_documents(path, "txt"))) == 4


def test_empty_corpus_names_the_sources(tmp_path):
    with pytest.raises(SourceError, match="empty corpus.*source\\(s\\) a, b"):
        build(tmp_path, [("a", "zh", [["  "]]), ("b", "zh", [])])


def test_csv_documents_over_128_kb_are_read_and_csv_errors_named(tmp_path, monkeypatch):
    from tasks.corpus.ingest import read_documents
    from tasks.core.errors import SourceError
    long = "长" * 200_000
    good = tmp_path / "docs.csv"
    good.write_text(f'text\n"{long}"\n短文\n', encoding="utf-8")
    assert [d[0] for d in read_documents(good, "csv", "text")] == [long, "短文"]
    monkeypatch.setattr("tasks.corpus.ingest.CSV_FIELD_LIMIT", 1000)  # csv's own errors become one line
    bad = tmp_path / "bad.csv"
    bad.write_text(f'text\nfine\n"{long}"\n', encoding="utf-8")
    with pytest.raises(SourceError, match=r"bad.csv:\d+: unreadable CSV record"):
        list(read_documents(bad, "csv", "text"))


def test_streamed_corpus_is_the_same_whatever_the_row_group_size(tmp_path):
    """Sentences reach the output in corpus order, a row group of ``rows`` at a time: the
    content never depends on the size, and one group as large as the corpus gives exactly
    the bytes of writing the whole table at once."""
    docs = [[f"第{i}篇文章的第一句。", f"第{i}篇的第二句！", "重复的句子。"] for i in range(40)]
    docs += docs[:5]  # duplicates across row groups are still found
    tables = {}
    for rows in (1, 7, 1000):
        (tmp_path / str(rows)).mkdir()
        tables[rows], stats = build(tmp_path / str(rows), [("src", "zh", docs)], rows=rows)
        assert stats.dropped_duplicate_documents == 5
        groups = pq.ParquetFile(tmp_path / str(rows) / "corpus.parquet").metadata
        assert [groups.row_group(g).num_rows for g in range(groups.num_row_groups)][:-1] == \
            [rows] * (groups.num_row_groups - 1)
    assert tables[1].equals(tables[7]) and tables[7].equals(tables[1000]) and tables[1].num_rows == 120
    write_parquet(tmp_path / "whole.parquet", tables[1000])
    assert (tmp_path / "whole.parquet").read_bytes() == (tmp_path / "1000" / "corpus.parquet").read_bytes()


def test_dedupe_keys_are_stable_64_bit_hashes():
    from tasks.core.text import text_hash

    # the same on every machine and process (hash() is salted per process): a fixed value
    assert text_hash("今天天气很好。") == text_hash("今天天气很好。") < 2**64
    assert text_hash("今天天气很好。") != text_hash("今天天气很好！")
    assert text_hash("") == int.from_bytes(bytes.fromhex("e4a6a0577479b2b4"), "little")


def test_parquet_input_is_streamed_and_a_missing_column_named(tmp_path):
    import pyarrow as pa

    pq.write_table(pa.table({"text": [f"句子{i}。" for i in range(50_000)]}), tmp_path / "big.parquet",
                   row_group_size=10_000)
    docs = read_documents(tmp_path / "big.parquet", "parquet")
    assert next(docs) == ["句子0。"] and sum(1 for _ in docs) == 49_999
    with pytest.raises(SourceError, match=r"big.parquet: Parquet file has no column 'body'"):
        list(read_documents(tmp_path / "big.parquet", "parquet", "body"))
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(SourceError, match=r"bad.parquet: not a readable Parquet file"):
        list(read_documents(tmp_path / "bad.parquet", "parquet"))


def test_doc_ids_are_unique_across_the_files_of_a_source(tmp_path):
    """A source of several files (sentiment: pos.txt, neg.txt) numbers its documents on: a
    reused doc_id would let later stages (multilingual) glue two reviews into one document."""
    table, stats = build(tmp_path, [("sentiment", "zh", [["好评一。"], ["好评二。"]]),
                                    ("sentiment", "zh", [["差评一。"]]), ("other", "zh", [["别的。"]])])
    assert table.column("doc_id").to_pylist() == ["sentiment-000000", "sentiment-000001", "sentiment-000002",
                                                  "other-000000"]
