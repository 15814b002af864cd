"""Sentiment data preparation, encoding, metrics and seed aggregation."""

import json

import numpy as np
import pyarrow as pa
import pytest
import torch
from transformers import BertTokenizerFast

from tasks.core.errors import SourceError
from tasks.core.params import DownstreamTask
from tasks.downstream.classification import EncodedClassification, classification_metrics
from tasks.downstream.polarity import deduplicate, read_polarity_lines, split_table
from tasks.downstream.downstream import prepare_task
from tasks.downstream.finetune import fit, summarize
from tasks.downstream.finetuned import read_scores, write_scores
from tasks.downstream.records import table_labels


def test_dedupe_collapses_duplicates_and_drops_conflicts(tmp_path):
    (tmp_path / "pos.txt").write_text("很好\n很好\n一般般\n\n不错！\n", encoding="utf-8")
    (tmp_path / "neg.txt").write_text("很差\n一般般\n很差\n", encoding="utf-8")
    records = read_polarity_lines({1: tmp_path / "pos.txt", 0: tmp_path / "neg.txt"})
    examples, stats = deduplicate(records)
    assert examples == [("不错！", 1), ("很好", 1), ("很差", 0)]
    assert stats == {"lines": 7, "unique_texts": 4, "duplicate_lines": 3, "conflicting_texts_dropped": 1,
                     "examples": 3}


def polarity_task(raw, positive: list[str], negative: list[str]) -> DownstreamTask:
    (raw / "pol").mkdir(exist_ok=True)
    (raw / "pol" / "pos.txt").write_text("".join(f"{t}\n" for t in positive), encoding="utf-8")
    (raw / "pol" / "neg.txt").write_text("".join(f"{t}\n" for t in negative), encoding="utf-8")
    return DownstreamTask(family="classification", metrics=["accuracy"], training={},
                          data={"loader": "polarity_lines", "source": "pol", "malformed": "fail",
                                "files": {"positive": "pos.txt", "negative": "neg.txt"},
                                "split": {"dev": 0.25, "test": 0.25}})


def test_prepare_task_counts_classes_per_split(tmp_path):
    spec = polarity_task(tmp_path, [f"好{i}" for i in range(20)], [f"差{i}" for i in range(20)])
    tables, stats = prepare_task.fn("pol", spec, tmp_path, seed=1)
    for split, table in tables.items():
        counts = stats["labels"][split]
        assert set(counts) == {"0", "1"} and sum(counts.values()) == table.num_rows


def test_conflicting_labels_leaving_one_class_raise(tmp_path):
    # Every negative text is also positive: deduplication drops them all, leaving one class.
    texts = [f"一般{i}" for i in range(20)]
    spec = polarity_task(tmp_path, texts + [f"好{i}" for i in range(20)], texts)
    with pytest.raises(SourceError, match=r"task 'pol': fewer than 2 classes \(class: count\) in split\(s\) "
                                          r"train \{'1': 10\}; dev \{'1': 5\}; test \{'1': 5\} after dropping "
                                          r"20 text\(s\) with conflicting labels"):
        prepare_task.fn("pol", spec, tmp_path, seed=1)


def test_one_class_split_from_a_file_is_named(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "train.csv").write_text("text,label\n" + "".join(f"t{i},{i % 2}\n" for i in range(8)))
    (tmp_path / "t" / "dev.csv").write_text("text,label\na,1\nb,1\nc,1\n")
    spec = DownstreamTask(family="classification", metrics=["accuracy"], training={},
                          data={"loader": "table", "source": "t", "columns": {"text_a": "text"}, "malformed": "fail",
                                "files": {"train": "train.csv", "dev": "dev.csv"}, "split": {"test": 0.25}})
    with pytest.raises(SourceError, match=r"task 't': fewer than 2 classes \(class: count\) in split\(s\) "
                                          r"dev \{'1': 3\}$"):
        prepare_task.fn("t", spec, tmp_path, seed=1)


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_clue_labels_are_numbered_by_trains_list_in_every_split(tmp_path, policy):
    """A clue_jsonl task with its own files and data.labels unset: test's "neu", which train lacks, once renumbered
    "pos" from 1 to 2 in test alone (accuracy 0.02 for a model at 0.50). Now one list, train's: the unknown label
    names file, line and label, or is dropped and counted."""
    (tmp_path / "c").mkdir()
    rows = {"train": ["neg", "pos"] * 10, "dev": ["pos", "neg"] * 3, "test": ["pos", "neu", "neg", "pos"]}
    for split, labels in rows.items():
        (tmp_path / "c" / f"{split}.json").write_text(
            "".join(json.dumps({"sentence": f"{split}{i}", "label": y}) + "\n" for i, y in enumerate(labels)))
    spec = DownstreamTask(family="classification", metrics=["accuracy"], training={},
                          data={"loader": "clue_jsonl", "source": "c", "malformed": policy,
                                "files": {s: f"{s}.json" for s in rows}})
    if policy == "fail":
        with pytest.raises(SourceError, match=r"test.json:2: label 'neu' is not one of neg, pos"):
            prepare_task.fn("c", spec, tmp_path, seed=1)
        return
    tables, stats = prepare_task.fn("c", spec, tmp_path, seed=1)
    assert {s: table_labels(t) for s, t in tables.items()} == {s: ["neg", "pos"] for s in rows}
    assert tables["test"]["label"].to_pylist() == [1, 0, 1] and stats["malformed"]["counts"] == {"label_skipped": 1}


