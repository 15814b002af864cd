"""Throughput of the data-generation hot path: segmentation and every masking objective,
as the pipeline does it (``tasks/``) and the naive way, on the same real input, as a ratio.

* segment: jieba precise mode over the corpus sentences; the ``segment`` stage's path
  (:func:`tasks.corpus.segment.segment_step` run by :func:`tasks.core.shards.run_shards` on
  ``executor.workers`` processes in shards of ``shards.rows``, then ``write_output``) vs a
  plain ``jieba.lcut`` loop.
* mask: packed rows of the pipeline's corpus masked with each objective; the
  pipeline's :func:`tasks.pretraining.masking.mask_batch` (NumPy draws for the whole batch,
  compiled loops over rows) vs a per-example Python loop written the way the retired
  transformers ``DataCollatorForWholeWordMask`` worked (group tokens into words, shuffle,
  pick until the budget, then draw the replacement token by token), extended to the
  N-gram, span (SpanBERT), Mac and PerLM rules and PERT's permutation granularities.
* pairs: the corpus packed with room for a middle [SEP] and turned into NSP and SOP segment
  pairs; the pipeline's :func:`tasks.pretraining.pairing.sentence_pairs` vs a
  per-example Python loop (list the cut points, draw one, draw an NSP partner until it is of
  another document, join and renumber the words).

Prints chars/s and examples/s for both and the speed-up, and the peak memory the
vectorised masking allocates (tracemalloc sees NumPy buffers). Needs the pipeline's
artifacts up to ``similar_words`` (``dvc repro similar_words``)::

    python benchmarks/pretraining_data.py [--rows 8192] [--sentences 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import write_parquet
from tasks.core.params import Executor, load_params
from tasks.core.shards import run_shards, write_output
from tasks.corpus.segment import segment_step
from tasks.corpus.similar_words import lexicon_ids, similar_words_from_table
from tasks.corpus.tokenize import random_token_ids
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.masking import masking_config
from tasks.pretraining.packing import pack_documents
from tasks.pretraining.pairing import sentence_pairs

from results import write_results  # benchmarks/results.py (scripts run from their folder)

OBJECTIVES = ["mlm", "wwm", "ngram", "span", "mac", "perlm", "perlm_word", "perlm_ngram", "perlm_sentence"]


def segment_like_the_stage(source: Path, rows: int, workers: int, *, hmm: bool, user_dict: str | None) -> None:
    """What the ``segment`` stage does to ``source`` (a sentence table, Parquet): its sharded
    step on a pool of ``workers`` processes, then the one output file (beside ``source``)."""
    step = segment_step(pq.read_schema(source), hmm=hmm, user_dict=user_dict)
    output = source.with_name("segmented.parquet")
    run = run_shards(step, source, output, rows, Executor(kind="processes", workers=workers))
    write_output(run, step.schema, output)


def best_time(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# --------------------------------------------------------------------------- the naive way, per example


def naive_mask(ids: list[int], words: list[int], lex: list[int], cfg: MaskingConfig, rnd: random.Random,
               lexicon: dict[int, list[list[int]]], random_ids: list[int], mask_id: int,
               sentences: list[int]) -> tuple[list[int], dict]:
    """One example: word groups, shuffled, picked until the budget, then replaced token by token
    (by span under span masking; PerLM: permuted within the row, word, span or sentence)."""
    groups: list[list[int]] = []
    for i, w in enumerate(words):
        if w < 0:
            continue
        if cfg.scheme != "mlm" and groups and words[groups[-1][-1]] == w:
            groups[-1].append(i)
        else:
            groups.append([i])
    n = sum(len(g) for g in groups)
    budget = min(cfg.max_predictions, max(1, round(n * cfg.masked_lm_prob))) if n else 0
    order = list(range(len(groups)))
    rnd.shuffle(order)
    chosen: list[list[int]] = []
    spans: list[list[int]] = []  # the positions of each span taken
    covered: set[int] = set()
    total = 0
    for start in order:
        if total >= budget:
            break
        span = 1
        if cfg.scheme == "span":  # SpanBERT: an uncovered anchor, a geometric length, cut where it must
            if start in covered:
                continue
            drawn = rnd.choices(range(1, len(cfg.span_probs) + 1), weights=cfg.span_probs)[0]
            span, room = 0, budget - total
            while span < drawn and start + span < len(groups) and start + span not in covered \
                    and len(groups[start + span]) <= room:
                room -= len(groups[start + span])
                span += 1
            if not span:
                continue
        elif cfg.scheme == "ngram":
            room = min(len(cfg.ngram_probs), len(groups) - start)
            span = rnd.choices(range(1, room + 1), weights=cfg.ngram_probs[:room])[0]
            while span and total + sum(len(groups[start + k]) for k in range(span)) > budget:
                span -= 1
            if not span or any(start + k in covered for k in range(span)):
                continue
        elif total + len(groups[start]) > budget:
            continue
        spans.append([])
        for k in range(span):
            covered.add(start + k)
            chosen.append(groups[start + k])
            spans[-1] += groups[start + k]
            total += len(groups[start + k])
    out, labels = list(ids), {}
    if cfg.permute:
        positions = sorted(p for g in chosen for p in g)
        moved = [p for p in positions if rnd.random() < cfg.permute]
        span_of = {p: i for i, sp in enumerate(spans) for p in sp}
        key = {"none": lambda p: 0, "word": lambda p: words[p], "ngram": span_of.get,
               "sentence": lambda p: sentences[p]}[cfg.granularity]
        blocks: dict = {}
        for p in moved:
            blocks.setdefault(key(p), []).append(p)
        for block in blocks.values():
            source = block[:]
            rnd.shuffle(source)
            for dest, src in zip(block, source):
                out[dest] = ids[src]
                labels[src] = dest
        for p in positions:
            labels.setdefault(p, p)
        return out, labels
    if cfg.scheme == "span":  # one decision per span
        for span in spans:
            r = rnd.random()
            for p in span:
                labels[p] = ids[p]
                out[p] = mask_id if r < cfg.mask else rnd.choice(random_ids) if r < cfg.mask + cfg.random else ids[p]
        return out, labels
    for group in chosen:
        for p in group:
            labels[p] = ids[p]
        if cfg.similar:  # one decision per word
            r = rnd.random()
            if r < cfg.similar:
                candidates = lexicon.get(lex[group[0]], [])
                candidates = [c for c in candidates if len(c) == len(group)]
                if candidates:
                    for p, t in zip(group, rnd.choice(candidates)):
                        out[p] = t
                    continue
                r = cfg.similar  # no similar word: a random word
            if r < cfg.similar + cfg.random:
                for p in group:
                    out[p] = rnd.choice(random_ids)
            continue
        for p in group:
            r = rnd.random()
            if r < cfg.mask:
                out[p] = mask_id
            elif r < cfg.mask + cfg.random:
                out[p] = rnd.choice(random_ids)
    return out, labels


def naive_pairs(rows: list[tuple], task: str, rnd: random.Random, cls_id: int, sep_id: int,
                width: int) -> list[tuple[list[int], list[int], int]]:
    """One row at a time (``rows``: ``(input_ids, word_ids, piece_start, document)`` lists of a
    row's tokens): ``(input_ids, word_ids, label)`` of its segment pair."""
    kept = []
    for ids, words, starts, doc in rows:
        cands = [i for i in range(1, len(ids) - 1) if starts[i]][1:]
        if not cands:
            cands = [i for i in range(2, len(ids) - 1) if words[i] != words[i - 1]]
        if cands:
            kept.append((ids, words, rnd.choice(cands), doc))
    pairs = []
    for ids, words, cut, doc in kept:
        a, b = (ids[1:cut], words[1:cut]), (ids[cut:-1], words[cut:-1])
        label = int(rnd.random() < 0.5)
        if label and task == "nsp":
            while True:
                other = kept[rnd.randrange(len(kept))]
                if other[3] != doc:
                    break
            b = (other[0][other[2]:-1], other[1][other[2]:-1])
        elif label:
            a, b = b, a
        room = width - 3 - len(a[0])
        b = (b[0][:room], b[1][:room])
        out_ids, out_words, word = [cls_id], [-1], -1
        for seg_ids, seg_words in (a, b):
            for t, (i, w) in enumerate(zip(seg_ids, seg_words)):
                word += t == 0 or w != seg_words[t - 1]
                out_ids.append(i)
                out_words.append(word)
            out_ids.append(sep_id)
            out_words.append(-1)
        pairs.append((out_ids, out_words, label))
    return pairs


# --------------------------------------------------------------------------- benchmark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=8192, help="packed sequences to mask")
    parser.add_argument("--sentences", type=int, default=20000, help="sentences to segment")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for need in (paths.SEGMENTED, paths.TOKENS, paths.LEXICON):
        if not need.exists():
            sys.exit(f"{need} is missing: run `dvc repro similar_words` (or `make repro`) first")
    params = load_params()

    segmented = pq.read_table(paths.SEGMENTED)
    corpus = segmented.drop_columns(["words"]).slice(0, args.sentences)
    texts = corpus.column("text").to_pylist()
    chars = sum(map(len, texts))
    import jieba

    jieba.setLogLevel(60)
    jieba.initialize()
    with tempfile.TemporaryDirectory() as tmp:  # fresh: no completed shard of an earlier run to skip
        source = Path(tmp) / "corpus.parquet"
        write_parquet(source, corpus)
        ours = best_time(lambda: segment_like_the_stage(source, params.shards.rows, params.executor.workers,
                                                        hmm=params.segment.hmm, user_dict=params.segment.user_dict), 1)
    naive = best_time(lambda: [jieba.lcut(t) for t in texts], 1)
    print(f"segment ({len(texts):,} sentences, {chars:,} chars): pipeline {chars / ours:,.0f} chars/s "
          f"({params.executor.workers} processes), naive loop {chars / naive:,.0f} chars/s, x{naive / ours:.1f}")
    figures: dict[str, dict] = {"segment": {"chars_per_sec": round(chars / ours),
                                            "naive_chars_per_sec": round(chars / naive), "speedup": round(naive / ours, 2)}}

    tokens = pq.read_table(paths.TOKENS)
    lexicon_table = pq.read_table(paths.LEXICON)
    tokenizer = AutoTokenizer.from_pretrained(paths.TOKENIZER)
    ids = [np.asarray(x, dtype=np.int32) for x in tokens.column("input_ids").to_pylist()]
    words = [np.asarray(x, dtype=np.int32) for x in tokens.column("word_ids").to_pylist()]
    lex = lexicon_ids(segmented.column("words"), tokens.column("word_ids"), lexicon_table)
    packed = pack_documents(tokens.column("doc_id").to_pylist(), ids, words, params.pretraining_data.max_seq_length,
                            tokenizer.cls_token_id, tokenizer.sep_token_id, lex_ids=lex)
    take = np.arange(args.rows) % len(packed)
    input_ids, word_ids, lex_ids = packed.input_ids[take], packed.word_ids[take], packed.lex_ids[take]
    sentence_ids = np.cumsum(packed.piece_start[take], axis=1)
    # characters of the text behind the rows: each token's length without the "##" prefix
    vocab = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    char_len = np.array([0 if t in tokenizer.all_special_tokens else len(t.removeprefix("##")) for t in vocab])
    row_chars = int(char_len[input_ids].sum())
    similar = similar_words_from_table(lexicon_table)
    lexicon = {e: [similar.tokens[s:s + similar.lengths[e]].tolist()
                   for s in similar.starts[similar.offsets[e]:similar.offsets[e + 1]]] for e in range(len(similar.lengths))}
    rand_ids = random_token_ids(tokenizer)
    rand_list = rand_ids.tolist()
    rows_py = [(input_ids[r].tolist(), word_ids[r].tolist(), lex_ids[r].tolist(), sentence_ids[r].tolist())
               for r in range(len(take))]
    print(f"mask ({args.rows:,} rows x {input_ids.shape[1]}, {row_chars:,} chars, "
          f"{int((word_ids >= 0).sum()):,} maskable tokens):")
    print(f"{'objective':>14} {'pipeline chars/s':>17} {'examples/s':>11} {'peak MiB':>9} "
          f"{'naive chars/s':>14} {'examples/s':>11} {'speed-up':>9}")
    for name in OBJECTIVES:
        spec = params.objectives.get(name)
        config = masking_config(spec, params.pretraining_data) if spec else MaskingConfig(scheme=name)
        rng = np.random.default_rng(0)
        run = lambda: mask_batch(input_ids, word_ids, config, rng, mask_token_id=tokenizer.mask_token_id,  # noqa: E731
                                 random_token_ids=rand_ids, lex_ids=lex_ids, similar=similar,
                                 sentence_ids=sentence_ids)
        ours = best_time(run, args.repeats)
        tracemalloc.start()  # apart from the timing: tracing every allocation slows NumPy down
        run()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        rnd = random.Random(0)
        naive = best_time(lambda: [naive_mask(i, w, x, config, rnd, lexicon, rand_list, tokenizer.mask_token_id, s)
                                   for i, w, x, s in rows_py], args.repeats)
        n = len(take)
        print(f"{name:>14} {row_chars / ours:>17,.0f} {n / ours:>11,.0f} {peak / 2**20:>9.1f} "
              f"{row_chars / naive:>14,.0f} {n / naive:>11,.0f} {naive / ours:>8.1f}x")
        figures[f"mask_{name}"] = {"chars_per_sec": round(row_chars / ours), "examples_per_sec": round(n / ours),
                                   "peak_mb": round(peak / 2**20, 1), "naive_chars_per_sec": round(row_chars / naive),
                                   "speedup": round(naive / ours, 2)}
    packed = pack_documents(tokens.column("doc_id").to_pylist(), ids, words, params.pretraining_data.max_seq_length,
                            tokenizer.cls_token_id, tokenizer.sep_token_id, lex_ids=lex, reserve=1)
    chars = int(char_len[packed.input_ids].sum())
    rows_py = [(packed.input_ids[r, :n].tolist(), packed.word_ids[r, :n].tolist(), packed.piece_start[r, :n].tolist(),
                int(packed.documents[r])) for r, n in enumerate(packed.lengths)]
    print(f"pairs ({len(packed):,} rows, {chars:,} chars):")
    for task in ("nsp", "sop"):
        ours = best_time(lambda: sentence_pairs(packed, task, np.random.default_rng(0), tokenizer.cls_token_id,  # noqa: B023
                                                tokenizer.sep_token_id), args.repeats)
        naive = best_time(lambda: naive_pairs(rows_py, task, random.Random(0), tokenizer.cls_token_id,  # noqa: B023
                                              tokenizer.sep_token_id, packed.input_ids.shape[1]), args.repeats)
        print(f"{task:>10} pipeline {chars / ours:,.0f} chars/s, naive {chars / naive:,.0f} chars/s, "
              f"x{naive / ours:.1f}")
        figures[f"pairs_{task}"] = {"chars_per_sec": round(chars / ours), "naive_chars_per_sec": round(chars / naive),
                                    "speedup": round(naive / ours, 2)}
    write_results("pretraining_data", {"rows": args.rows, "sentences": args.sentences, "repeats": args.repeats,
                                       "segment_workers": params.executor.workers,
                                       "segment_shard_rows": params.shards.rows}, figures)


if __name__ == "__main__":
    main()
