"""Stage ``probe@<model>``: linear probes on every layer's frozen hidden states for POS tags
(People's Daily gold tags, word level) and NER tags (the NER task's BIO tags); accuracy per
layer, and entity-level F1 of the NER probe (:mod:`tasks.interpretability.probe`)."""

import sys
import time

import numpy as np
import pyarrow.parquet as pq
from prefect import flow, get_run_logger

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.model_dir import load_model, load_tokenizer
from tasks.core.params import load_params
from tasks.core.stage import run_stage, stage_task
from tasks.downstream.downstream import ner_sentences
from tasks.downstream.ner import EncodedNer, ner_metrics
from tasks.interpretability.probe import linear_probe, read_pos_tagged, tags_by_sentence, word_features
from tasks.training.device import resolve_device


@stage_task(task_run_name="{name}")
def probe_layers(name: str, encoder, tokenizer, sentences: dict, max_length: int, batch_size: int, device,
                 entity_f1: bool) -> dict:
    """Probe accuracy (and NER entity-level F1) per layer, trained on ``sentences['train']``,
    scored on ``sentences['test']``."""
    labels = sorted({tag for chosen in sentences.values() for s in chosen for tag in s.tags})
    features = {}
    for split, chosen in sentences.items():
        data = EncodedNer.encode(chosen, tokenizer, labels, max_length)
        features[split] = word_features(encoder, data, batch_size, device)
    (train_x, train_y, _, _), (test_x, test_y, example, word) = features["train"], features["test"]
    result = {"labels": len(labels), "train_words": int(len(train_y)), "test_words": int(len(test_y)),
              "majority_baseline": float(np.mean(test_y == np.bincount(train_y).argmax())), "layers": []}
    for layer in range(len(train_x)):
        predicted = linear_probe(train_x[layer], train_y, test_x[layer])
        scores = {"layer": layer, "accuracy": float(np.mean(predicted == test_y))}
        if entity_f1:
            pred = tags_by_sentence(predicted, example, word, sentences["test"], labels)
            scores["entity_f1"] = ner_metrics([s.tags for s in sentences["test"]], pred)["f1"]
        result["layers"].append(scores)
        get_run_logger().info(f"{name} layer {layer}: {scores}")
    return result


@flow(name="probe")
def probe(model_name: str) -> None:
    params = load_params()
    cfg = params.probe
    rng = np.random.default_rng(params.seed)
    pos = list(read_pos_tagged(paths.RAW / cfg.pos_source / cfg.pos_file))
    pick = rng.permutation(len(pos))[: cfg.sentences.train + cfg.sentences.test]
    ner = {s: ner_sentences(pq.read_table(paths.downstream_split(cfg.ner_task, s))) for s in ("train", "dev")}
    probes = {"pos": {"train": [pos[i] for i in pick[: cfg.sentences.train]],
                      "test": [pos[i] for i in pick[cfg.sentences.train:]]},
              "ner": {"train": ner["train"][: cfg.sentences.train], "test": ner["dev"][: cfg.sentences.test]}}
    model_dir = paths.MODELS / model_name
    encoder, tokenizer = load_model(model_dir), load_tokenizer(model_dir)
    device = resolve_device(params.finetune.device)
    t0 = time.perf_counter()
    metrics = {"model": model_name, "pos_source": f"{cfg.pos_source}/{cfg.pos_file}", "ner_task": cfg.ner_task,
               **{name: probe_layers(name, encoder, tokenizer, chosen, cfg.max_seq_length, cfg.batch_size, device,
                                   name == "ner")
                  for name, chosen in probes.items()}}
    metrics["wall_sec"] = round(time.perf_counter() - t0, 2)
    with atomic_outputs(paths.stage_metrics("probe", model_name)) as (out,):
        write_json(out, metrics)


if __name__ == "__main__":
    run_stage(probe, *sys.argv[1:])
