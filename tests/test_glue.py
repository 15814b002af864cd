"""GLUE/CLUE/table loaders, the malformed-record policy on them, metrics, regression encoding."""

import json
import math

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

from tasks.core.errors import ParamsError, SourceError
from tasks.core.io import write_parquet
from tasks.core.quality import Issues
from tasks.downstream.classification import METRICS, EncodedClassification, classification_metrics, score
from tasks.downstream.clue import read_clue_jsonl
from tasks.downstream.families import Classification
from tasks.downstream.glue import GLUE_TASKS, glue_task, read_glue
from tasks.downstream.records import split_schema, table_labels
from tasks.downstream.tables import read_table

T = "\t"
MNLI_TRAIN_HEADER = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
                     "sentence2_parse sentence1 sentence2 label1 gold_label").split()
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
STSB_HEADER = "index genre filename year old_index source1 source2 sentence1 sentence2 score".split()


def tsv(*rows) -> str:
    return "".join(T.join(r) + "\n" for r in rows)


# (task, file name, file text, [(text_a, text_b, label)]), rows as in the real GLUE files.
LAYOUTS = [
    ("CoLA", "train.tsv", tsv(
        ["gj04", "1", "", "Our friends won't buy this analysis, let alone the next one we propose."],
        ["gj04", "0", "*", "They drank the pub."]),
     [("Our friends won't buy this analysis, let alone the next one we propose.", None, 1),
      ("They drank the pub.", None, 0)]),
    ("SST-2", "train.tsv", tsv(["sentence", "label"], ["hide new secretions from the parental units ", "0"],
                               ["the greatest musicians ", "1"]),
     [("hide new secretions from the parental units", None, 0), ("the greatest musicians", None, 1)]),
    # The MRPC header keeps the BOM of Microsoft's msr_paraphrase_train.txt; texts hold unbalanced quotes.
    ("MRPC", "dev.tsv", "\ufeff" + tsv(
        ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
        ["1", "1355540", "1355592", 'He said the " foodservice pie business', 'The " foodservice pie business'],
        ["0", "2029631", "2029565", "Magnarelli said Racicot hated the Iraqi regime.",
         "His wife said he was \" 100 percent behind George Bush \"."]),
     [('He said the " foodservice pie business', 'The " foodservice pie business', 1),
      ("Magnarelli said Racicot hated the Iraqi regime.",
       'His wife said he was " 100 percent behind George Bush ".', 0)]),
    ("QQP", "train.tsv", tsv(
        ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
        ["133273", "213221", "213222", "How is the life of a math student?", "Which level is enough for jlpt5?", "0"],
        ["402555", "536040", "536041", "How do I control my horny emotions?", "How do you control your horniness?",
         "1"]),
     [("How is the life of a math student?", "Which level is enough for jlpt5?", 0),
      ("How do I control my horny emotions?", "How do you control your horniness?", 1)]),
    ("STS-B", "train.tsv", tsv(
        STSB_HEADER,
        ["0", "main-captions", "MSRvid", "2012test", "0001", "none", "none", "A plane is taking off.",
         "An air plane is taking off.", "5.000"],
        ["1", "main-captions", "MSRvid", "2012test", "0004", "none", "none", "A man is playing a large flute.",
         "A man is playing a flute.", "3.800"]),
     [("A plane is taking off.", "An air plane is taking off.", 5.0),
      ("A man is playing a large flute.", "A man is playing a flute.", 3.8)]),
    ("MNLI", "train.tsv", tsv(
        MNLI_TRAIN_HEADER,
        ["0", "31193", "31193n", "government", "( ( Conceptually cream ) ...", "( ( ( Product and ) ...", "(ROOT ...)",
         "(ROOT ...)", "Conceptually cream skimming has two basic dimensions - product and geography.",
         "Product and geography are what make cream skimming work. ", "neutral", "neutral"],
        ["1", "101457", "101457e", "telephone", "(...)", "(...)", "(ROOT ...)", "(ROOT ...)",
         "you know during the season and i guess at at your level uh you lose them",
         "You lose the things to the following level if the people recall.", "entailment", "entailment"]),
     [("Conceptually cream skimming has two basic dimensions - product and geography.",
       "Product and geography are what make cream skimming work.", 2),
      ("you know during the season and i guess at at your level uh you lose them",
       "You lose the things to the following level if the people recall.", 1)]),
    ("MNLI", "dev_matched.tsv", tsv(
        MNLI_DEV_HEADER,
        ["0", "63735", "63735n", "slate", "(...)", "(...)", "(ROOT ...)", "(ROOT ...)",
         "The new rights are nice enough", "Everyone really likes the newest benefits ", "neutral", "entailment",
         "neutral", "neutral", "neutral", "neutral"],
        ["1", "91383", "91383c", "government", "(...)", "(...)", "(ROOT ...)", "(ROOT ...)",
         "This site includes a list of all award winners.", "The Government Executive articles are not online.",
         "contradiction", "contradiction", "contradiction", "contradiction", "contradiction", "contradiction"]),
     [("The new rights are nice enough", "Everyone really likes the newest benefits", 2),
      ("This site includes a list of all award winners.", "The Government Executive articles are not online.", 0)]),
    ("QNLI", "dev.tsv", tsv(
        ["index", "question", "sentence", "label"],
        ["0", "What came into force after the new constitution was herald?",
         "As of that day, the new constitution heralding the Second Republic came into force.", "entailment"],
        ["1", "What is the first major city in the stream of the Rhine?",
         "The most important tributaries in this area are the Ill below of Strasbourg.", "not_entailment"]),
     [("What came into force after the new constitution was herald?",
       "As of that day, the new constitution heralding the Second Republic came into force.", 0),
      ("What is the first major city in the stream of the Rhine?",
       "The most important tributaries in this area are the Ill below of Strasbourg.", 1)]),
    ("RTE", "train.tsv", tsv(
        ["index", "sentence1", "sentence2", "label"],
        ["0", "No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq.",
         "not_entailment"],
        ["1", "A place of sorrow, after Pope John Paul II died, became a place of celebration.",
         "Pope Benedict XVI is the new leader of the Roman Catholic Church.", "entailment"]),
     [("No Weapons of Mass Destruction Found in Iraq Yet.", "Weapons of Mass Destruction Found in Iraq.", 1),
      ("A place of sorrow, after Pope John Paul II died, became a place of celebration.",
       "Pope Benedict XVI is the new leader of the Roman Catholic Church.", 0)]),
    ("WNLI", "train.tsv", tsv(
        ["index", "sentence1", "sentence2", "label"],
        ["0", "I stuck a pin through a carrot. When I pulled the pin out, it had a hole.",
         "The carrot had a hole.", "1"],
        ["1", "John couldn't see the stage with Billy in front of him because he is so short.",
         "Billy is so short.", "0"]),
     [("I stuck a pin through a carrot. When I pulled the pin out, it had a hole.", "The carrot had a hole.", 1),
      ("John couldn't see the stage with Billy in front of him because he is so short.", "Billy is so short.", 0)]),
]


