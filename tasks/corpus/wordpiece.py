"""Deterministic WordPiece vocabulary training.

The algorithm is the one Hugging Face ``tokenizers`` uses for its
``WordPieceTrainer``: BPE merges over pre-tokenized words, continuation symbols
prefixed with ``##``, the most frequent adjacent pair merged first (Sennrich et
al. 2016, §3.1; Wu et al. 2016, §4.1 for WordPiece). Text is normalised and
pre-tokenized by the library's own ``BertNormalizer`` and ``BertPreTokenizer``
(so every CJK character is its own word, as in Chinese BERT).

It is reimplemented because the library's trainer is not reproducible: it
assigns ids, and so breaks ties between equally frequent pairs, in hash-map
order, and ``limit_alphabet`` drops tied characters at random. Four trainings
on the same 5,000 sentences gave four different vocabularies. Here ties are
broken by the pair's text, so the same corpus always gives the same vocabulary.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from typing import Iterable

from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

PREFIX = "##"


def word_counts(texts: Iterable[str], lowercase: bool = True, strip_accents: bool | None = None) -> Counter:
    """Frequencies of the pre-tokenized words of ``texts`` (BERT normaliser and pre-tokenizer;
    ``strip_accents=None`` strips combining marks whenever ``lowercase``, as BERT does)."""
    normalizer = BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=strip_accents,
                                lowercase=lowercase)
    pre = BertPreTokenizer()
    counts: Counter = Counter()
    for text in texts:
        counts.update(w for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(text)))
    return counts


def _join(a: str, b: str) -> str:
    return a + b[len(PREFIX):]


def train_wordpiece(counts: Counter, vocab_size: int, min_frequency: int = 2,
                    special_tokens: Iterable[str] = ()) -> list[str]:
    """A WordPiece vocabulary: special tokens, every symbol of the alphabet, then merges.

    Args:
        counts: word frequencies (:func:`word_counts`).
        vocab_size: target size; the alphabet is always kept whole, so the result
            can be larger when the alphabet alone exceeds it.
        min_frequency: a pair seen fewer times is never merged.
    Returns:
        Tokens in id order: specials, the alphabet sorted, merged tokens in merge order.
    """
    specials = list(special_tokens)
    words = [[w[0]] + [PREFIX + c for c in w[1:]] for w in sorted(counts)]
    freq = [counts[w] for w in sorted(counts)]
    vocab = specials + sorted({s for w in words for s in w} - set(specials))
    seen = set(vocab)

    pair_count: Counter = Counter()
    where: dict[tuple[str, str], set[int]] = defaultdict(set)
    for i, w in enumerate(words):
        for pair in zip(w, w[1:]):
            pair_count[pair] += freq[i]
            where[pair].add(i)
    heap = [(-n, pair) for pair, n in pair_count.items()]
    heapq.heapify(heap)

    while len(vocab) < vocab_size and heap:
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg:
            continue  # stale entry: the count changed since it was pushed
        if -neg < min_frequency:
            break
        merged = _join(*pair)
        if merged not in seen:
            vocab.append(merged)
            seen.add(merged)
        changed: Counter = Counter()
        for i in sorted(where.pop(pair, ())):
            w, n = words[i], freq[i]
            for p in zip(w, w[1:]):
                changed[p] -= n
            out, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and (w[k], w[k + 1]) == pair:
                    out.append(merged)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            words[i] = out
            for p in zip(out, out[1:]):
                changed[p] += n
                where[p].add(i)
        for p, delta in changed.items():
            if delta:
                pair_count[p] += delta
                if pair_count[p] > 0:
                    heapq.heappush(heap, (-pair_count[p], p))
                else:
                    del pair_count[p]
        pair_count.pop(pair, None)
    return vocab
