"""CINO's fast MLM: each masked token is predicted over its language's vocabulary only.

In continued multilingual pretraining most of the (extended) vocabulary belongs to
other languages, yet the full softmax projects every masked position onto all of it.
CINO's fast MLM (Yang et al. 2022, CINO, and its repository's pretraining notes: about
10% of pretraining time saved, 40% together with vocabulary pruning) restricts the
MLM softmax of a sequence to the vocabulary of its language. Here a language's
vocabulary is the sorted set of token ids its training sequences contain, so every
label lies in it (masking replaces inputs, never labels); the encoder, the MLM
head's transform, the tied embedding rows and the bias are the model's own, and the
saved model is the plain ``BertForMaskedLM`` (held-out evaluation uses the full softmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertForMaskedLM

from tasks.pretraining.modeling import PretrainingModel
from tasks.pretraining.examples import PretrainingExamples


def language_vocabularies(data: "GroupedExamples", n_groups: int) -> list[np.ndarray]:
    """Per group (language), the sorted token ids of its sequences.

    Args:
        data: the training sequences and their groups, in ``[0, n_groups)``.
    Returns:
        ``n_groups`` arrays of ``int64 [V_g]`` (empty for a group without sequences).
    """
    ids = np.concatenate(data.ids).astype(np.int64)
    base = int(ids.max(initial=0)) + 1
    token_group = np.repeat(np.asarray(data.groups, dtype=np.int64), data.lengths)
    keys = np.unique(token_group * base + ids)  # sorted by group, then by id
    cuts = np.searchsorted(keys // base, np.arange(n_groups + 1))
    return [keys[a:b] - g * base for g, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]


@dataclass
class GroupedExamples(PretrainingExamples):
    """:class:`tasks.pretraining.examples.PretrainingExamples` whose batches carry each
    sequence's group (language): ``groups`` is ``int [N]``; :meth:`batch` adds ``groups``,
    ``int64 [B]``."""

    groups: np.ndarray | None = None

    def batch(self, index: np.ndarray, step: int = 0) -> dict[str, torch.Tensor]:
        out = super().batch(index, step)
        out["groups"] = torch.from_numpy(self.groups[np.asarray(index)].astype(np.int64))
        return out


class FastMLM(PretrainingModel):
    """An MLM-only :class:`PretrainingModel` whose token loss is the cross-entropy over the
    vocabulary of each prediction's group (module docstring).

    Args:
        mlm: the ``BertForMaskedLM`` being pretrained (its decoder weight is the tied embedding).
        vocabularies: per group, ``int [V_g]`` sorted token ids containing every label of the group.
    """

    def __init__(self, mlm: BertForMaskedLM, vocabularies: list[np.ndarray]):
        super().__init__(mlm)
        place = torch.full((len(vocabularies), mlm.config.vocab_size), -1, dtype=torch.int64)
        for g, v in enumerate(vocabularies):  # token id -> its place in the group's vocabulary
            place[g, torch.as_tensor(v, dtype=torch.int64)] = torch.arange(len(v))
        self.bounds = np.concatenate([[0], np.cumsum([len(v) for v in vocabularies])]).tolist()
        # buffers, not saved (persistent=False): they follow the model to its device
        self.register_buffer("vocab_ids", torch.as_tensor(np.concatenate(vocabularies), dtype=torch.int64),
                             persistent=False)
        self.register_buffer("place", place, persistent=False)

    def forward(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Mean cross-entropy over the group vocabularies and its parts (``token_loss``,
        ``token_correct``), for a batch of :meth:`GroupedExamples.batch` (the keys of
        :meth:`PretrainingModel.forward` plus ``groups``).

        Raises:
            ValueError: a label outside its group's vocabulary.
        """
        hidden = self.mlm.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                               token_type_ids=batch["token_type_ids"]).last_hidden_state
        head = self.mlm.cls.predictions
        picked = head.transform(hidden[batch["rows"], batch["cols"]])
        group, labels = batch["groups"][batch["rows"]], batch["labels"]
        target = self.place[group, labels]
        if bool((target < 0).any()):
            raise ValueError("a masked token is outside its language's vocabulary: build the vocabularies "
                             "from the training sequences")
        loss_sum, correct = picked.new_zeros((), dtype=torch.float32), target.new_zeros(())
        for g in torch.unique(group).tolist():  # sorted: the same order on every run
            at = torch.nonzero(group == g).squeeze(1)
            ids = self.vocab_ids[self.bounds[g]:self.bounds[g + 1]]
            logits = F.linear(picked[at], head.decoder.weight[ids], head.decoder.bias[ids]).float()
            loss_sum = loss_sum + F.cross_entropy(logits, target[at], reduction="sum")
            correct = correct + (logits.argmax(-1) == target[at]).sum()
        loss = loss_sum / max(len(labels), 1)
        parts = {"token_loss": loss.detach(), "token_correct": correct}
        if "token_weight" in batch:
            loss = loss * batch["token_weight"]
        return loss, parts