@pytest.mark.parametrize("task,name,text,expected", LAYOUTS, ids=[f"{t}-{n}" for t, n, _, _ in LAYOUTS])
def test_glue_layouts(tmp_path, task, name, text, expected):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    issues = Issues("fail")
    table = read_glue(path, task, issues)
    spec = GLUE_TASKS[task]
    assert table.schema.equals(split_schema(spec.regression))
    rows = table.to_pylist()
    assert [(r["text_a"], r["text_b"], r["label"]) for r in rows] == expected
    first = 1 if spec.header else 0
    assert [r["id"] for r in rows] == [f"{task}-{path.stem}-{first + i + 1}" for i in range(len(expected))]
    assert table_labels(table) == (None if spec.regression else list(spec.labels))
    assert not issues.counts


def test_glue_task_table():
    assert list(GLUE_TASKS) == ["CoLA", "SST-2", "MRPC", "QQP", "STS-B", "MNLI", "QNLI", "RTE", "WNLI"]
    assert all(m in METRICS for t in GLUE_TASKS.values() for m in t.metrics)
    assert {t: s.metrics for t, s in GLUE_TASKS.items()} == {
        "CoLA": ("matthews",), "SST-2": ("accuracy",), "MRPC": ("accuracy", "f1"), "QQP": ("accuracy", "f1"),
        "STS-B": ("pearson", "spearman"), "MNLI": ("accuracy",), "QNLI": ("accuracy",), "RTE": ("accuracy",),
        "WNLI": ("accuracy",)}
    assert GLUE_TASKS["MNLI"].labels == ("contradiction", "entailment", "neutral")
    assert GLUE_TASKS["STS-B"].num_labels == 1 and GLUE_TASKS["MNLI"].num_labels == 3
    assert set(GLUE_TASKS["MNLI"].files) == {"train", "dev_matched", "dev_mismatched"}
    assert glue_task("sst2") is GLUE_TASKS["SST-2"] and glue_task("sts-b") is GLUE_TASKS["STS-B"]
    with pytest.raises(ParamsError, match="unknown GLUE task 'SQuAD'"):
        glue_task("SQuAD")


