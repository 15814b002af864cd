"""Stage ``resample@<mixture>``: draw the training documents of every language with
p_i ∝ n_i^α / l_i^β (:mod:`tasks.multilingual.resample`) to about ``multilingual.total_tokens``
tokens; writes ``data/mixtures/<mixture>.parquet`` (training order, row groups of
``shards.rows`` rows) and the per-language shares before and after. Out-of-core: the
documents are streamed twice, keeping 12 bytes per document and the drawn documents."""

import sys

import numpy as np
from prefect import flow, get_run_logger
from transformers import BertTokenizerFast  # not AutoTokenizer, which imports torch

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.multilingual import ResampleMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.multilingual.resample import resample, train_lengths, write_drawn


@flow(name="resample")
def resample_mixture(mixture: str) -> None:
    params = load_params()
    spec = params.multilingual
    alpha, beta = spec.mixture(mixture).alpha, spec.mixture(mixture).beta
    tokenizer = BertTokenizerFast.from_pretrained(paths.MULTILINGUAL_TOKENIZER)
    names, codes, lengths = train_lengths(paths.MULTILINGUAL, tokenizer, params.shards.rows)
    keep = np.flatnonzero(lengths > 0)  # a document the tokenizer turns into nothing carries no text
    rows, copies, languages = resample(np.asarray(names, dtype=object)[codes[keep]], lengths[keep], alpha, beta,
                                      spec.total_tokens, params.seed)
    rows = keep[rows]
    for lang, s in languages.items():
        get_run_logger().info(f"{lang}: p={s['probability']:.4f}, token share {s['token_share_before']:.4f} -> "
                              f"{s['token_share_after']:.4f}, repeat factor {s['repeat_factor']:.2f}")
    stats = {"mixture": mixture, "alpha": alpha, "beta": beta, "requested_tokens": spec.total_tokens,
             "documents": len(rows), "tokens": int(lengths[rows].sum()), "languages": languages}
    with atomic_outputs(paths.MIXTURES / f"{mixture}.parquet", paths.stage_metrics("resample", mixture)) as (
            out, metrics):
        write_drawn(paths.MULTILINGUAL, rows, copies, out, params.shards.rows)
        write_metrics(metrics, ResampleMetrics(**stats))


if __name__ == "__main__":
    run_stage(resample_mixture, *sys.argv[1:])
