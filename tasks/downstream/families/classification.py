"""Family ``classification``: single sentences and sentence pairs (``id, text_a, text_b, label``); accuracy,
F1, macro F1 and MCC, or Pearson/Spearman for a float label (regression). Its classic baseline: TF-IDF
character n-grams + logistic regression, or overlap features for pairs (:mod:`tasks.downstream.classic`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from transformers import AutoModelForSequenceClassification

from tasks.core.errors import SourceError
from tasks.downstream import classic
from tasks.downstream.classification import EncodedClassification, score
from tasks.downstream.families.base import baseline_scores, dropout, label_names, require_counted
from tasks.downstream.mean_pool import MeanPoolForSequenceClassification
from tasks.downstream.finetune import predict
from tasks.downstream.outcomes import F1, MACRO_F1, MEAN, PEARSON, f1_counts, in_order, mean_counts, moment_counts
from tasks.downstream.records import table_labels


REGRESSION_SLACK = 1.0
"""A regression prediction off by more than this (label units) is listed among the wrong ones."""


class Classification:
    name = "classification"
    percent = 100.0
    pipeline_tag = "text-classification"
    # the mean-pooling head is this repository's (tasks/downstream/mean_pool.py), saved beside the weights
    usage = """from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

model = AutoModelForSequenceClassification.from_pretrained("{folder}", trust_remote_code=True)
classify = pipeline("text-classification", model=model, tokenizer=AutoTokenizer.from_pretrained("{folder}"))
classify("这家酒店的服务很好。")  # a sentence pair: classify({{"text": a, "text_pair": b}})"""
    counted = {"accuracy": MEAN, "f1": F1, "macro_f1": MACRO_F1, "pearson": PEARSON}

    def eval_texts(self, table):
        return [t for col in ("text_a", "text_b") for t in table.column(col).to_pylist() if t]

    def split_stats(self, task, parts, stats):
        if pa.types.is_floating(parts["train"].schema.field("label").type):
            return {}
        labels = {s: dict(sorted(zip(*np.unique(t.column("label").to_numpy(), return_counts=True))))
                  for s, t in parts.items()}
        labels = {s: {str(k): int(v) for k, v in d.items()} for s, d in labels.items()}
        few = [f"{s} {labels[s]}" for s in ("train", "dev", "test") if len(labels[s]) < 2]
        if few:
            dropped = stats.get("deduplication", {}).get("conflicting_texts_dropped")
            raise SourceError(f"task {task!r}: fewer than 2 classes (class: count) in split(s) {'; '.join(few)}"
                              + (f" after dropping {dropped} text(s) with conflicting labels" if dropped else ""))
        return {"labels": labels}

    def labels(self, tables):
        train = tables["train"]
        if pa.types.is_floating(train.schema.field("label").type):
            return None
        names = table_labels(train)
        if names:
            return names
        top = max(int(np.max(t.column("label").to_numpy())) for t in tables.values())
        return [str(i) for i in range(top + 1)]

    def model(self, path, labels, training):
        config = {"num_labels": 1} if labels is None else label_names(labels)
        load = (MeanPoolForSequenceClassification.from_encoder if training.pooling == "mean"
                else AutoModelForSequenceClassification.from_pretrained)
        return load(path, **config, **dropout(training.dropout))

    def head(self, training):
        return MeanPoolForSequenceClassification if training.pooling == "mean" else AutoModelForSequenceClassification

    def encode(self, table, tokenizer, training, labels):
        return EncodedClassification.encode(table, tokenizer, training.max_seq_length)

    def evaluate(self, model, data, table, training, labels, metrics, device):
        logits = np.concatenate(predict(model, data, batch_size=training.eval_batch_size, device=device)["logits"])
        return self.scored(table, logits[:, 0] if labels is None else logits.argmax(-1), metrics)

    def scored(self, table, pred, metrics):
        gold = table.column("label").to_numpy()
        rows = [{"id": i, "label": g.item(), "prediction": p.item()}
                for i, g, p in zip(table.column("id").to_pylist(), gold, pred)]
        return score(metrics, gold, pred), rows

    def counts(self, metric, table, predictions):
        require_counted(self, metric)
        in_order(table, predictions)
        gold = np.array([row["label"] for row in predictions])
        pred = np.array([row["prediction"] for row in predictions])
        if metric == "accuracy":
            return mean_counts((gold == pred).astype(np.float64))
        if metric == "pearson":  # regression
            return moment_counts(gold, pred)
        if metric == "f1":  # of class 1
            return f1_counts((pred == 1) & (gold == 1), pred == 1, gold == 1)
        classes = np.unique(gold)  # macro F1: [TP, predicted, gold] per class
        c = np.stack([np.stack([(pred == k) & (gold == k), pred == k, gold == k], -1) for k in classes], 1)
        return c.reshape(len(gold), -1).astype(np.float64)

    def wrong_predictions(self, predictions, test):
        # a class other than gold; a regression score off by more than 1 (a point of STS-B's 0-5), worst first
        wrong = [r for r in predictions if (abs(r["prediction"] - r["label"]) > REGRESSION_SLACK
                                            if isinstance(r["label"], float) else r["label"] != r["prediction"])]
        wrong.sort(key=lambda r: -abs(r["prediction"] - r["label"]) if isinstance(r["label"], float) else 0)
        rows = []
        for row in wrong:
            ex = test[row["id"]]
            text = ex["text_a"] + (f" ‖ {ex['text_b']}" if ex["text_b"] else "")
            shown = (lambda v: f"{v:.2f}") if isinstance(row["label"], float) else str
            rows.append([text[:80], shown(row["label"]), shown(row["prediction"])])
        return ["text", "gold", "predicted"], rows

    def baseline(self, tables, labels, metrics):
        gold = {s: t.column("label").to_numpy() for s, t in tables.items()}
        dev_score = lambda pred: score(metrics[:1], gold["dev"], pred)[metrics[0]]  # noqa: E731
        sides = {s: (t.column("text_a").to_pylist(), t.column("text_b").to_pylist()) for s, t in tables.items()}
        if any(b is not None for b in sides["train"][1]):
            fit = classic.pair_classifier(sides, gold, labels is None, dev_score)
        else:
            fit = classic.text_classifier({s: a for s, (a, _) in sides.items()}, gold, labels is None, dev_score)
        return baseline_scores(self, fit, tables, metrics)