RTE_BAD = tsv(["index", "sentence1", "sentence2", "label"],
              ["0", "Paris is in France.", "Paris is French.", "entailment"],
              ["1", "A row that lost its hypothesis", "not_entailment"],    # line 3: 3 columns
              ["2", "The cat sat.", "A cat sat.", "maybe"],                 # line 4: bad label
              ["3", "It rained.", "It was wet.", "not_entailment"])


def test_glue_malformed_fail_names_file_and_line(tmp_path):
    (tmp_path / "dev.tsv").write_text(RTE_BAD, encoding="utf-8")
    with pytest.raises(SourceError, match=r"dev\.tsv:3: 3 tab-separated columns, expected 4"):
        read_glue(tmp_path / "dev.tsv", "RTE", Issues("fail"))


@pytest.mark.parametrize("policy", ["skip", "repair"])
def test_glue_malformed_skip_and_repair_drop_and_count(tmp_path, policy):
    (tmp_path / "dev.tsv").write_text(RTE_BAD, encoding="utf-8")
    issues = Issues(policy)
    table = read_glue(tmp_path / "dev.tsv", "RTE", issues)
    assert table.column("id").to_pylist() == ["RTE-dev-2", "RTE-dev-5"]
    assert table.column("label").to_pylist() == [0, 1]
    # nothing here has a repair: "repair" drops too, and says so
    assert issues.to_dict()["counts"] == {"columns_skipped": 1, "label_skipped": 1}
    assert issues.messages[1].endswith("dev.tsv:4: label 'maybe' is not one of entailment, not_entailment -> skipped")


def test_glue_quote_none_crlf_blank_lines_and_stray_cr(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_bytes(b'sentence\tlabel\r\n" an opening quote only\t1\r\n\r\nnext \xe2\x80\x9cline\xe2\x80\x9d\t0\r\n'
                     b'broken\rline\t1\n')
    issues = Issues("skip")
    table = read_glue(path, "SST-2", issues)
    assert table.column("text_a").to_pylist() == ['" an opening quote only', "next \u201cline\u201d"]
    assert table.column("id").to_pylist() == ["SST-2-train-2", "SST-2-train-4"]
    assert issues.to_dict()["counts"] == {"csv_skipped": 1}


def test_stsb_scores_must_be_numbers_in_range(tmp_path):
    row = ["0", "main-captions", "MSRvid", "2012test", "0001", "none", "none", "A b.", "A c."]
    (tmp_path / "dev.tsv").write_text(tsv(STSB_HEADER, row + ["2.5"], row + ["high"], row + ["5.2"], row + ["nan"]))
    issues = Issues("skip")
    table = read_glue(tmp_path / "dev.tsv", "STS-B", issues)
    assert table.column("label").to_pylist() == [2.5] and table.schema.field("label").type == pa.float64()
    assert issues.counts == {"label_skipped": 3}
    with pytest.raises(SourceError, match=r"dev\.tsv:3: score 'high' is not a number in \[0, 5\]"):
        read_glue(tmp_path / "dev.tsv", "STS-B", Issues("fail"))


def test_glue_wrong_file_bad_utf8_and_empty_text(tmp_path):
    (tmp_path / "train.tsv").write_text(tsv(["sentence", "label"], ["fine", "1"]))
    with pytest.raises(SourceError, match=r"train\.tsv:1: header has no column\(s\) 'sentence1', 'sentence2'.*RTE"):
        read_glue(tmp_path / "train.tsv", "RTE", Issues("skip"))
    (tmp_path / "bad.tsv").write_bytes(b"sentence\tlabel\nok\t1\n\xc3\x28\t0\n")
    with pytest.raises(SourceError, match=r"bad\.tsv:3: not valid UTF-8"):
        read_glue(tmp_path / "bad.tsv", "SST-2", Issues("skip"))
    (tmp_path / "empty.tsv").write_text(tsv(["sentence", "label"], [" \u200b ", "1"], ["ok", "0"]))
    issues = Issues("skip")
    assert read_glue(tmp_path / "empty.tsv", "SST-2", issues).num_rows == 1
    assert issues.counts == {"text_skipped": 1}


def jsonl(path, *records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n"
                            for r in records), encoding="utf-8")


