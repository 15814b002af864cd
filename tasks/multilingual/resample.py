"""CINO-style language resampling: p_i ∝ n_i^α / l_i^β.

For language i with n_i documents of mean length l_i tokens (c_i = n_i·l_i
tokens), a document is drawn from language i with probability

    p_i = (n_i^α / l_i^β) / Σ_k (n_k^α / l_k^β).

- β = 0 is the sample-level multinomial of XLM (Lample & Conneau 2019, §3.1,
  α = 0.5) and XLM-R (Conneau et al. 2020, §3.1, α = 0.3): q_i ∝ n_i^α. α = 1
  keeps the natural proportions; α < 1 up-samples the small languages.
- A document of language i brings l_i tokens on average, so the expected token
  share is c̃_i ∝ p_i·l_i ∝ n_i^α·l_i^(1-β). With β = 1 − α it is
  c̃_i ∝ (n_i·l_i)^α = c_i^α: the same exponent applied to token counts, i.e.
  sampling at token granularity, which stops languages of long documents from
  taking more than their share (the derivation of the CINO tutorial; CINO,
  Yang et al. 2022, samples with α = 0.7 as InfoXLM, Chi et al. 2021, §4.1, does).

The resampled corpus is *stratified*, not i.i.d.: language i contributes exactly
m_i = round(M·p_i) documents (largest-remainder rounding; M is the number of
documents that makes the expected size ``total_tokens``), so the document shares
equal p_i up to rounding and two seeds differ only in which documents are chosen.
Within a language, m_i ≤ n_i documents are drawn without replacement; when
m_i > n_i every document is repeated ⌊m_i/n_i⌋ times and m_i mod n_i distinct
ones once more, so repetition is as even as it can be (no document appears more
than once above any other). The drawn documents are then shuffled together.

Out-of-core: :func:`train_lengths` streams the train documents keeping 12 bytes per document
(a language code and a token count), and :func:`write_drawn` reads only the drawn documents
back, so memory grows with ``total_tokens`` (the output), not with the corpus.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tasks.core.io import ParquetStream, stream_parquet
from tasks.core.rng import named_rng
from tasks.core.stage import stage_task

MIXTURE_SCHEMA = pa.schema([("doc_id", pa.string()), ("lang", pa.string()), ("copy", pa.int32()),
                            ("text", pa.string())])


def sampling_probabilities(documents: np.ndarray, mean_lengths: np.ndarray, alpha: float,
                           beta: float) -> np.ndarray:
    """``p_i = (n_i^α / l_i^β) / Σ_k (n_k^α / l_k^β)``.

    Args:
        documents: ``[K]`` n_i, documents per language (> 0).
        mean_lengths: ``[K]`` l_i, mean document length in tokens (> 0).
        alpha, beta: the exponents, in [0, 1].
    Returns:
        ``float64 [K]`` summing to 1.
    Raises:
        ValueError: a count or length is not positive.
    """
    n = np.asarray(documents, dtype=np.float64)
    length = np.asarray(mean_lengths, dtype=np.float64)
    if n.size == 0 or (n <= 0).any() or (length <= 0).any():
        raise ValueError("every language needs at least one document of positive length")
    # in log space: n_i^α for n_i ~ 1e7 and α = 1 is fine, but keep it robust for any corpus size
    log_q = alpha * np.log(n) - beta * np.log(length)
    q = np.exp(log_q - log_q.max())
    return q / q.sum()


def largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (Hamilton's method; ties by index)."""
    exact = np.asarray(weights, dtype=np.float64) / np.sum(weights) * total
    out = np.floor(exact).astype(np.int64)
    short = total - int(out.sum())
    out[np.argsort(-(exact - out), kind="stable")[:short]] += 1
    return out


def documents_to_draw(p: np.ndarray, mean_lengths: np.ndarray, total_tokens: int) -> np.ndarray:
    """``int64 [K]`` m_i: documents per language for an expected ``total_tokens`` tokens.

    M = total_tokens / Σ_i p_i·l_i documents in all (at least one), split by p.
    """
    total_documents = max(1, round(total_tokens / float(np.dot(p, mean_lengths))))
    return largest_remainder(p, total_documents)


