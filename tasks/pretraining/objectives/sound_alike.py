"""Sound-alike replacement: a chosen Chinese character becomes another character of the vocabulary
with the same pinyin, tone aside (的 → 得, 在 → 再), never [MASK]: MacBERT's "MLM as correction"
(Cui et al. 2020, §3.2) with the confusion that dominates Chinese spelling errors, phonological
similarity (most Chinese spelling errors involve a phonologically similar character: Liu et al.
2010; spelling-correction PLMs such as PLOME, Liu et al. 2021, mask with confusion sets of this kind).

The candidates of a character are the vocabulary's single-character tokens sharing its toneless
reading (pypinyin's most frequent reading, ``Style.NORMAL``), the character itself excluded; a
character without one (not Chinese, or alone with its reading) gets a random token, counted in the
data's ``substitute_fallback`` (as Mac's words without a similar word). The decision unit is the
token, as BERT's. Held out, every chosen token becomes a sound-alike (the training corruption at
100%), so that copying the input is the trivial solution the gates rule out beside the top token
(:func:`tasks.pretraining.gates.mlm_gates`), as for Mac.
"""

from __future__ import annotations

import numpy as np

from tasks.core.params import Objective
from tasks.pretraining.masking import Substitution
from tasks.pretraining.objectives.base import Kind


def character_readings(vocab: dict[str, int]) -> list[tuple[int, str]]:
    """``(id, reading)`` of each single CJK character of a vocabulary (``vocab``: token -> id), in id order:
    its toneless pinyin, pypinyin's most frequent reading (``Style.NORMAL``); characters without one left out."""
    from pypinyin import Style, lazy_pinyin

    found = []
    for token, i in sorted(vocab.items(), key=lambda item: item[1]):
        if len(token) == 1 and "\u4e00" <= token <= "\u9fff":
            reading = lazy_pinyin(token, style=Style.NORMAL, errors="ignore")
            if reading:
                found.append((i, reading[0]))
    return found


def sound_alikes(vocab: dict[str, int], size: int) -> Substitution:
    """The sound-alike table of a vocabulary (``vocab``: token -> id, ids below ``size``).

    Returns:
        :class:`tasks.pretraining.masking.Substitution` ``sound``: each single CJK character's
        candidates, the other characters of its toneless pinyin in id order; none for other tokens."""
    readings: dict[str, list[int]] = {}
    for i, reading in character_readings(vocab):
        readings.setdefault(reading, []).append(i)
    candidates: list[list[int]] = [[] for _ in range(size)]
    for ids in readings.values():
        for i in ids:
            candidates[i] = [j for j in ids if j != i]
    offsets = np.zeros(size + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(c) for c in candidates])
    flat = np.fromiter((j for c in candidates for j in c), dtype=np.int32, count=int(offsets[-1]))
    return Substitution("sound", offsets, flat)


class SoundAlike(Kind):
    name = "sound_alike"

    def applies(self, spec: Objective) -> bool:
        return spec.replacement.sound > 0

    def substitution(self, tokenizer) -> Substitution:
        return sound_alikes(tokenizer.get_vocab(), len(tokenizer))

    def heldout(self, params, spec: Objective, tokenizer, split: str | None):
        from tasks.corpus.tokenize import random_token_ids
        from tasks.pretraining.heldout import heldout_text

        cfg = params.curves
        ids, offsets = heldout_text(cfg.heldout_task, tokenizer, params.pretraining_data.max_seq_length,
                                    cfg.heldout_sequences, split)
        return ids, offsets, {"substitution": (self.substitution(tokenizer), random_token_ids(tokenizer))}
