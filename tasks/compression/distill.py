"""Knowledge distillation (KD) of fine-tuned task models into smaller students.

Soft labels after Hinton, Vinyals and Dean 2015 ("Distilling the knowledge in a neural
network", §2): the student matches the teacher's softened distribution at temperature τ,
mixed with the hard-label loss. Intermediate matches, students taken from teacher layers and
multi-teacher soft labels after TextBrewer (Yang et al. 2020, ACL demo, §3; reference code
``textbrewer/losses.py``: ``kd_ce_loss``, ``hid_mse_loss``, ``att_mse_loss``, ``cos_loss``;
``MultiTeacherDistiller`` averages the teachers' logits).

The losses, the temperature schedule and :func:`prediction_logits`, through which one loop serves the three
task families, are in :mod:`tasks.compression.losses`.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from transformers import BertConfig, BertModel

from tasks.compression.encoder import Recorder, encoder_of
from tasks.compression.losses import (LABEL_KEYS, NEG, attention_mse, cos_loss, hidden_mse, kd_loss, prediction_logits,
                                      temperature_at)
from tasks.core.errors import ParamsError
from tasks.training.batching import IGNORE_INDEX, BatchSchedule, pad_batch
from tasks.training.device import autocast
from tasks.training.loop import History, run
from tasks.training.optim import optimizer_for


@dataclass(frozen=True)
class Match:
    """One intermediate match: ``kind`` (:data:`tasks.compression.losses.MATCHES`) between student state/attention
    ``student`` and teacher state/attention ``teacher`` (numbering of :mod:`.encoder`), weighted."""
    kind: str
    student: int
    teacher: int
    weight: float = 1.0


@dataclass(frozen=True)
class KdConfig:
    """How a student learns: ``hard_weight`` × the head's own label loss + ``kd_weight`` ×
    :func:`kd_loss` + Σ match weight × match loss."""
    temperature: float = 1.0
    temperature_schedule: str = "constant"
    scale_by_t2: bool = True
    kd_weight: float = 0.0
    hard_weight: float = 1.0
    matches: tuple[Match, ...] = ()


def check_student(student_layers: int, teacher_layers: int, layer_map: Sequence[int] | None,
                  matches: Sequence[Match], where: str) -> None:
    """Fail at start, in one message, on a layer map or a match out of range.

    Raises:
        ParamsError: naming ``where`` (the params key) and the offending entry.
    """
    problems = []
    if layer_map is not None:
        if len(layer_map) != student_layers:
            problems.append(f"layer_map has {len(layer_map)} entries for {student_layers} student layers")
        problems += [f"layer_map[{i}] = {t} is not a teacher layer (0..{teacher_layers - 1})"
                     for i, t in enumerate(layer_map) if not 0 <= t < teacher_layers]
    for i, m in enumerate(matches):
        low = 1 if m.kind == "attention_mse" else 0  # attentions are numbered from layer 1
        if not low <= m.student <= student_layers:
            problems.append(f"matches[{i}].student = {m.student} is not in {low}..{student_layers}")
        if not low <= m.teacher <= teacher_layers:
            problems.append(f"matches[{i}].teacher = {m.teacher} is not in {low}..{teacher_layers}")
    if problems:
        raise ParamsError(f"{where}: " + "; ".join(problems))


def student_encoder(base: BertModel, layers: int, hidden_size: int, heads: int, intermediate_size: int,
                    layer_map: Sequence[int] | None, seed: int) -> BertModel:
    """A BERT student encoder of the given size on ``base``'s vocabulary and positions (``base``
    may be any encoder with BERT's config fields when initialised at random).

    With ``layer_map``, student layer ``j`` starts as a copy of ``base`` layer ``layer_map[j]``
    (0-based) and the embeddings are ``base``'s, as TextBrewer's T3/T6 students take BERT-base
    layers; the widths must then equal ``base``'s. Without, it is initialised at random under ``seed``.

    Raises:
        ParamsError: ``layer_map`` with widths that differ from ``base``'s, or a ``base`` that is
            not a BERT-architecture encoder.
    """
    inherited = ("vocab_size", "max_position_embeddings", "type_vocab_size", "pad_token_id", "hidden_act",
                 "layer_norm_eps", "hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")
    config = BertConfig(**{k: getattr(base.config, k) for k in inherited}, num_hidden_layers=layers,
                        hidden_size=hidden_size, num_attention_heads=heads, intermediate_size=intermediate_size)
    torch.manual_seed(seed)
    student = BertModel(config, add_pooling_layer=False)
    if layer_map is None:
        return student
    encoder_of(base)  # a BERT-architecture teacher (ALBERT shares its layers)
    if (hidden_size, heads, intermediate_size) != (base.config.hidden_size, base.config.num_attention_heads,
                                                   base.config.intermediate_size):
        raise ParamsError(f"a student initialised from teacher layers needs the teacher's widths (hidden "
                          f"{base.config.hidden_size}, heads {base.config.num_attention_heads}, FFN "
                          f"{base.config.intermediate_size}); got {hidden_size}/{heads}/{intermediate_size}: "
                          "use init: random for another width")
    student.embeddings.load_state_dict(base.embeddings.state_dict())
    for j, t in enumerate(layer_map):
        student.encoder.layer[j].load_state_dict(base.encoder.layer[t].state_dict())
    return student


def build_student(family, encoder: BertModel, labels, training, seed: int) -> nn.Module:
    """``family``'s task head on ``encoder`` (head initialised under ``seed``, as ``finetune`` does),
    through the family's own loader so the student is the same kind of model as the teacher."""
    with tempfile.TemporaryDirectory(prefix="zhplm-student-") as folder:
        encoder.save_pretrained(folder)
        torch.manual_seed(seed)
        return family.model(folder, labels, training)