def test_clue_afqmc_pairs_with_label_list(tmp_path):
    jsonl(tmp_path / "dev.json",
          {"sentence1": "双十一花呗提额在哪", "sentence2": "里可以提花呗额度", "label": "0"},
          {"sentence1": "花呗支持高铁票支付吗", "sentence2": "为什么不支持花呗付款", "label": "1"},
          '{"sentence1": "坏行", "sentence2": ',                                 # line 3: not JSON
          {"sentence1": "没有标签", "sentence2": "的一行"},                       # line 4: no label
          {"sentence1": "标签", "sentence2": "不在表里", "label": "2"},           # line 5: unknown label
          {"sentence1": "数字", "sentence2": "标签", "label": 1},
          "")
    issues = Issues("skip")
    table = read_clue_jsonl(tmp_path / "dev.json", "sentence1", "sentence2", "label", ["0", "1"], issues,
                            prefix="afqmc-dev")
    assert table.to_pylist() == [
        {"id": "afqmc-dev-1", "text_a": "双十一花呗提额在哪", "text_b": "里可以提花呗额度", "label": 0},
        {"id": "afqmc-dev-2", "text_a": "花呗支持高铁票支付吗", "text_b": "为什么不支持花呗付款", "label": 1},
        {"id": "afqmc-dev-6", "text_a": "数字", "text_b": "标签", "label": 1}]
    assert issues.to_dict()["counts"] == {"field_skipped": 1, "json_skipped": 1, "label_skipped": 1}
    assert table_labels(table) == ["0", "1"]
    with pytest.raises(SourceError, match=r"dev\.json:3: not valid JSON"):
        read_clue_jsonl(tmp_path / "dev.json", "sentence1", "sentence2", "label", ["0", "1"], Issues("fail"))


def test_clue_tnews_single_sentence_infers_numeric_label_order(tmp_path):
    jsonl(tmp_path / "train.json",
          {"label": "102", "label_desc": "news_entertainment", "sentence": "江疏影甜甜圈自拍", "keywords": ""},
          {"label": "110", "label_desc": "news_military", "sentence": "以色列大规模空袭", "keywords": ""},
          {"label": "100", "label_desc": "news_story", "sentence": "他就是个传奇", "keywords": ""},
          {"label": "102", "label_desc": "news_entertainment", "sentence": "  ", "keywords": ""},
          {"label": "102", "label_desc": "news_entertainment", "sentence": 7, "keywords": ""})
    issues = Issues("repair")
    table = read_clue_jsonl(tmp_path / "train.json", "sentence", None, "label", None, issues)
    assert table_labels(table) == ["100", "102", "110"]
    assert table.column("label").to_pylist() == [1, 2, 0]
    assert table.column("text_b").null_count == 3
    assert table.column("id").to_pylist() == ["train-1", "train-2", "train-3"]
    assert issues.to_dict()["counts"] == {"field_skipped": 1, "text_skipped": 1}


def test_label_names_survive_the_split_files_and_set_the_class_count(tmp_path):
    # Only two of the three CMNLI labels occur: the classifier still needs three outputs.
    jsonl(tmp_path / "train.json", {"sentence1": "他在跑步", "sentence2": "他在运动", "label": "entailment"},
          {"sentence1": "他在跑步", "sentence2": "他在睡觉", "label": "contradiction"})
    table = read_clue_jsonl(tmp_path / "train.json", "sentence1", "sentence2", "label",
                            ["contradiction", "entailment", "neutral"], Issues("fail"))
    write_parquet(tmp_path / "train.parquet", table)
    back = pq.read_table(tmp_path / "train.parquet")
    assert table_labels(back) == ["contradiction", "entailment", "neutral"]
    assert Classification().labels({"train": back}) == ["contradiction", "entailment", "neutral"]


