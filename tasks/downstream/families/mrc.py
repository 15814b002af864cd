"""Family ``mrc``: CMRC 2018-style span extraction (``id, question, context, answers``) over sliding windows;
the official CMRC 2018 EM and F1, in percent. Its classic baseline: the NER CRF's most probable entity of
the asked type (:func:`tasks.downstream.classic.crf_reader`)."""

from __future__ import annotations

import numpy as np
from transformers import AutoModelForQuestionAnswering

from tasks.downstream import classic, cmrc_metric
from tasks.downstream.families.base import baseline_scores, dropout, require_counted
from tasks.downstream.finetune import predict
from tasks.downstream.mrc import MrcFeatures
from tasks.downstream.mrc_decode import decode as decode_spans
from tasks.downstream.outcomes import MEAN, mean_counts
from tasks.downstream.squad import gold_texts, mrc_examples


class Mrc:
    name = "mrc"
    percent = 1.0
    pipeline_tag = "question-answering"
    # transformers 5 has no question-answering pipeline: the n-best search of tasks.downstream.mrc_decode, for a
    # context that fits one window (the stage slides windows over a longer one)
    usage = """import torch
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

model = AutoModelForQuestionAnswering.from_pretrained("{folder}").eval()
tokenizer = AutoTokenizer.from_pretrained("{folder}")


def answer(question, context, n_best={n_best}, max_answer_length={max_answer_length}):
    enc = tokenizer(question, context, truncation="only_second", max_length={max_seq_length},
                    return_offsets_mapping=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0]
    in_context = torch.tensor([i for i, s in enumerate(enc.sequence_ids(0)) if s == 1])
    with torch.no_grad():
        out = model(**enc)
    start, end = out.start_logits[0], out.end_logits[0]
    k = min(n_best, len(in_context))
    starts = in_context[start[in_context].topk(k).indices].sort().values
    ends = in_context[end[in_context].topk(k).indices].sort().values
    score = start[starts][:, None] + end[ends][None, :]  # span (s, e): s <= e, at most max_answer_length tokens
    width = ends[None, :] - starts[:, None]
    i, j = divmod(int(score.masked_fill((width < 0) | (width >= max_answer_length), -torch.inf).argmax()), k)
    return context[offsets[starts[i]][0]:offsets[ends[j]][1]]


print(answer("哪里有科学院？", "中国科学院位于北京。"))"""
    counted = {"em": MEAN, "f1": MEAN, "average": MEAN}

    def eval_texts(self, table):
        return table.column("context").to_pylist() + table.column("question").to_pylist()

    def split_stats(self, task, parts, stats):
        return {}

    def labels(self, tables):
        return None

    def model(self, path, labels, training):
        return AutoModelForQuestionAnswering.from_pretrained(path, **dropout(training.dropout))

    def head(self, training):
        return AutoModelForQuestionAnswering

    def encode(self, table, tokenizer, training, labels):
        return MrcFeatures.encode(mrc_examples(table), tokenizer, training.max_seq_length, training.doc_stride,
                                  training.max_query_length)

    def evaluate(self, model, data, table, training, labels, metrics, device):
        out = predict(model, data, batch_size=training.eval_batch_size, device=device,
                      outputs=("start_logits", "end_logits"))
        answers = decode_spans(out["start_logits"], out["end_logits"], data, mrc_examples(table),
                               n_best=training.n_best, max_answer_length=training.max_answer_length)
        return self.scored(table, answers, metrics)

    def scored(self, table, answers, metrics):
        result = cmrc_metric.evaluate(gold_texts(mrc_examples(table)), answers)
        return {m: result[m] for m in metrics}, answers

    def counts(self, metric, table, predictions):
        require_counted(self, metric)
        gold = gold_texts(mrc_examples(table))  # as scored() reads it; a question with no prediction scores 0
        def per_question(score):
            return np.array([score(answers, predictions[i]) if i in predictions else 0.0 for i, answers in gold.items()])
        em = per_question(cmrc_metric.exact_match) if metric != "f1" else 0.0
        f1 = per_question(cmrc_metric.f1_score) if metric != "em" else 0.0
        return mean_counts(100 * {"em": em, "f1": f1, "average": (em + f1) / 2}[metric])

    def wrong_predictions(self, predictions, test):
        rows = []
        for qid, pred in predictions.items():
            gold = [a["text"] for a in test[qid]["answers"]]
            if pred not in gold:
                rows.append([test[qid]["question"][:16] + "…", test[qid]["context"][:60], " / ".join(gold),
                             pred or "(empty)"])
        return ["question", "context", "gold", "predicted"], rows

    def baseline(self, tables, labels, metrics):
        dev = gold_texts(mrc_examples(tables["dev"]))
        fit = classic.crf_reader({s: mrc_examples(t) for s, t in tables.items()},
                                 lambda answers: cmrc_metric.evaluate(dev, answers)[metrics[0]])
        return baseline_scores(self, fit, tables, metrics)