def draw(n: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """``int64 [m]`` indices into ``n`` documents: each ⌊m/n⌋ times, plus ``m mod n`` distinct
    ones (seeded) once more; sorted."""
    full, rest = divmod(m, n)
    picked = np.concatenate([np.tile(np.arange(n), full), rng.permutation(n)[:rest]])
    return np.sort(picked)


@stage_task
def resample(langs: Sequence[str], lengths: np.ndarray, alpha: float, beta: float, total_tokens: int,
             seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, dict]]:
    """Resample documents of several languages to about ``total_tokens`` tokens.

    Args:
        langs: ``[N]`` language of each document (a list or an object array).
        lengths: ``[N]`` length of each document in tokens.
        alpha, beta: sampling exponents (module docstring).
        total_tokens: requested size of the resampled corpus.
        seed: draws are seeded by ``(seed, language)``, the final shuffle by ``seed``.
    Returns:
        ``(rows, copies, stats)``: ``rows int64 [M]`` indices of the drawn documents in
        training order; ``copies int64 [M]`` how many times that document was drawn
        before (0 = first occurrence); ``stats`` per language, in order of first
        appearance: documents, tokens, mean_length, probability, expected_token_share,
        drawn_documents, drawn_tokens, document and token shares before and after,
        repeat_factor (m_i/n_i) and max_copies.
    Raises:
        ValueError: ``langs`` and ``lengths`` differ in size, or a language has only empty documents.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if len(langs) != len(lengths):
        raise ValueError(f"{len(langs)} languages for {len(lengths)} lengths")
    names, inverse = np.unique(np.asarray(langs, dtype=object), return_inverse=True)
    first = np.array([np.flatnonzero(inverse == k)[0] for k in range(len(names))])
    order = np.argsort(first)  # languages in order of first appearance
    members = [np.flatnonzero(inverse == k) for k in order]
    n = np.array([len(m) for m in members])
    c = np.array([lengths[m].sum() for m in members])
    mean = c / n
    p = sampling_probabilities(n, mean, alpha, beta)
    m = documents_to_draw(p, mean, total_tokens)

    rows, stats = [], {}
    for k, (lang, idx) in enumerate(zip(names[order], members)):
        picked = idx[draw(len(idx), int(m[k]), named_rng(seed, str(lang)))]
        rows.append(picked)
        stats[str(lang)] = {"documents": int(n[k]), "tokens": int(c[k]), "mean_length": float(mean[k]),
                            "probability": float(p[k]), "drawn_documents": int(m[k]),
                            "drawn_tokens": int(lengths[picked].sum()),
                            "repeat_factor": float(m[k] / n[k]),
                            "max_copies": int(-(-m[k] // n[k])) if m[k] else 0}
    expected = p * mean / np.dot(p, mean)
    drawn_docs, drawn_tokens = max(1, int(m.sum())), max(1, sum(s["drawn_tokens"] for s in stats.values()))
    for k, s in enumerate(stats.values()):
        s.update(expected_token_share=float(expected[k]),
                 document_share_before=float(n[k] / n.sum()), token_share_before=float(c[k] / c.sum()),
                 document_share_after=s["drawn_documents"] / drawn_docs,
                 token_share_after=s["drawn_tokens"] / drawn_tokens)

    rows = np.concatenate(rows)
    rows = rows[np.random.default_rng(seed).permutation(len(rows))]
    copies = np.zeros(len(rows), dtype=np.int64)
    seen: dict[int, int] = {}
    for i, r in enumerate(rows.tolist()):
        copies[i] = seen.get(r, 0)
        seen[r] = copies[i] + 1
    return rows, copies, stats


TOKENIZE_DOCUMENTS = 500  # documents per tokenizer call when counting lengths (memory, never the result)


def _train_batches(path: Path, batch_rows: int, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """``columns`` of the train-split rows of the multilingual documents, in file order,
    from ``batch_rows`` rows at a time."""
    for batch in stream_parquet(path).iter_batches(batch_size=batch_rows, columns=[*columns, "split"]):
        yield batch.filter(pc.equal(batch.column("split"), "train")).select(columns)


def train_lengths(path: Path, tokenizer, batch_rows: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Language and token count of every train document of ``path`` (the multilingual
    documents), tokenizing ``batch_rows`` documents at a time (no special tokens added; a
    literal ``[MASK]`` in a text is word-pieced, as everywhere in the pipeline).

    Returns:
        ``(names, codes, lengths)``: the languages in order of first appearance; ``codes
        int32 [N]`` index into ``names`` and ``lengths int64 [N]`` tokens, per train document
        in file order: 12 bytes per document (then :func:`resample` works on a few ``[N]``
        arrays of 8 bytes), all that grows with the corpus.
    """
    index: dict[str, int] = {}
    codes, lengths = [], []
    # a fast tokenizer's Encodings (tokens, offsets, masks) cost far more than the text: a whole
    # row group of long documents per call made the peak 2.5x higher at 16x the corpus
    for batch in _train_batches(path, min(batch_rows, TOKENIZE_DOCUMENTS), ["lang", "text"]):
        if not batch.num_rows:
            continue
        ids = tokenizer(batch.column("text").to_pylist(), add_special_tokens=False, split_special_tokens=True,
                        return_attention_mask=False)["input_ids"]
        lengths.append(np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids)))
        codes.append(np.array([index.setdefault(lang, len(index)) for lang in batch.column("lang").to_pylist()],
                              dtype=np.int32))
    if not lengths:
        return [], np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64)
    return list(index), np.concatenate(codes), np.concatenate(lengths)


def write_drawn(path: Path, rows: np.ndarray, copies: np.ndarray, output: Path, batch_rows: int) -> None:
    """Write the drawn train documents of ``path`` in training order to ``output``
    (:data:`MIXTURE_SCHEMA`, row groups of ``batch_rows`` rows; a temporary: wrap in
    ``atomic_outputs``). A second streaming pass over ``path`` keeps only the distinct drawn
    documents, so memory is bounded by the output, not by the corpus.

    Args:
        rows: ``int64 [M]`` indices into the train documents (file order), in training order.
        copies: ``int64 [M]`` the ``copy`` column (:func:`resample`).
    """
    needed = np.unique(rows)
    chosen, start = [], 0
    for batch in _train_batches(path, batch_rows, ["doc_id", "lang", "text"]):
        lo, hi = np.searchsorted(needed, [start, start + batch.num_rows])
        chosen.append(batch.take(pa.array(needed[lo:hi] - start)))
        start += batch.num_rows
    chosen = pa.Table.from_batches(chosen)
    at = np.searchsorted(needed, rows)  # row i of the output is row at[i] of chosen
    with ParquetStream(output, MIXTURE_SCHEMA, batch_rows) as out:
        for i in range(0, len(rows), batch_rows):
            part = chosen.take(at[i:i + batch_rows])
            out.write(pa.table({"doc_id": part.column("doc_id"), "lang": part.column("lang"),
                                "copy": pa.array(copies[i:i + batch_rows], pa.int32()),
                                "text": part.column("text")}, schema=MIXTURE_SCHEMA))
