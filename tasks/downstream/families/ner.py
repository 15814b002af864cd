"""Family ``ner``: token classification with BIO (IOB2) tags (``id, tokens, tags``); entity-level F1, precision
and recall (seqeval, strict IOB2). Its classic baseline: a linear-chain CRF over character-window features
(:func:`tasks.downstream.classic.crf_tagger`)."""

from __future__ import annotations

import numpy as np
from transformers import AutoModelForTokenClassification

from tasks.downstream import classic
from tasks.downstream.conll import entity_counts, label_list, ner_sentences
from tasks.downstream.families.base import baseline_scores, dropout, label_names, require_counted
from tasks.downstream.finetune import predict
from tasks.downstream.ner import EncodedNer, decode as decode_tags, ner_metrics
from tasks.downstream.ner_mrc import bio_spans
from tasks.downstream.outcomes import F1, Reduction, f1_counts, in_order


def _entities(tags: list[str]) -> set:
    from seqeval.scheme import IOB2, Entities  # seqeval's own strict reading, as the scores

    return {(e.start, e.end, e.tag) for e in Entities([tags], IOB2, suffix=False).entities[0]}


def _spans(tokens: list[str], tags: list[str]) -> str:
    return "; ".join(f"{''.join(tokens[a:b])}/{kind}" for kind, a, b in bio_spans(tags)) or "(none)"


class Ner:
    name = "ner"
    percent = 100.0
    pipeline_tag = "token-classification"
    usage = """from transformers import pipeline

tag = pipeline("token-classification", model="{folder}", aggregation_strategy="simple")
tag("中国科学院位于北京。")  # [{{"entity_group": ..., "word": ..., "start": ..., "end": ...}}]"""
    counted = {"f1": F1, "precision": Reduction("ratio", 0, 1), "recall": Reduction("ratio", 0, 2)}

    def eval_texts(self, table):
        return ["".join(tokens) for tokens in table.column("tokens").to_pylist()]

    def split_stats(self, task, parts, stats):
        return {"entities": {s: entity_counts(ner_sentences(t)) for s, t in parts.items()}}

    def labels(self, tables):
        return label_list([s for t in tables.values() for s in ner_sentences(t)])

    def model(self, path, labels, training):
        return AutoModelForTokenClassification.from_pretrained(path, **label_names(labels), **dropout(training.dropout))

    def head(self, training):
        return AutoModelForTokenClassification

    def encode(self, table, tokenizer, training, labels):
        return EncodedNer.encode(ner_sentences(table), tokenizer, labels, training.max_seq_length)

    def evaluate(self, model, data, table, training, labels, metrics, device):
        logits = predict(model, data, batch_size=training.eval_batch_size, device=device)["logits"]
        return self.scored(table, decode_tags(logits, data, labels), metrics)

    def scored(self, table, pred, metrics):
        gold = table.column("tags").to_pylist()
        result = ner_metrics(gold, pred)
        rows = [{"id": i, "tokens": t, "gold": g, "prediction": p}
                for i, t, g, p in zip(table.column("id").to_pylist(), table.column("tokens").to_pylist(), gold, pred)]
        return {**{m: result[m] for m in metrics}, "per_type": result["per_type"]}, rows

    def counts(self, metric, table, predictions):
        require_counted(self, metric)
        in_order(table, predictions)
        gold = [_entities(row["gold"]) for row in predictions]
        pred = [_entities(row["prediction"]) for row in predictions]
        return f1_counts(np.array([len(g & p) for g, p in zip(gold, pred)]), np.array([len(p) for p in pred]),
                         np.array([len(g) for g in gold]))

    def wrong_predictions(self, predictions, test):
        rows = [["".join(r["tokens"])[:60], _spans(r["tokens"], r["gold"]), _spans(r["tokens"], r["prediction"])]
                for r in predictions if r["gold"] != r["prediction"]]
        return ["sentence", "gold entities", "predicted"], rows

    def baseline(self, tables, labels, metrics):
        gold = {s: t.column("tags").to_pylist() for s, t in tables.items()}
        fit = classic.crf_tagger({s: t.column("tokens").to_pylist() for s, t in tables.items()}, gold,
                                 lambda pred: ner_metrics(gold["dev"], pred)[metrics[0]])
        return baseline_scores(self, fit, tables, metrics)
