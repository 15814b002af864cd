"""Stage ``resample@<mixture>``: draw the training documents of every language with
p_i ∝ n_i^α / l_i^β (:mod:`tasks.multilingual.resample`) to about ``multilingual.total_tokens``
tokens; writes ``data/mixtures/<mixture>.parquet`` (training order) and the per-language
shares before and after."""

import sys

import numpy as np
import pyarrow as pa
from prefect import flow, get_run_logger
from transformers import AutoTokenizer

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_parquet
from tasks.core.metrics import ResampleMetrics, write_metrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.multilingual.multilingual import read_documents
from tasks.multilingual.resample import resample


@flow(name="resample")
def resample_mixture(mixture: str) -> None:
    params = load_params()
    spec = params.multilingual
    alpha, beta = spec.mixture(mixture).alpha, spec.mixture(mixture).beta
    docs = read_documents(paths.MULTILINGUAL, "train")
    tokenizer = AutoTokenizer.from_pretrained(paths.MULTILINGUAL_TOKENIZER)
    texts = docs.column("text").to_pylist()
    ids = tokenizer(texts, add_special_tokens=False, split_special_tokens=True, return_attention_mask=False)["input_ids"]
    lengths = np.array([len(x) for x in ids])
    keep = np.flatnonzero(lengths > 0)  # a document the tokenizer turns into nothing carries no text
    langs = docs.column("lang").to_pylist()
    rows, copies, languages = resample([langs[i] for i in keep], lengths[keep], alpha, beta,
                                      spec.total_tokens, params.seed)
    rows = keep[rows]
    out_table = pa.table({"doc_id": docs.column("doc_id").take(rows), "lang": docs.column("lang").take(rows),
                          "copy": pa.array(copies, pa.int32()), "text": docs.column("text").take(rows)})
    for lang, s in languages.items():
        get_run_logger().info(f"{lang}: p={s['probability']:.4f}, token share {s['token_share_before']:.4f} -> "
                              f"{s['token_share_after']:.4f}, repeat factor {s['repeat_factor']:.2f}")
    stats = {"mixture": mixture, "alpha": alpha, "beta": beta, "requested_tokens": spec.total_tokens,
             "documents": len(rows), "tokens": int(lengths[rows].sum()), "languages": languages}
    with atomic_outputs(paths.MIXTURES / f"{mixture}.parquet", paths.stage_metrics("resample", mixture)) as (
            out, metrics):
        write_parquet(out, out_table)
        write_metrics(metrics, ResampleMetrics(**stats))


if __name__ == "__main__":
    run_stage(resample_mixture, *sys.argv[1:])