def lcqmc_like():
    return pa.table({"label": [1, 1, 0, 1, 0, -1, 1],
                     "s1": ["喜欢打篮球的男生喜欢什么样的女生", "我手机丢了，我想换个手机", "大家觉得她好看吗",
                            "求秋色之空漫画全集", None, "负标签", "空的"],
                     "s2": ["爱打篮球的男生喜欢什么样的女生", "我想买个新手机，求推荐", "大家觉得跑男好看吗？",
                            "求秋色之空全集漫画", "空的", "一行", ""]})


def test_feather_table_like_lcqmc(tmp_path):
    path = tmp_path / "LCQMC.ft"
    feather.write_feather(lcqmc_like(), path)
    issues = Issues("skip")
    table = read_table(path, "s1", "s2", "label", issues)
    assert table.schema.equals(split_schema())
    assert table.column("label").to_pylist() == [1, 1, 0, 1]
    assert table.column("id").to_pylist() == ["LCQMC-0", "LCQMC-1", "LCQMC-2", "LCQMC-3"]
    assert table.to_pylist()[0]["text_b"] == "爱打篮球的男生喜欢什么样的女生"
    assert issues.to_dict()["counts"] == {"label_skipped": 1, "text_skipped": 2}
    with pytest.raises(SourceError, match=r"LCQMC\.ft#row4: text_a is empty or null"):
        read_table(path, "s1", "s2", "label", Issues("fail"))
    with pytest.raises(SourceError, match=r"no column\(s\) 'sentence1'"):
        read_table(path, "sentence1", "s2", "label", Issues("fail"))


def test_parquet_and_csv_tables(tmp_path):
    pq.write_table(lcqmc_like().slice(0, 4), tmp_path / "t.parquet")
    assert read_table(tmp_path / "t.parquet", "s1", "s2", "label", Issues()).num_rows == 4
    (tmp_path / "t.csv").write_text('label,s1,s2\n1,"你好,世界",您好\n1.0,a\n0.5,b,c\n0,"多\n行",d\n',
                                    encoding="utf-8")
    issues = Issues("skip")
    table = read_table(tmp_path / "t.csv", "s1", "s2", "label", issues)
    assert table.to_pylist() == [{"id": "t-0", "text_a": "你好,世界", "text_b": "您好", "label": 1},
                                 {"id": "t-3", "text_a": "多 行", "text_b": "d", "label": 0}]
    assert issues.to_dict()["counts"] == {"columns_skipped": 1, "label_skipped": 1}
    assert issues.messages[0].startswith(f"{tmp_path / 't.csv'}:3: 2 columns, expected 3")
    reg = read_table(tmp_path / "t.csv", "s1", "s2", "label", Issues("skip"), regression=True)
    assert reg.column("label").to_pylist() == [1.0, 0.5, 0.0] and reg.schema.equals(split_schema(True))


def test_metrics_hand_worked():
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    preds = [1, 1, 1, 0, 0, 0, 1, 1]
    # TP=3 FN=1 TN=2 FP=2
    m = score(["accuracy", "f1", "matthews", "macro_f1"], labels, preds)
    assert list(m) == ["accuracy", "f1", "matthews", "macro_f1"]
    assert m["accuracy"] == pytest.approx(5 / 8)
    assert m["f1"] == pytest.approx(2 * 3 / (2 * 3 + 2 + 1))  # 2TP / (2TP + FP + FN) = 2/3
    assert m["matthews"] == pytest.approx((3 * 2 - 2 * 1) / math.sqrt((3 + 2) * (3 + 1) * (2 + 2) * (2 + 1)))
    assert m["macro_f1"] == pytest.approx((2 / 3 + 2 * 2 / (2 * 2 + 1 + 2)) / 2)
    # F1 is of class 1, not of the majority class
    assert score(["f1"], [0, 0, 0, 1], [0, 0, 0, 0])["f1"] == 0.0
    assert score(["matthews"], [0, 1, 0, 1], [1, 0, 1, 0])["matthews"] == pytest.approx(-1.0)
    assert classification_metrics(np.array(labels), np.array(preds)) == {"accuracy": m["accuracy"],
                                                                         "macro_f1": m["macro_f1"]}


