"""Text normalisation and sentence splitting, shared by every stage that reads text.

The pretraining corpus and the downstream datasets go through the same
:func:`normalise`, so a sentence of an evaluation split is recognised when it
also occurs in the corpus.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

# Full-width ASCII letters and digits (U+FF10-FF19, FF21-FF3A, FF41-FF5A) become
# half-width: the Chinese BERT vocab splits "１９９８" into rare ##-pieces but has
# "1998". Full-width *punctuation* is kept: it is how Chinese text is written.
_FULLWIDTH_ALNUM = {cp: cp - 0xFEE0 for r in ((0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A))
                    for cp in range(r[0], r[1] + 1)}
_FULLWIDTH_ALNUM[0x3000] = 0x20  # ideographic space
_WHITESPACE = re.compile(r"\s+")


def _is_control(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs") and ch not in "\t\n\r"


def normalise(text: str) -> str:
    """Canonical form of a text: no control/format characters, half-width ASCII
    letters and digits, whitespace runs collapsed to one space, stripped.

    >>> normalise("  １９９８年\\u200b\\tＡＢ  好 ")
    '1998年 AB 好'
    """
    text = text.translate(_FULLWIDTH_ALNUM)
    if any(_is_control(ch) for ch in text):
        text = "".join(ch for ch in text if not _is_control(ch))
    return _WHITESPACE.sub(" ", text).strip()


# A sentence ends at a run of 。！？!?；… and any closing quotes/brackets after it.
_SENTENCE_END = re.compile(r"[。！？!?；;…]+[”’」』）)\"']*")


def split_sentences(text: str) -> list[str]:
    """Split normalised text after sentence-final punctuation (。！？!?；; and …),
    keeping the punctuation and closing quotes with their sentence.

    >>> split_sentences("他说：“好。”然后走了！还有")
    ['他说：“好。”', '然后走了！', '还有']
    """
    out, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        piece = text[start:m.end()].strip()
        if piece:
            out.append(piece)
        start = m.end()
    tail = text[start:].strip()
    if tail:
        out.append(tail)
    return out


_ASCII_WORD_EDGE = re.compile(r"[A-Za-z0-9]")


def join_words(words: list[str]) -> str:
    """Join segmented words into running text; a space only between two ASCII alphanumerics.

    >>> join_words(["访问", "www", "网站", "Windows", "98"])
    '访问www网站Windows 98'
    """
    out: list[str] = []
    for w in words:
        if out and _ASCII_WORD_EDGE.match(w[:1]) and _ASCII_WORD_EDGE.match(out[-1][-1:]):
            out.append(" ")
        out.append(w)
    return "".join(out)


def text_hash(text: str) -> int:
    """64-bit BLAKE2b digest of ``text``'s UTF-8 bytes, as an int: the key of exact
    deduplication across shards (a set of these, not of the texts, is what grows with the
    corpus). Unlike ``hash()``, it is the same in every process and on every machine. Two
    distinct texts collide with probability 2^-64; among n texts, some pair does with
    about n^2 / 2^65 (1e-7 for 2 million documents, about 1e9 characters)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
