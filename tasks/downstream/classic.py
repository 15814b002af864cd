"""Classic baselines: what a task's fine-tunes must beat on the same training data, before any
comparison of pretraining procedures means anything.

Each is a well-kept library's model on hand-made features, its regularisation chosen on dev by the
task's headline metric (:func:`choose`), then scored once on test:

* single sentences: TF-IDF of character 1-3-grams + logistic regression (scikit-learn); the
  standard strong baseline of Chinese text classification (e.g. Joulin et al. 2017's n-gram
  baselines; Zhang et al. 2015, "Character-level convolutional networks", Table 4 "n-grams TFIDF");
* sentence pairs: overlap features (character and bigram Jaccard, edit distance, longest common
  substring, lengths, TF-IDF cosine) and the TF-IDF vectors' ``|a − b|`` and ``a ⊙ b`` + logistic
  regression, the feature-engineered matchers LCQMC was introduced against (Liu et al. 2018, §4);
* NER: a linear-chain CRF (CRFsuite, L-BFGS with L1 + L2 penalties; Lafferty et al. 2001) on
  character-window features, as in the SIGHAN 2006 bakeoff systems (Levow 2006);
* span-extraction MRC on a closed question set (NER as MRC): the same CRF tagging the context with
  the question's answers, its features also conjoined with the question, answering with its most
  probable span (:func:`crf_reader`).

Each returns its test predictions in the form the family's fine-tunes give them, so the same metric
code and per-example outcomes (:mod:`tasks.downstream.outcomes`) score both.
"""

from __future__ import annotations

import difflib
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import pycrfsuite
import scipy.sparse as sp
from nltk.metrics.distance import edit_distance
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.preprocessing import StandardScaler

C_GRID = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)
"""Inverse L2 strengths of the logistic regressions (scikit-learn's ``C``), searched on dev."""
CRF_GRID = ({"c1": 0.05, "c2": 0.01}, {"c1": 0.1, "c2": 0.1}, {"c1": 0.0, "c2": 1.0})
"""CRFsuite's L1 (``c1``) and L2 (``c2``) penalties, searched on dev."""
CRF_ITERATIONS = 200  # L-BFGS iterations: the dev score is flat from about 100 on these sizes


@dataclass
class Classic:
    """A classic baseline's result on one task.

    Attributes:
        method: what was fitted, in words.
        setting: the hyper-parameters chosen on dev.
        search: every setting tried, with its dev headline score (``{"setting", "dev"}``).
        dev, test: predictions on each split at the chosen setting, in the family's form (rows, or
            ``{id: answer}`` for MRC).
        train_sec: wall seconds of the whole search and the final predictions.
        details: counts that describe the fit (``features``: its feature dimension).
    """

    method: str
    setting: dict
    search: list[dict]
    dev: Any
    test: Any
    train_sec: float = 0.0
    details: dict = field(default_factory=dict)


def choose(settings: Sequence[dict], fit: Callable[[dict], Callable[[str], Any]],
           dev_score: Callable[[Any], float]) -> tuple[dict, Callable[[str], Any], list[dict]]:
    """Fit each setting, keep the first with the best ``dev_score`` of its dev predictions.

    Args:
        fit: ``setting -> predict``, where ``predict(split)`` gives that split's predictions.
    Returns:
        ``(setting, predict, search)``, ``search`` every setting with its dev score.
    """
    best, search = None, []
    for setting in settings:
        predict = fit(setting)
        score = float(dev_score(predict("dev")))
        search.append({"setting": dict(setting), "dev": score})
        if best is None or score > best[0]:
            best = (score, setting, predict)
    return best[1], best[2], search


# --------------------------------------------------------------------------- classification


def _char_tfidf() -> TfidfVectorizer:
    # characters, not words: no segmenter between the baseline and the text; sublinear tf as is usual
    return TfidfVectorizer(analyzer="char", ngram_range=(1, 3), min_df=1, sublinear_tf=True, dtype=np.float64)


def _estimator(regression: bool, c: float):
    if regression:
        return Ridge(alpha=1.0 / c)
    return LogisticRegression(C=c, max_iter=2000, solver="lbfgs")


def text_classifier(texts: dict[str, list[str]], labels: dict[str, np.ndarray], regression: bool,
                    dev_score: Callable[[np.ndarray], float]) -> Classic:
    """TF-IDF character 1-3-grams + logistic regression (ridge regression for a real-valued label).

    Args:
        texts: split -> texts (``train``, ``dev``, ``test``).
        labels: split -> gold labels ``[N]`` (class indices, or scores).
        dev_score: the headline metric of dev predictions ``[N]``.
    Returns:
        predictions per split as arrays ``[N]`` (:class:`Classic`).
    """
    t0 = time.perf_counter()
    vectorizer = _char_tfidf().fit(texts["train"])
    x = {s: vectorizer.transform(t) for s, t in texts.items()}
    return _linear("TF-IDF char 1-3-grams", x, labels, regression, dev_score, t0)