def test_bad_encoding_names_file_and_line(tmp_path):
    (tmp_path / "pos.txt").write_bytes("好\n".encode() + b"\xc3\x28\n")
    with pytest.raises(SourceError, match=r"pos.txt:2: not valid UTF-8"):
        read_polarity_lines({1: tmp_path / "pos.txt"})


@pytest.fixture(scope="module")
def tokenizer():
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "好", "很", "差", "不", "错"])}
    return BertTokenizerFast(vocab=vocab, do_lower_case=True, tokenize_chinese_chars=True)


def test_encoding_and_batches(tokenizer):
    table = split_table("t", [("很好", 1), ("很差不错很好", 0)])
    enc = EncodedClassification.encode(table, tokenizer, max_length=5)
    b = enc.batch(np.array([1, 0]))
    # truncated to 5 (a budget of 3: no quarter for the head, the tail 错很好), padded
    assert b["input_ids"].tolist() == [[2, 9, 6, 5, 3], [2, 6, 5, 3, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert b["labels"].tolist() == [0, 1]
    assert (b["token_type_ids"] == 0).all()


def test_sentence_pairs_get_segment_ids(tokenizer):
    table = pa.table({"id": ["a"], "text_a": ["很好"], "text_b": ["不错"], "label": [1]})
    b = EncodedClassification.encode(table, tokenizer, 16).batch(np.array([0]))
    assert b["input_ids"].tolist() == [[2, 6, 5, 3, 8, 9, 3]]
    assert b["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1, 1]]



def test_literal_special_tokens_in_text_are_not_special_ids(tokenizer):
    # "[MASK]" and "[SEP]" written in the texts are word-pieced (here [UNK] [UNK] [UNK]: "[", "mask", "]"
    # are not in the vocabulary), never the mask id or an extra separator; [CLS]/[SEP] are added as usual.
    table = pa.table({"id": ["a"], "text_a": ["很[MASK]好"], "text_b": ["不[SEP]错"], "label": [1]})
    b = EncodedClassification.encode(table, tokenizer, 32).batch(np.array([0]))
    assert b["input_ids"].tolist() == [[2, 6, 1, 1, 1, 5, 3, 8, 1, 1, 1, 9, 3]]
    assert b["token_type_ids"].tolist() == [[0] * 7 + [1] * 6]

def test_metrics_hand_worked():
    labels = np.array([1, 1, 1, 0, 0, 0])
    preds = np.array([1, 1, 0, 0, 0, 1])
    m = classification_metrics(labels, preds)
    assert m["accuracy"] == pytest.approx(4 / 6)
    # class 1: P=2/3 R=2/3 F1=2/3; class 0: same -> macro 2/3
    assert m["macro_f1"] == pytest.approx(2 / 3)
    m = classification_metrics(np.array([1, 1, 1, 0]), np.array([1, 1, 1, 1]))
    assert m["macro_f1"] == pytest.approx((0.0 + 6 / 7) / 2)


def test_summarize():
    s = summarize([0.8, 0.9, 0.85])
    assert s["mean"] == pytest.approx(0.85) and s["max"] == 0.9 and s["min"] == 0.8 and s["n"] == 3
    assert s["std"] == pytest.approx(0.05)
    assert summarize([0.7])["std"] == 0.0


def test_finetune_scores_file_round_trip_and_errors(tmp_path):
    runs = [{"seed": 2, "dev": {"accuracy": 0.5, "macro_f1": 0.4}, "test": {"accuracy": 0.6, "macro_f1": 0.3},
             "train": {"wall_sec": 12.3}},
            {"seed": 1, "dev": {"accuracy": 0.7, "macro_f1": 0.6}, "test": {"accuracy": 0.8, "macro_f1": 0.5},
             "train": {"wall_sec": 45.6}}]
    write_scores(tmp_path, runs)
    assert "wall_sec" not in (tmp_path / "scores.json").read_text()  # no timings: byte-identical across reruns
    assert read_scores(tmp_path, [1, 2], ["accuracy"]) == [
        {"seed": 1, "dev": {"accuracy": 0.7}, "test": {"accuracy": 0.8}},
        {"seed": 2, "dev": {"accuracy": 0.5}, "test": {"accuracy": 0.6}}]
    with pytest.raises(SourceError, match=r"scores.json: no 3 .*seeds \[1, 3\].*rerun finetune"):
        read_scores(tmp_path, [1, 3], ["accuracy"])
    with pytest.raises(SourceError, match="no 'f1'"):
        read_scores(tmp_path, [1], ["f1"])
    with pytest.raises(SourceError, match="missing: stage finetune writes it"):
        read_scores(tmp_path / "absent", [1], ["accuracy"])


def _tiny_encoder():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return BertModel(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=16))


def _mean_pool(num_labels: int):
    from tasks.downstream.mean_pool import MeanPoolForSequenceClassification

    encoder = _tiny_encoder()
    encoder.config.num_labels = num_labels
    return MeanPoolForSequenceClassification(encoder.config, encoder)


def test_mean_pool_head_ignores_padding_and_averages_token_states():
    model = _mean_pool(3).eval()
    ids = torch.tensor([[2, 7, 9, 3, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask).logits
        short = model(input_ids=ids[:, :4], attention_mask=mask[:, :4]).logits
        states = model.encoder(input_ids=ids[:, :4], attention_mask=mask[:, :4]).last_hidden_state
    assert padded.shape == (1, 3)
    torch.testing.assert_close(padded, short)
    torch.testing.assert_close(short, model.classifier(states.mean(1)))


def test_mean_pool_head_losses():
    ids, mask = torch.tensor([[2, 7, 3], [2, 8, 3]]), torch.ones(2, 3, dtype=torch.long)
    clf = _mean_pool(2).eval()
    out = clf(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1]))
    torch.testing.assert_close(out.loss, torch.nn.functional.cross_entropy(out.logits, torch.tensor([0, 1])))
    reg = _mean_pool(1).eval()
    out = reg(input_ids=ids, attention_mask=mask, labels=torch.tensor([0.5, 2.0]))
    torch.testing.assert_close(out.loss, ((out.logits[:, 0] - torch.tensor([0.5, 2.0])) ** 2).mean())


def test_a_long_single_sentence_keeps_a_quarter_of_the_head_and_the_end(tokenizer):
    table = split_table("t", [("很好不错" * 5 + "差", 1), ("很好", 0)])  # 21 characters, and a short one
    enc = EncodedClassification.encode(table, tokenizer, 10)
    # budget 8: [CLS] 很好 (a quarter), the last 6 characters 错很好不错差, [SEP]
    assert enc.batch(np.array([0]))["input_ids"][0].tolist() == [2, 6, 5, 9, 6, 5, 8, 9, 7, 3]
    assert enc.batch(np.array([1]))["input_ids"][0].tolist() == [2, 6, 5, 3]  # short: as it is


def test_fit_scores_dev_each_epoch_and_keeps_its_best_weights():
    from tests.test_compression import Toy, classifier, train_args

    data, scores, states = Toy(), iter([0.5, 0.8, 0.6, 0.7]), []

    def dev_score(model):  # a dev curve that peaks at the second epoch; the weights there recorded
        states.append({k: v.clone() for k, v in model.state_dict().items()})
        return next(scores)

    model = classifier(1).train()
    summary = fit(model, data, **{**train_args(), "epochs": 4, "dev_score": dev_score})
    per_epoch = summary["steps"] // 4
    assert [p["step"] for p in summary["dev_curve"]] == [per_epoch * k for k in (1, 2, 3, 4)]
    assert [p["dev"] for p in summary["dev_curve"]] == [0.5, 0.8, 0.6, 0.7] and summary["best_step"] == 2 * per_epoch
    assert all(torch.equal(v, states[1][k]) for k, v in model.state_dict().items())
    assert "dev_curve" not in fit(classifier(1).train(), data, **train_args())  # no dev_score: as before
