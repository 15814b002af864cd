"""Layer-wise linear probes on frozen hidden states.

A probe is a multinomial logistic regression from one layer's hidden state of a
word's first sub-token to the word's label (POS tag, NER tag), trained on frozen
features; its held-out accuracy per layer says where in the network the label is
linearly decodable (Tenney et al. 2019, "BERT rediscovers the classical NLP
pipeline"; Liu et al. 2019, "Linguistic knowledge and transferability of
contextual representations", §2). Layer 0 is the embedding output, layer k the
output of transformer block k. The probe is scikit-learn's ``LogisticRegression``
(L-BFGS, deterministic) on standardised features, kept linear so that what it finds
is in the representation rather than learnt by the probe (Hewitt and Liang 2019).

:func:`probe_sentences` draws the probes' sentences; :func:`probe_layers` (a Prefect
task of stage ``probe``) probes every layer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from prefect import get_run_logger
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from tasks.core.errors import SourceError
from tasks.core.io import numbered_lines
from tasks.core.stage import stage_task
from tasks.downstream.conll import NerSentence
from tasks.downstream.ner import EncodedNer, ner_metrics
from tasks.training.batching import IGNORE_INDEX
from tasks.training.device import autocast


def read_pos_tagged(path: Path) -> Iterator[NerSentence]:
    """People's Daily 1998 lines (``迈向/v  充满/v  希望/n``) as sentences of words and their
    gold POS tags; the id is ``file:line``. Blank lines are skipped.

    Raises:
        SourceError: a token without its ``/POS`` tag (names file and line).
    """
    for number, line in numbered_lines(path):
        words, tags = [], []
        for token in line.split():
            word, sep, tag = token.rpartition("/")
            if not sep or not word or not tag:
                raise SourceError(f"{path}:{number}: token {token!r} is not in word/POS format")
            words.append(word)
            tags.append(tag)
        if words:
            yield NerSentence(f"{path.name}:{number}", words, tags)


@torch.no_grad()
def word_features(encoder: torch.nn.Module, data: EncodedNer, batch_size: int,
                  device: torch.device) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Hidden states of every layer at each word's first sub-token.

    Args:
        encoder: a Hugging Face encoder (``AutoModel``) with ``num_hidden_layers`` blocks.
        data: words and labels (:class:`tasks.downstream.ner.EncodedNer`); truncated words are absent.
    Returns:
        ``features float32 [layers + 1, N, H]`` (layer 0 = embeddings), ``labels int64 [N]``,
        and for each of the N words its ``example`` and ``word`` index (``int64 [N]``).
    """
    encoder.to(device).eval()
    layers = []
    for start in range(0, len(data), batch_size):
        batch = data.batch(np.arange(start, min(start + batch_size, len(data))))
        keep = batch.pop("labels") != IGNORE_INDEX
        with autocast(device):
            states = encoder(**{k: v.to(device) for k, v in batch.items()}, output_hidden_states=True).hidden_states
        layers.append(torch.stack([s[keep.to(device)].float().cpu() for s in states]).numpy())
    first = np.flatnonzero(data.labels != IGNORE_INDEX)
    example = np.searchsorted(data.offsets, first, side="right") - 1
    return np.concatenate(layers, axis=1), data.labels[first], example, data.words[first]


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, max_iter: int = 300) -> np.ndarray:
    """Fit a linear probe on ``train_x [N, H]``, ``train_y [N]``; predicted labels of ``test_x [M, H]``."""
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter))
    return probe.fit(train_x, train_y).predict(test_x)


def tags_by_sentence(predicted: np.ndarray, example: np.ndarray, word: np.ndarray, sentences: list[NerSentence],
                     labels: list[str]) -> list[list[str]]:
    """Per-word predictions back into sentences; words without a prediction (truncated) get ``O``."""
    tags = [["O"] * len(s.tokens) for s in sentences]
    for label, e, w in zip(predicted, example, word):
        tags[e][w] = labels[label]
    return tags


def probe_sentences(pos: list[NerSentence], ner: dict[str, list[NerSentence]], train: int, test: int,
                    seed: int) -> dict[str, dict[str, list[NerSentence]]]:
    """``{"pos": {"train", "test"}, "ner": {"train", "test"}}``: ``train`` + ``test`` POS
    sentences drawn at random (seeded) without replacement, and the first ``train`` NER
    training sentences and ``test`` NER dev sentences."""
    pick = np.random.default_rng(seed).permutation(len(pos))[: train + test]
    return {"pos": {"train": [pos[i] for i in pick[:train]], "test": [pos[i] for i in pick[train:]]},
            "ner": {"train": ner["train"][:train], "test": ner["dev"][:test]}}


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