def _linear(features: str, x: dict, labels: dict[str, np.ndarray], regression: bool,
            dev_score: Callable[[np.ndarray], float], t0: float) -> Classic:
    """Logistic (or ridge) regression on ``x`` (split -> ``[N, F]`` matrix), its ``C`` chosen on dev;
    ``t0``: when the baseline's work began (``time.perf_counter``)."""
    def fit(setting):
        model = _estimator(regression, setting["C"]).fit(x["train"], labels["train"])
        return lambda split: model.predict(x[split])

    setting, predict, search = choose([{"C": c} for c in C_GRID], fit, dev_score)
    return Classic(f"{features} + {'ridge' if regression else 'logistic regression'}", setting, search,
                   predict("dev"), predict("test"), round(time.perf_counter() - t0, 2), {"features": x["train"].shape[1]})


def _bigrams(text: str) -> set[str]:
    return {text[i:i + 2] for i in range(len(text) - 1)}


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def overlap_features(a: str, b: str) -> list[float]:
    """Eight lexical overlap features of a pair: character and bigram Jaccard, edit distance
    (characters) over the longer length, longest common substring and difflib's matching ratio,
    both lengths and their absolute difference (characters)."""
    longest = max(len(a), len(b), 1)
    match = difflib.SequenceMatcher(None, a, b, autojunk=False)
    lcs = match.find_longest_match(0, len(a), 0, len(b)).size
    return [_jaccard(set(a), set(b)), _jaccard(_bigrams(a), _bigrams(b)), edit_distance(a, b) / longest,
            lcs / longest, match.ratio(), float(len(a)), float(len(b)), float(abs(len(a) - len(b)))]


def pair_classifier(pairs: dict[str, tuple[list[str], list[str]]], labels: dict[str, np.ndarray], regression: bool,
                    dev_score: Callable[[np.ndarray], float]) -> Classic:
    """Overlap features, TF-IDF cosine, and the TF-IDF vectors' ``|a − b|`` and ``a ⊙ b``, + logistic
    regression (ridge for a real-valued label); the TF-IDF of character 1-3-grams is fitted on both
    sides of train. Arguments as :func:`text_classifier`, with ``(text_a, text_b)`` lists per split."""
    t0 = time.perf_counter()
    vectorizer = _char_tfidf().fit(pairs["train"][0] + pairs["train"][1])
    scaler, x = StandardScaler(), {}
    for split in ("train", "dev", "test"):
        a, b = (vectorizer.transform(side) for side in pairs[split])
        cosine = np.asarray(a.multiply(b).sum(axis=1))  # rows are L2-normalised: the dot is the cosine
        dense = np.hstack([np.array([overlap_features(p, q) for p, q in zip(*pairs[split])]), cosine])
        dense = scaler.fit_transform(dense) if split == "train" else scaler.transform(dense)
        x[split] = sp.hstack([sp.csr_matrix(dense), abs(a - b), a.multiply(b)]).tocsr()
    return _linear("overlap features + TF-IDF |a-b|, a*b", x, labels, regression, dev_score, t0)


# --------------------------------------------------------------------------- CRF


def _kind(char: str) -> str:
    if char.isdigit():
        return "digit"
    if char.isascii() and char.isalpha():
        return "latin"
    return "punct" if unicodedata.category(char).startswith("P") else "other"


def char_features(chars: Sequence[str], prefix: str = "") -> list[list[str]]:
    """CRFsuite features of each character: the characters in a window of ±2, the bigrams around it,
    its kind (digit, latin, punctuation) and the sequence's ends; ``prefix`` conjoins every
    feature with a condition (the question, :func:`crf_reader`)."""
    padded = ["<s>", "<s>", *chars, "</s>", "</s>"]
    out = []
    for i in range(len(chars)):
        w = padded[i:i + 5]
        f = [f"c-2={w[0]}", f"c-1={w[1]}", f"c0={w[2]}", f"c1={w[3]}", f"c2={w[4]}", f"c-1c0={w[1]}{w[2]}",
             f"c0c1={w[2]}{w[3]}", f"c-1c1={w[1]}{w[3]}", f"k={_kind(w[2][:1] or ' ')}", "bias"]
        out.append([prefix + x for x in f])
    return out


def _train_crf(xs: list[list[list[str]]], ys: list[list[str]], setting: dict):
    trainer = pycrfsuite.Trainer(verbose=False)
    for x, y in zip(xs, ys):
        trainer.append(x, y)
    trainer.set_params({**setting, "max_iterations": CRF_ITERATIONS, "feature.possible_transitions": True})
    # CRFsuite writes its model to a file and reads it back: a temporary one, removed at once
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / "crf.model"
        trainer.train(str(model))
        return _Tagger(model.read_bytes())


class _Tagger(pycrfsuite.Tagger):
    """A CRFsuite tagger over a model in memory, holding the buffer it reads (CRFsuite does not copy it)."""

    def __init__(self, model: bytes):
        self.model = model
        self.open_inmemory(model)


