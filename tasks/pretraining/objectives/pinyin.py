"""PLOME's pronunciation prediction (Liu et al. 2021, "PLOME: Pre-training with Misspelled Knowledge for
Chinese Spelling Correction", ACL, §3; reference implementation github.com/liushulinle/PLOME): besides the
original character, each chosen token's encoding also predicts the character's pronunciation, the two
cross-entropy losses summed, so that the encoder learns which characters sound alike. Here the
pronunciation is the toneless pinyin syllable (pypinyin's most frequent reading, as the sound-alike
replacement reads it: :func:`tasks.pretraining.objectives.sound_alike.character_readings`), one class
each, plus one class for a token without a reading (not a Chinese character); PLOME's own head decodes the
pinyin letters with a GRU, a classifier over the ~400 syllables is the same target in one step.

Params: ``pinyin: true`` on any objective whose labels are the original tokens (not PerLM, not ELECTRA).
Gate: the head's accuracy, from the end of the training log, above its trivial rate: always answering the
most frequent class among the data's chosen tokens. Its held-out measure is the MLM head's, as any MLM's.
"""

from __future__ import annotations

import numpy as np

from tasks.core.params import Objective
from tasks.pretraining.objectives.base import Kind, Logged


def pinyin_classes(vocab: dict[str, int], size: int) -> tuple[np.ndarray, list[str]]:
    """Each token id's pronunciation class: ``(classes int64 [size], names)``, class 0 (``""``) for a token
    without a reading, then the vocabulary's toneless syllables in alphabetical order."""
    from tasks.pretraining.objectives.sound_alike import character_readings

    readings = character_readings(vocab)
    names = ["", *sorted({r for _, r in readings})]
    index = {name: k for k, name in enumerate(names)}
    classes = np.zeros(size, dtype=np.int64)
    for i, reading in readings:
        if i < size:
            classes[i] = index[reading]
    return classes, names


def pinyin_head(config, classes: np.ndarray, names: list[str]):
    """The head (a :class:`tasks.pretraining.modeling.TokenHead`): BERT's MLM transform (dense, GELU,
    LayerNorm) and a projection onto the ``len(names)`` classes; ``classes [V]`` maps a label (the original
    token id) to its class. Forward: ``picked [M, H]``, ``labels int64 [M]`` -> ``(loss, parts)``, the mean
    cross-entropy and ``pinyin_loss``, ``pinyin_correct`` (right answers at the M positions)."""
    import torch  # here, not at the top: the registry is imported by stage pretraining_data, which needs no torch
    import torch.nn.functional as F
    from torch import nn

    class PinyinHead(nn.Module):
        def __init__(self):
            super().__init__()
            h = config.hidden_size
            self.transform = nn.Sequential(nn.Linear(h, h), nn.GELU(), nn.LayerNorm(h, eps=config.layer_norm_eps))
            self.decoder = nn.Linear(h, len(names))
            self.register_buffer("classes", torch.from_numpy(classes), persistent=False)  # from the vocabulary

        def forward(self, picked, labels):
            targets = self.classes[labels]
            logits = self.decoder(self.transform(picked))
            loss = F.cross_entropy(logits.float(), targets)
            return loss, {"pinyin_loss": loss.detach(), "pinyin_correct": (logits.argmax(-1) == targets).sum()}

        def flops(self, predicted: int) -> float:
            h = config.hidden_size
            return predicted * 2.0 * (h * h + h * len(names))

    return PinyinHead()


def trivial_rate(labels: np.ndarray, classes: np.ndarray) -> float:
    """The accuracy of always answering the most frequent class of the chosen tokens ``labels`` (token ids)."""
    counts = np.bincount(classes[labels], minlength=1)
    return float(counts.max() / max(counts.sum(), 1))


class Pinyin(Kind):
    name = "pinyin"
    logged = (Logged("pinyin_loss", "pinyin_loss", "step", "pinyin"),
              Logged("pinyin_accuracy", "pinyin_correct", "prediction", "pinyin"))

    def applies(self, spec: Objective) -> bool:
        return spec.pinyin

    def describe(self, spec: Objective) -> list[str]:
        return ["+ pinyin (PLOME)"]

    def heads(self, spec: Objective, config, tokenizer) -> dict:
        return {"pinyin": pinyin_head(config, *pinyin_classes(tokenizer.get_vocab(), config.vocab_size))}

    def log_gates(self, rows: list[dict], data, cfg, model, spec: Objective) -> list:
        from tasks.pretraining.gates import training_log_gate

        if data.masker is not None:  # dynamic: no stored labels to count the trivial rate on
            return []
        trivial = trivial_rate(np.concatenate(data.labels), model.heads["pinyin"].classes.numpy())
        per_row = cfg.batch_size * cfg.log_every * float(data.predictions.mean())  # chosen tokens a log row
        return [training_log_gate(rows, "pinyin_accuracy", per_row, "pinyin accuracy above always the most "
                                  "frequent reading", trivial)]