def test_correlations():
    x = np.array([0.0, 1.0, 2.5, 3.0, 5.0])
    assert score(["pearson", "spearman"], x, 2 * x + 1) == pytest.approx({"pearson": 1.0, "spearman": 1.0})
    assert score(["pearson"], x, -x)["pearson"] == pytest.approx(-1.0)
    m = score(["pearson", "spearman"], x, x ** 3)  # monotone, not linear
    assert m["spearman"] == pytest.approx(1.0) and m["pearson"] < 0.99
    # hand-worked: deviations (-1, 0, 1) and (-1, 1, 0): r = 1 / sqrt(2 * 2) = 0.5
    assert score(["pearson"], [1, 2, 3], [1, 3, 2])["pearson"] == pytest.approx(0.5)


def test_score_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown metric.*bleu"):
        score(["accuracy", "bleu"], [1], [1])
    with pytest.raises(ValueError, match="must be equal"):
        score(["accuracy"], [1, 0], [1])
    with pytest.raises(ValueError, match="non-empty"):
        score(["accuracy"], [], [])


@pytest.fixture(scope="module")
def tokenizer():
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "好", "很", "差", "不", "错"])}
    return BertTokenizerFast(vocab=vocab, do_lower_case=True, tokenize_chinese_chars=True)


def test_regression_encoding_gives_float_labels_and_mse(tokenizer):
    table = pa.table({"id": ["a", "b", "c"], "text_a": ["很好", "很差", "不错"],
                      "text_b": ["不错", "很好", "好"],
                      "label": [4.8, 0.4, 3.25]}, schema=split_schema(regression=True))
    enc = EncodedClassification.encode(table, tokenizer, 16)
    assert enc.regression and enc.labels.dtype == np.float32
    batch = enc.batch(np.array([2, 0]))
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (2,)
    assert batch["labels"].tolist() == pytest.approx([3.25, 4.8])
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(
        vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
        num_labels=1)).eval()
    with torch.no_grad():
        out = model(**batch)
    assert out.logits.shape == (2, 1)
    assert out.loss.item() == pytest.approx(((out.logits.squeeze(-1) - batch["labels"]) ** 2).mean().item(), rel=1e-5)
    # classification tables still give int64 labels
    cls = EncodedClassification.encode(table.set_column(3, "label", pa.array([1, 0, 1], pa.int64())),
                                       tokenizer, 16)
    assert not cls.regression and cls.batch(np.array([0]))["labels"].dtype == torch.int64


def test_fields_over_the_csv_limit_name_file_and_line(tmp_path):
    big = "长" * 131073
    (tmp_path / "t.csv").write_text(f"text,label\nok,1\n{big},0\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"t\.csv:3: unreadable CSV record \(a field longer than 131072 characters"):
        read_table(tmp_path / "t.csv", "text", None, "label", Issues("skip"))
    # an unclosed quote swallows the following lines: the record's first line is named
    (tmp_path / "q.csv").write_text('text,label\nok,1\n"open,0\n' + "row,1\n" * 30000, encoding="utf-8")
    with pytest.raises(SourceError, match=r"q\.csv:3: .*is a quote left open\?"):
        read_table(tmp_path / "q.csv", "text", None, "label", Issues("skip"))
    (tmp_path / "train.tsv").write_text(f"sentence\tlabel\nok\t1\n{big}\t0\nfine\t1\n", encoding="utf-8")
    with pytest.raises(SourceError, match=r"train\.tsv:3: unreadable line \(a field longer than 131072"):
        read_glue(tmp_path / "train.tsv", "SST-2", Issues("fail"))
    issues = Issues("skip")
    assert read_glue(tmp_path / "train.tsv", "SST-2", issues).column("id").to_pylist() == ["SST-2-train-2",
                                                                                          "SST-2-train-4"]
    assert issues.counts == {"csv_skipped": 1}
