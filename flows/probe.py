"""Stage ``probe@<model>``: linear probes on every layer's frozen hidden states for POS tags
(People's Daily gold tags, word level) and NER tags (the NER task's BIO tags); accuracy per
layer, and entity-level F1 of the NER probe (:mod:`tasks.interpretability.probe`)."""

import sys
import time

import pyarrow.parquet as pq
from prefect import flow

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.interpretability import ProbeMetrics
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.downstream.conll import ner_sentences
from tasks.interpretability.probe import probe_layers, probe_sentences, read_pos_tagged
from tasks.training.device import resolve_device


@flow(name="probe")
def probe(model_name: str) -> None:
    params = load_params()
    cfg = params.probe
    pos = list(read_pos_tagged(paths.RAW / cfg.pos_source / cfg.pos_file))
    ner = {s: ner_sentences(pq.read_table(paths.downstream_split(cfg.ner_task, s))) for s in ("train", "dev")}
    probes = probe_sentences(pos, ner, cfg.sentences.train, cfg.sentences.test, params.seed)
    model_dir = paths.model_dir(model_name)
    encoder, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    device = resolve_device(params.finetune.device, "finetune.device")
    t0 = time.perf_counter()
    metrics = {"model": model_name, "pos_source": f"{cfg.pos_source}/{cfg.pos_file}", "ner_task": cfg.ner_task,
               **{name: probe_layers(name, encoder, tokenizer, chosen, cfg.max_seq_length, cfg.batch_size, device,
                                   name == "ner")
                  for name, chosen in probes.items()}}
    metrics["wall_sec"] = round(time.perf_counter() - t0, 2)
    with atomic_outputs(paths.stage_metrics("probe", model_name)) as (out,):
        write_metrics(out, ProbeMetrics(**metrics))


if __name__ == "__main__":
    run_stage(probe, *sys.argv[1:])
