"""Training-free structured pruning of fine-tuned task models: attention heads and FFN neurons.

After TextPruner (Yang et al. 2022, ACL demo, §2.2; reference code
``textpruner/pruners/transformer_pruner.py``). The importance of a head or an FFN neuron is

    IS(θ) = E_x | ∂L(x)/∂θ · θ |

for a gate θ = 1 on its output (:func:`tasks.compression.encoder.gates`): the first-order change of
the loss when the structure is removed (Michel et al. 2019, §4.1; Molchanov et al. 2017). The
expectation is the mean over the batches of a data loader, the absolute value taken per batch.
``L`` is the head's cross-entropy on the labels (``supervised``) or, without labels
(``self_supervised``), the cross-entropy against the model's own predictions made hard (its
argmax). TextPruner writes the self-supervised loss KL(stopgrad(q) ‖ p) with q the model's
prediction; taken literally, with q = p, its gradient is identically zero (−Σ q ∇log p = −∇Σ p = 0),
so q here is that prediction's limit at temperature → 0, the predicted label.

Pruning reaches a target (heads per layer on average, FFN neurons per layer on average) in one
shot or over ``n_iters`` iterations that recompute IS on the model pruned so far, keeping in each
layer the most important structures (``homogeneous``: the same count in every layer) or the most
important across layers (``uneven``, TextPruner's UHF: at least one head and one neuron per layer).
Ties are broken by position (layer, then index), so the choice does not depend on hash order.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_model as load_safetensors, save_model
from torch import nn
from transformers import AutoConfig

from tasks.compression.losses import LABEL_KEYS, prediction_logits
from tasks.compression.encoder import encoder_of, gates, heads_of, record_shape, reshape_to_config, slice_layer
from tasks.core.errors import ParamsError, SourceError
from tasks.core.model_dir import WEIGHT_ERRORS, load_model

IMPORTANCE = ("supervised", "self_supervised")
ALLOCATION = ("homogeneous", "uneven")


@dataclass(frozen=True)
class Importance:
    """Per layer, ``float64`` IS of each head (``heads[l]: [heads_l]``) and FFN neuron (``ffn[l]: [f_l]``)."""
    heads: list[np.ndarray]
    ffn: list[np.ndarray]


def _loss(model: nn.Module, batch: dict[str, torch.Tensor], kind: str) -> torch.Tensor:
    if kind == "supervised":
        return model(**batch).loss
    out = model(**{k: v for k, v in batch.items() if k not in LABEL_KEYS})
    rows = prediction_logits(out, batch)
    return sum(F.cross_entropy(r, r.argmax(-1).detach()) for r in rows) / len(rows)


def importance(model: nn.Module, data, kind: str, *, examples: int, batch_size: int,
               device: torch.device) -> Importance:
    """IS of every head and FFN neuron of ``model`` over the first ``examples`` examples of ``data``.

    Args:
        data: an encoded task split (``len``, ``batch(index)``, :mod:`tasks.downstream.finetune`).
        kind: ``supervised`` or ``self_supervised`` (module docstring).
    Returns:
        :class:`Importance`, accumulated in float64 (model in eval mode: no dropout).
    Raises:
        ValueError: an unknown ``kind``.
    """
    if kind not in IMPORTANCE:
        raise ValueError(f"unknown importance {kind!r}; one of {', '.join(IMPORTANCE)}")
    model.to(device).eval()
    encoder = encoder_of(model)
    layers = encoder.encoder.layer
    head_gates = [torch.ones(heads_of(layer), device=device, requires_grad=True) for layer in layers]
    ffn_gates = [torch.ones(layer.intermediate.dense.out_features, device=device, requires_grad=True)
                 for layer in layers]
    heads = [np.zeros(len(g)) for g in head_gates]
    ffn = [np.zeros(len(g)) for g in ffn_gates]
    n = min(examples, len(data))
    batches = 0
    for start in range(0, n, batch_size):
        batch = {k: v.to(device) for k, v in data.batch(np.arange(start, min(start + batch_size, n))).items()}
        with gates(encoder, head_gates, ffn_gates):
            loss = _loss(model, batch, kind)
        grads = torch.autograd.grad(loss, [*head_gates, *ffn_gates])
        for i in range(len(layers)):
            heads[i] += grads[i].abs().double().cpu().numpy()
            ffn[i] += grads[len(layers) + i].abs().double().cpu().numpy()
        batches += 1
    model.zero_grad(set_to_none=True)
    return Importance([h / max(1, batches) for h in heads], [f / max(1, batches) for f in ffn])


def _ranked(scores: np.ndarray) -> np.ndarray:
    """Indices by descending score, ties by ascending index (a stable sort of −score)."""
    return np.argsort(-scores, kind="stable")


def choose(scores: list[np.ndarray], target: int, allocation: str) -> list[np.ndarray]:
    """The structures to keep in each layer, ascending.

    Args:
        scores: per layer, IS of its structures (heads or neurons).
        target: structures kept per layer on average (``homogeneous``: in every layer); the
            total kept is ``target × layers`` capped by what the layers have.
        allocation: ``homogeneous`` (top ``target`` of each layer) or ``uneven`` (top across
            layers, one at least per layer; ties by layer, then index).
    Raises:
        ValueError: an unknown allocation or a target below 1.
    """
    if target < 1:
        raise ValueError(f"a pruning target must keep at least 1 structure per layer, got {target}")
    if allocation == "homogeneous":
        return [np.sort(_ranked(s)[:min(target, len(s))]) for s in scores]
    if allocation != "uneven":
        raise ValueError(f"unknown allocation {allocation!r}; one of {', '.join(ALLOCATION)}")
    keep = [[int(_ranked(s)[0])] for s in scores]  # every layer keeps its best
    budget = min(target * len(scores), sum(map(len, scores))) - len(scores)
    rest = [(-float(s[j]), layer, int(j)) for layer, s in enumerate(scores) for j in _ranked(s)[1:]]
    for _, layer, j in sorted(rest)[:max(0, budget)]:
        keep[layer].append(j)
    return [np.sort(np.array(k, dtype=np.int64)) for k in keep]


def check_targets(heads: int, ffn: int, config, model: str) -> None:
    """Refuse pruning targets the model cannot meet (more heads or FFN neurons kept per layer than
    it has), which would otherwise "prune" to the unpruned model.

    Args:
        config: the encoder's Hugging Face config (``num_attention_heads``, ``intermediate_size``).
    Raises:
        ParamsError: one line naming the param, its value and the model's size.
    """
    problems = [f"compression.prune.{key} {want} is more than the {have} {what} per layer of {model}"
                for key, want, have, what in (("heads", heads, config.num_attention_heads, "attention heads"),
                                              ("ffn", ffn, config.intermediate_size, "FFN neurons"))
                if want > have]
    if problems:
        raise ParamsError("; ".join(problems))


def prune(model: nn.Module, data, *, heads: int, ffn: int, kind: str, allocation: str, n_iters: int,
          examples: int, batch_size: int, device: torch.device, first: Importance | None = None) -> list[dict]:
    """Prune ``model``'s encoder in place to ``heads`` heads and ``ffn`` FFN neurons per layer on
    average, over ``n_iters`` iterations (1 = one shot), recomputing IS before each.

    Iteration ``i`` of ``n`` prunes to ``full − (full − target)·i/n`` (rounded) of each kind, so
    the last reaches the target. Afterwards ``encoder.config`` records the new shape
    (:func:`tasks.compression.encoder.record_shape`).

    Args:
        first: ``importance(model, data, kind, ...)`` of the unpruned ``model``, when already
            computed: the first iteration uses it instead of computing it again (every variant
            of one importance kind starts from the same IS).

    Returns:
        per iteration: ``heads`` and ``ffn`` kept per layer.
    """
    encoder = encoder_of(model)
    layers = encoder.encoder.layer
    full_heads, full_ffn = max(heads_of(x) for x in layers), max(x.intermediate.dense.out_features for x in layers)
    history = []
    for i in range(1, n_iters + 1):
        score = first if i == 1 and first is not None else importance(
            model, data, kind, examples=examples, batch_size=batch_size, device=device)
        want_heads = round(full_heads - (full_heads - heads) * i / n_iters)
        want_ffn = round(full_ffn - (full_ffn - ffn) * i / n_iters)
        keep_heads = choose(score.heads, want_heads, allocation)
        keep_ffn = choose(score.ffn, want_ffn, allocation)
        for layer, h, f in zip(layers, keep_heads, keep_ffn):
            slice_layer(layer, torch.from_numpy(h), torch.from_numpy(f))
        history.append({"heads": [len(h) for h in keep_heads], "ffn": [len(f) for f in keep_ffn]})
    record_shape(encoder)
    return history


@dataclass(frozen=True)
class PruneVariant:
    """One row of the pruning grid: importance kind, allocation and iterations (1 = one shot)."""
    importance: str
    allocation: str
    n_iters: int

    @property
    def name(self) -> str:
        schedule = "one_shot" if self.n_iters == 1 else f"iterative{self.n_iters}"
        return f"{self.importance}-{self.allocation}-{schedule}"

    @property
    def description(self) -> str:
        return (f"{self.importance} importance, {self.allocation}, "
                + ("one shot" if self.n_iters == 1 else f"{self.n_iters} iterations"))


def variants(n_iters: int) -> list[PruneVariant]:
    """The grid ``prune@<model>-<task>`` runs: importance x allocation x (one shot, ``n_iters``)."""
    return [PruneVariant(k, a, n) for k in IMPORTANCE for a in ALLOCATION for n in sorted({1, n_iters})]


def prune_copy(model: nn.Module, data, variant: PruneVariant, *, heads: int, ffn: int, examples: int,
               batch_size: int, device: torch.device, first: Importance | None = None) -> tuple[nn.Module, dict]:
    """A pruned copy of ``model`` (one seed's) by ``variant`` (:func:`prune`, ``first`` its IS of
    ``model``); returns it and the heads and FFN neurons it keeps per layer."""
    pruned = copy.deepcopy(model)
    history = prune(pruned, data, heads=heads, ffn=ffn, kind=variant.importance, allocation=variant.allocation,
                    n_iters=variant.n_iters, examples=examples, batch_size=batch_size, device=device, first=first)
    return pruned, history[-1]


def prune_vocabulary(model: nn.Module, keep: np.ndarray) -> np.ndarray:
    """Keep only the token ids ``keep`` (ascending) in ``model``'s input embeddings, in place
    (TextPruner's vocabulary pruning of a task model); returns the old→new id map
    (``int64 [V]``, −1 for dropped ids) to renumber inputs with. Predictions on inputs whose
    tokens are all kept are unchanged (tested).

    Raises:
        ValueError: ``keep`` not strictly ascending or out of range.
    """
    encoder = encoder_of(model)
    old = encoder.embeddings.word_embeddings
    keep = np.asarray(keep, dtype=np.int64)
    if len(keep) == 0 or (np.diff(keep) <= 0).any() or keep[0] < 0 or keep[-1] >= old.num_embeddings:
        raise ValueError(f"keep must be strictly ascending ids in 0..{old.num_embeddings - 1}")
    new = nn.Embedding(len(keep), old.embedding_dim, padding_idx=None,
                       device=old.weight.device, dtype=old.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(old.weight[torch.from_numpy(keep).to(old.weight.device)])
    encoder.embeddings.word_embeddings = new
    encoder.config.vocab_size = len(keep)
    new_id = np.full(old.num_embeddings, -1, dtype=np.int64)
    new_id[keep] = np.arange(len(keep))
    return new_id


def used_ids(data, special_ids: list[int]) -> np.ndarray:
    """Ascending token ids that occur in the encoded examples of ``data`` (a list of encoded
    splits), plus ``special_ids`` (the tokenizer's special tokens)."""
    seen = {int(i) for i in special_ids}
    for split in data:
        for start in range(0, len(split), 512):
            ids = split.batch(np.arange(start, min(start + 512, len(split))))["input_ids"]
            seen.update(np.unique(ids.numpy()).tolist())
    return np.array(sorted(seen), dtype=np.int64)


class Renumbered:
    """An encoded split whose ``input_ids`` are mapped through ``new_id`` (old id -> new id), for a
    vocabulary-pruned model; everything else as ``data`` gives it."""

    def __init__(self, data, new_id: np.ndarray):
        self.data, self.new_id = data, torch.from_numpy(new_id)
        self.lengths = data.lengths

    def __len__(self) -> int:
        return len(self.data)

    def batch(self, index: np.ndarray) -> dict[str, torch.Tensor]:
        batch = self.data.batch(index)
        ids = self.new_id[batch["input_ids"]]
        if (ids < 0).any():
            raise ValueError("an input token was pruned from the vocabulary")
        return {**batch, "input_ids": ids}


def save_pruned(model: nn.Module, folder: Path) -> None:
    """``folder/config.json``: the encoder's config with its per-layer shapes
    (:func:`tasks.compression.encoder.record_shape`); ``folder/model.safetensors``: every weight
    of the task model. :func:`load_pruned` reads it back."""
    folder.mkdir(parents=True)
    encoder_of(model).config.save_pretrained(folder)
    save_model(model, str(folder / "model.safetensors"))


def load_pruned(family, folder: Path, model_dir: Path, labels, training) -> nn.Module:
    """A pruned task model :func:`save_pruned` wrote: ``family``'s head on ``model_dir``'s encoder
    (the unpruned architecture), re-shaped to the saved per-layer heads, FFN sizes and
    vocabulary, then every weight loaded strictly; eval mode.

    A model whose layers all keep every head and one FFN size is an ordinary smaller BERT:
    ``AutoModel.from_pretrained`` loads its encoder from a folder with that config and the
    encoder's weights. Head-pruned models need this loader: transformers derives the head size
    from ``hidden_size / num_attention_heads``, which pruning heads changes.

    Raises:
        SourceError: a missing or unreadable file, or weights that do not fit.
    """
    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise SourceError(f"{folder}: no pruned model config: {str(exc).splitlines()[0]}") from None
    model = load_model(model_dir, lambda path: family.model(path, labels, training))
    encoder = encoder_of(model)
    reshape_to_config(encoder, config)
    if config.vocab_size != encoder.config.vocab_size:
        prune_vocabulary(model, np.arange(config.vocab_size))
    try:
        load_safetensors(model, str(folder / "model.safetensors"), strict=True)
    except WEIGHT_ERRORS as exc:
        raise SourceError(f"{folder / 'model.safetensors'}: does not fit its config.json: "
                          f"{str(exc).splitlines()[0]}") from None
    return model.eval()