class Ensemble(nn.Module):
    """Several task models of one family as one: each output is the mean of the members' logits
    (TextBrewer's multi-teacher average); ``forward`` takes the members' inputs."""

    def __init__(self, members: Sequence[nn.Module]):
        super().__init__()
        self.members = nn.ModuleList(members)

    def forward(self, **batch) -> dict[str, torch.Tensor]:
        outs = [m(**batch) for m in self.members]
        names = [k for k in ("logits", "start_logits", "end_logits") if k in outs[0] and outs[0][k] is not None]
        return {k: torch.stack([o[k].float() for o in outs]).mean(0) for k in names}


@dataclass(frozen=True)
class SoftLabels:
    """The teachers' :func:`prediction_logits` rows for every example of a training set,
    computed once: KD without intermediate matches then needs no teacher forward per step
    (the teachers are frozen and in eval mode, so an example's rows are the same in every
    epoch; only float rounding depends on the batch it shares). Several teachers: their rows
    averaged, as :class:`Ensemble` and TextBrewer's ``MultiTeacherDistiller`` do.

    ``values[k]``: the k-th output's rows, example after example (``float32 [R, C]``; MRC
    ``[P]``, each valid position a scalar); ``offsets``: ``int64 [N + 1]``, where each
    example's rows start in every output. Memory: N × C floats for classification, labelled
    tokens × C for NER, 2 × positions for MRC.
    """
    values: tuple[np.ndarray, ...]
    offsets: np.ndarray
    positions: bool  # MRC: a batch's rows are padded back to [B, L] with NEG

    @classmethod
    @torch.no_grad()
    def of(cls, teacher: nn.Module, data, batch_size: int, device: torch.device) -> SoftLabels:
        """Run ``teacher`` over ``data`` (a :class:`tasks.downstream.finetune.Batches`),
        ``batch_size`` examples of similar length a forward pass, and keep each example's rows."""
        teacher.to(device).eval()
        pieces: list[list[np.ndarray]] = [[] for _ in range(len(data))]  # example -> its rows per output
        order, positions = np.argsort(data.lengths, kind="stable"), False  # little padding
        for start in range(0, len(data), batch_size):
            index = order[start:start + batch_size]
            batch = {k: v.to(device) for k, v in data.batch(index).items()}
            with autocast(device):
                out = teacher(**{k: v for k, v in batch.items() if k not in LABEL_KEYS})
            rows = [r.cpu().numpy() for r in prediction_logits(out, batch)]
            positions = "start_logits" in out
            if positions:  # [B, L]: each example's valid positions
                split = [[r[j, :n] for j, n in enumerate(batch["attention_mask"].sum(1).cpu().numpy())]
                         for r in rows]
            else:  # NER: the labelled tokens; classification: a row an example
                counts = (batch["labels"] != IGNORE_INDEX).sum(1).cpu().numpy() if out["logits"].ndim == 3 else \
                    np.ones(len(index), dtype=np.int64)
                split = [np.split(r, np.cumsum(counts)[:-1]) for r in rows]
            for j, i in enumerate(index):
                pieces[i] = [s[j] for s in split]
        counts = np.array([len(p[0]) for p in pieces], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        return cls(tuple(np.concatenate(k) for k in zip(*pieces)), offsets, positions)

    @classmethod
    def mean(cls, members: Sequence[SoftLabels]) -> SoftLabels:
        """Several teachers' rows averaged (multi-teacher KD)."""
        values = tuple(torch.stack([torch.from_numpy(v) for v in k]).mean(0).numpy()
                       for k in zip(*(m.values for m in members)))
        return cls(values, members[0].offsets, members[0].positions)

    def rows(self, index: np.ndarray) -> list[torch.Tensor]:
        """The rows of examples ``index`` as :func:`prediction_logits` gives them for the batch
        ``data.batch(index)``: ``[N, C]`` tensors, MRC ``[B, L]`` padded with :data:`NEG`."""
        index = np.asarray(index)
        if self.positions:
            return [torch.from_numpy(pad_batch(v, self.offsets, index, pad_value=NEG)[0].astype(np.float32))
                    for v in self.values]
        take = np.concatenate([np.arange(self.offsets[i], self.offsets[i + 1]) for i in index])
        return [torch.from_numpy(v[take]) for v in self.values]


def _projections(matches: Sequence[Match], student_hidden: int, teacher_hidden: int) -> nn.ModuleDict:
    """One learned ``Linear(student_hidden, teacher_hidden)`` per hidden-state match when widths
    differ (TextBrewer's ``intermediate_matches`` ``proj``), keyed by match index."""
    if student_hidden == teacher_hidden:
        return nn.ModuleDict()
    return nn.ModuleDict({str(i): nn.Linear(student_hidden, teacher_hidden)
                          for i, m in enumerate(matches) if m.kind != "attention_mse"})


def _recording(encoder: BertModel | None, hidden: bool, attentions: bool):
    """A :class:`Recorder` when there is something to record, else a no-op context."""
    return Recorder(encoder, hidden, attentions) if encoder is not None else contextlib.nullcontext()


def distill(student: nn.Module, teachers: Sequence[nn.Module], data, cfg: KdConfig, *, epochs: float,
            batch_size: int, lr: float, warmup_fraction: float, weight_decay: float, max_grad_norm: float,
            seed: int, device: torch.device, soft_labels: SoftLabels | None = None,
            log: Callable[[str], None] = print) -> dict:
    """Train ``student`` on ``data`` from the hard labels and the ``teachers``' soft labels.

    The loop, schedule and optimiser are :func:`tasks.downstream.finetune.fit`'s (same batches
    for the same seed, AdamW, warm-up then linear decay, clipping), so a student trained with
    ``kd_weight: 0`` and no matches is the labels-only baseline under the same conditions.
    Several teachers: their logits are averaged before softening (multi-teacher KD). Teachers
    run in eval mode without gradients; ``soft_labels`` (:meth:`SoftLabels.of` the teachers on
    ``data``) replaces their forward pass for the KD term, so ``teachers`` may then be empty
    unless there are intermediate matches; projections for hidden matches of another width train
    with the student. With ``attention_mse`` both models switch to eager attention (sdpa
    returns no probabilities; same attention). One process (no DDP).

    Returns:
        ``steps``, ``train_loss`` (total, mean over the last 10% of steps), ``kd_loss`` and
        ``match_loss`` (same window), ``wall_sec``, ``examples_per_sec``.
    """
    torch.manual_seed(seed)
    student.to(device).train()
    for teacher in teachers:
        teacher.to(device).eval()
    need_hidden = any(m.kind != "attention_mse" for m in cfg.matches)
    need_attention = any(m.kind == "attention_mse" for m in cfg.matches)
    if cfg.matches and len(teachers) != 1:
        raise ParamsError("intermediate matches need exactly one teacher")
    enc_s = encoder_of(student) if cfg.matches else None
    enc_t = encoder_of(teachers[0]) if cfg.matches else None
    if need_attention:  # sdpa returns no attention probabilities; eager computes the same attention
        enc_s.set_attn_implementation("eager")
        enc_t.set_attn_implementation("eager")
    projections = _projections(cfg.matches, enc_s.config.hidden_size, enc_t.config.hidden_size).to(device) \
        if cfg.matches else nn.ModuleDict()
    schedule = BatchSchedule(data.lengths, batch_size, seed)
    total = max(1, round(epochs * schedule.per_epoch))
    opt = optimizer_for(nn.ModuleList([student, projections]), lr, weight_decay)
    history = History(total, log, recipe=f"distillation lr {lr:g}, batch {batch_size}, max_grad_norm {max_grad_norm:g}")

    class Task:
        def batches(self, step: int) -> list[dict[str, torch.Tensor]]:
            return [data.batch(schedule(step))]

        def loss(self, net, batch, step):
            inputs = {k: v for k, v in batch.items() if k not in LABEL_KEYS}
            with _recording(enc_s, need_hidden, need_attention) as rec_s:
                out_s = net(**batch)
            loss = cfg.hard_weight * out_s.loss if cfg.hard_weight else out_s.loss.new_zeros(())
            kd = match = torch.zeros((), device=device)
            if teachers and (cfg.matches or (cfg.kd_weight and soft_labels is None)):
                with torch.no_grad(), _recording(enc_t, need_hidden, need_attention) as rec_t:
                    outs_t = [t(**inputs) for t in teachers]
            if cfg.kd_weight and (teachers or soft_labels is not None):
                tau = temperature_at(step, total, cfg.temperature, cfg.temperature_schedule)
                rows_s = prediction_logits(out_s, batch)
                rows_t = [r.to(device) for r in soft_labels.rows(schedule(step))] if soft_labels is not None else \
                    [torch.stack(r).mean(0) for r in zip(*(prediction_logits(o, batch) for o in outs_t))]
                kd = sum(kd_loss(s, t, tau, cfg.scale_by_t2) for s, t in zip(rows_s, rows_t)) / len(rows_s)
                loss = loss + cfg.kd_weight * kd
            for i, m in enumerate(cfg.matches):
                mask = batch["attention_mask"]
                if m.kind == "attention_mse":
                    term = attention_mse(rec_s.attentions[m.student].float(), rec_t.attentions[m.teacher].float(), mask)
                else:
                    s = rec_s.hidden[m.student].float()
                    s = projections[str(i)](s) if str(i) in projections else s
                    t = rec_t.hidden[m.teacher].float()
                    term = hidden_mse(s, t, mask) if m.kind == "hidden_mse" else cos_loss(s, t, mask)
                match = match + m.weight * term
            if cfg.matches:
                loss = loss + match
            return loss, {"kd": kd.detach(), "match": match.detach()}

    t0 = time.perf_counter()
    run(student, Task(), opt, steps=range(total), total=total, peak_lr=lr, warmup_fraction=warmup_fraction,
        max_grad_norm=max_grad_norm, device=device, params=[*student.parameters(), *projections.parameters()],
        after_step=lambda s: history.add(s.done, loss=s.losses[0], **s.parts[0]))
    wall = time.perf_counter() - t0
    return {"steps": total, "train_loss": history.tail("loss"), "kd_loss": history.tail("kd"),
            "match_loss": history.tail("match"), "wall_sec": round(wall, 2),
            "examples_per_sec": round(total * batch_size / wall, 1)}


def train_student(family, base: BertModel, size, layer_map: Sequence[int] | None, teachers: Sequence[nn.Module],
                  data, labels, training, config: KdConfig, epochs: float, lr: float, seed: int,
                  device: torch.device, soft_labels: SoftLabels | None = None,
                  log: Callable[[str], None] = print) -> tuple[nn.Module, dict]:
    """One student of ``distill@<student>-<task>``: :func:`student_encoder` of ``size``
    (:class:`tasks.core.params.Student`) on ``base``, the family's head (:func:`build_student`),
    then :func:`distill` with the task's batch, warm-up, weight decay and clipping.

    Returns:
        the trained student (eval mode) and :func:`distill`'s summary.
    """
    encoder = student_encoder(base, size.num_hidden_layers, size.hidden_size, size.num_attention_heads,
                              size.intermediate_size, layer_map, seed)
    student = build_student(family, encoder, labels, training, seed)
    summary = distill(student, teachers, data, config, epochs=epochs, batch_size=training.batch_size, lr=lr,
                      warmup_fraction=training.warmup_fraction, weight_decay=training.weight_decay,
                      max_grad_norm=training.max_grad_norm, seed=seed, device=device, soft_labels=soft_labels,
                      log=log)
    return student.eval(), summary


def student_layer_map(size, teacher_layers: int) -> list[int] | None:
    """The teacher layers a student of ``size`` (:class:`tasks.core.params.Student`) starts from:
    its ``layer_map``, else :func:`layer_map_for`; ``None`` for a student initialised at random."""
    if size.init != "teacher":
        return None
    return size.layer_map or layer_map_for(size.num_hidden_layers, teacher_layers)


def layer_map_for(student_layers: int, teacher_layers: int) -> list[int]:
    """An evenly spread layer map (0-based): student layer ``j`` from teacher layer ⌈(j+1)·T/S⌉ − 1,
    so the last student layer starts as the last teacher layer (S=3 of T=12: 3, 7, 11)."""
    return [math.ceil((j + 1) * teacher_layers / student_layers) - 1 for j in range(student_layers)]