def crf_tagger(tokens: dict[str, list[list[str]]], tags: dict[str, list[list[str]]],
               dev_score: Callable[[list[list[str]]], float]) -> Classic:
    """A linear-chain CRF on :func:`char_features` (one token a character, as MSRA's), its
    penalties chosen on dev from :data:`CRF_GRID`.

    Args:
        tokens, tags: split -> sentences (tokens and their BIO tags).
        dev_score: the headline metric of dev tag sequences.
    Returns:
        predicted BIO tag sequences per split (:class:`Classic`).
    """
    t0 = time.perf_counter()
    x = {s: [char_features(t) for t in sentences] for s, sentences in tokens.items()}

    def fit(setting):
        tagger = _train_crf(x["train"], tags["train"], setting)
        return lambda split: [tagger.tag(seq) for seq in x[split]]

    setting, predict, search = choose(CRF_GRID, fit, dev_score)
    return Classic("linear-chain CRF, character-window features (CRFsuite)", setting, search, predict("dev"),
                   predict("test"), round(time.perf_counter() - t0, 2))


def _spans(tags: Sequence[str], label: str) -> list[tuple[int, int]]:
    """``[start, end)`` of each ``label`` span of a BIO path (``B-<label>``, then ``I-<label>``)."""
    spans, start = [], None
    for i, tag in enumerate([*tags, "O"]):
        if start is not None and tag != f"I-{label}":
            spans.append((start, i))
            start = None
        if tag == f"B-{label}" or (tag == f"I-{label}" and start is None):
            start = i
    return spans


def best_span(tagger, n: int, label: str) -> tuple[int, int]:
    """The most probable ``label`` span of a sequence of ``n`` characters already ``set`` on ``tagger``:
    of the Viterbi path's ``label`` spans, the one whose tags have the highest mean marginal; with none
    (every question has an answer), the span from the most probable ``B-<label>`` through the characters
    after it whose ``I-<label>`` is more probable than ``O``."""
    spans = _spans(tagger.tag(), label)
    if spans:
        def confidence(span):
            s, e = span
            return np.mean([tagger.marginal(f"B-{label}" if i == s else f"I-{label}", i) for i in range(s, e)])
        return max(spans, key=confidence)
    start = max(range(n), key=lambda i: tagger.marginal(f"B-{label}", i))
    end = start + 1
    while end < n and tagger.marginal(f"I-{label}", end) > tagger.marginal("O", end):
        end += 1
    return start, end


def crf_reader(examples: dict[str, list], dev_score: Callable[[dict], float]) -> Classic:
    """Span extraction by a CRF: each (question, context) example is the context's characters tagged
    ``B-A``/``I-A``/``O`` with the question's gold answers, every character feature both plain and conjoined
    with the question; a question is answered with the most probable span (:func:`best_span`). On a
    closed question set, as NER as MRC's one question per entity type (Li et al. 2020), this is a tagger
    per question (the CRF's entity of the asked type) sharing what the plain features learn; an unseen
    question has only the plain ones.

    Trained on the questions alone, as the fine-tunes are. (Tagging each context once with every
    question's answers, one label per question, scored 8 points lower on MSRA's dev: contexts whose type
    has two entities ask no question of it, so such a tagger learns them as ``O``.)

    Args:
        examples: split -> :class:`tasks.downstream.squad.MrcExample` records.
        dev_score: the headline metric of dev answers ``{id: text}``.
    Returns:
        answers ``{id: text}`` per split (:class:`Classic`).
    """
    t0 = time.perf_counter()
    questions = {q: f"q{i}|" for i, q in enumerate(sorted({e.question for e in examples["train"]}))}

    def features(e):
        chars = list(e.context)
        return [p + c for p, c in zip(char_features(chars), char_features(chars, questions.get(e.question, "q?|")))]

    def tags(e):
        y = ["O"] * len(e.context)
        for text, start in e.answers:
            if start is not None and 0 <= start < len(y):
                for i in range(start, min(start + len(text), len(y))):
                    y[i] = "B-A" if i == start else "I-A"
        return y

    x = {s: [features(e) for e in split] for s, split in examples.items()}

    def fit(setting):
        tagger = _train_crf(x["train"], [tags(e) for e in examples["train"]], setting)

        def predict(split):
            answers = {}
            for e, seq in zip(examples[split], x[split]):
                tagger.set(seq)
                s, t = best_span(tagger, len(seq), "A") if seq else (0, 0)
                answers[e.id] = e.context[s:t]
            return answers
        return predict

    setting, predict, search = choose(CRF_GRID, fit, dev_score)
    return Classic("linear-chain CRF tagging the question's answers, features plain and conjoined with the question "
                   "(CRFsuite)", setting, search, predict("dev"), predict("test"), round(time.perf_counter() - t0, 2),
                   {"questions": len(questions)})
