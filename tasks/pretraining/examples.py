"""Pretraining examples as training reads them: memory-mapped shard rows, batched and padded,
masked at batch time under dynamic masking, and split into each rank's micro-batches.

Shard columns: :mod:`tasks.pretraining.pretraining_data`; the loop that reads them:
:mod:`tasks.pretraining.pretrain`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from tasks.core.errors import SourceError
from tasks.core.rng import named_rng
from tasks.corpus.similar_words import SimilarWords
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.selection import prediction_budget
from tasks.training.batching import RaggedTake, pad_batch, ragged
from tasks.training.distributed import Ranks, split_batch


@dataclass
class DynamicMasker:
    """Masks a batch when it is drawn (dynamic masking, RoBERTa §4.1) with
    :func:`tasks.pretraining.masking.mask_batch`, the function that writes static data.

    The generator of step ``s`` is seeded by ``(seed, objective, s)``, so a
    resumed run draws the same masks as an uninterrupted one.
    """

    config: MaskingConfig
    seed: int
    objective: str
    mask_token_id: int
    random_token_ids: np.ndarray
    similar: SimilarWords | None = None

    def __call__(self, input_ids: np.ndarray, word_ids: np.ndarray, lex_ids: np.ndarray | None, step: int):
        rng = named_rng(self.seed, self.objective, step)
        return mask_batch(input_ids, word_ids, self.config, rng, mask_token_id=self.mask_token_id,
                          random_token_ids=self.random_token_ids, lex_ids=lex_ids, similar=self.similar)


@dataclass
class PretrainingExamples:
    """Pretraining examples in flat Arrow layout, chunked (see :mod:`tasks.training.batching` and the
    shard columns in :mod:`tasks.pretraining.pretraining_data`): static (positions and labels stored)
    or dynamic (word ids stored, masked by ``masker`` at batch time).

    Out of core, after Megatron-LM's memory-mapped indexed datasets: each ragged field is a
    list with one flat array per chunk (one per shard of
    :func:`tasks.pretraining.pretraining_data.read_shards`: views of the memory-mapped
    files, nothing copied; a single array is one chunk). Example ``i`` is row
    ``i - chunk_starts[c]`` of chunk ``c``, the last with ``chunk_starts[c] <= i``;
    :meth:`batch` reads only its examples' values. Memory holds the ``[N]`` per-example
    arrays (``lengths``, ``segment_b``, ``sentence_labels``: 4 to 9 bytes an example) and
    the pages that batches touch (file-backed: the kernel drops them under pressure).

    Attributes:
        ids: per chunk ``c``, ``int32 [T_c]`` token ids ([CLS] ... [SEP], corrupted when static).
        id_offsets: per chunk, ``int [N_c + 1]``: example ``r`` is ``ids[c][id_offsets[c][r]:id_offsets[c][r + 1]]``.
        positions, labels: static, per chunk, ``int32 [M_c]`` positions to predict and their labels,
            with offsets ``label_offsets`` (``int [N_c + 1]``).
        word_ids, lex_ids: dynamic, per chunk, ``int32 [T_c]`` word index and lexicon entry per
            token (-1 for specials), with the offsets ``id_offsets``.
        segment_b: ``int32 [N]`` first position of segment B; sentence_labels: ``int8 [N]``
            NSP/SOP labels (both None without a sentence task).
        masker: the batch-time masker of dynamic data (None: static).
        lengths: ``int32 [N]`` tokens per example (derived); chunk_starts: ``int64 [C + 1]``
            first example of each chunk, then ``N`` (derived).
    """

    ids: list[np.ndarray]
    id_offsets: list[np.ndarray]
    positions: list[np.ndarray] | None = None
    labels: list[np.ndarray] | None = None
    label_offsets: list[np.ndarray] | None = None
    word_ids: list[np.ndarray] | None = None
    lex_ids: list[np.ndarray] | None = None
    segment_b: np.ndarray | None = None
    sentence_labels: np.ndarray | None = None
    masker: DynamicMasker | None = None

    def __post_init__(self) -> None:
        for name in ("ids", "id_offsets", "positions", "labels", "label_offsets", "word_ids", "lex_ids"):
            if isinstance(getattr(self, name), np.ndarray):  # one flat array (e.g. built in memory) is one chunk
                setattr(self, name, [getattr(self, name)])
        counts = [len(o) - 1 for o in self.id_offsets]
        self.chunk_starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self.lengths = np.concatenate([np.diff(o) for o in self.id_offsets]) if counts else np.zeros(0, np.int32)

    @classmethod
    def from_table(cls, table: pa.Table, masker: DynamicMasker | None = None) -> "PretrainingExamples":
        """The examples of a table of shard rows, one chunk per record batch, zero-copy (so
        memory-mapped when ``table`` comes from :func:`tasks.pretraining.pretraining_data.read_shards`).

        Raises: SourceError: static shards given a masker, or dynamic shards without one.
        """
        columns = set(table.column_names)
        if ("word_ids" in columns) != (masker is not None):
            raise SourceError("pretraining data and objective disagree on dynamic masking: rerun pretraining_data")
        batches = table.to_batches()  # the columns cut into the same chunks, zero-copy

        def chunks(name: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
            pairs = [ragged(b.column(name)) for b in batches]
            return [v for v, _ in pairs], [o for _, o in pairs]

        ids, id_offsets = chunks("input_ids")
        fields = {}
        if masker is None:
            fields["positions"], fields["label_offsets"] = chunks("masked_positions")
            fields["labels"] = chunks("masked_labels")[0]
        else:  # word (and lexicon) ids have one value per token: the offsets of input_ids
            fields["word_ids"] = chunks("word_ids")[0]
            if "lex_ids" in columns:
                fields["lex_ids"] = chunks("lex_ids")[0]
        if "sentence_label" in columns:
            fields["segment_b"] = table.column("segment_b").to_numpy()
            fields["sentence_labels"] = table.column("sentence_label").to_numpy()
        return cls(ids, id_offsets, masker=masker, **fields)

    def __len__(self) -> int:
        return int(self.chunk_starts[-1])

    @property
    def predictions(self) -> np.ndarray:
        """``int64 [N]`` token predictions per example: the stored ones (static), or the budget the
        masker draws them for (dynamic: :func:`tasks.pretraining.selection.prediction_budget`)."""
        if self.masker is None:
            return np.concatenate([np.diff(o) for o in self.label_offsets]).astype(np.int64)
        maskable = []
        for words, offsets in zip(self.word_ids, self.id_offsets):
            words_before = np.concatenate([[0], np.cumsum(words >= 0)])
            maskable.append(words_before[offsets[1:]] - words_before[offsets[:-1]])
        config = self.masker.config
        return prediction_budget(np.concatenate(maskable), config.masked_lm_prob, config.max_predictions)

    def batch(self, index: np.ndarray, step: int = 0) -> dict[str, torch.Tensor]:
        """Padded tensors for the examples ``index`` (``int [B]``) at training step ``step``.

        Returns:
            ``input_ids``, ``attention_mask``, ``token_type_ids``: ``int64 [B, Lmax]``;
            ``rows``, ``cols``, ``labels``: ``int64 [M]`` for the ``M`` predicted
            tokens of the batch; ``sentence_labels``: ``int64 [B]`` with NSP/SOP.
        Raises:
            IndexError: an index outside ``[0, N)``.
        """
        index = np.asarray(index)
        if len(index) and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"example index outside [0, {len(self)}): {index.tolist()}")
        chunk = np.searchsorted(self.chunk_starts, index, side="right") - 1
        row, local = index - self.chunk_starts[chunk], np.arange(len(index))
        # one gather index per offsets list, shared by every column that has those offsets
        tokens = RaggedTake(self.id_offsets, chunk, row)
        ids, valid = pad_batch(tokens(self.ids), tokens.offsets, local)
        if self.masker is None:
            predicted = RaggedTake(self.label_offsets, chunk, row)
            cols, labels = predicted(self.positions), predicted(self.labels)
            rows = np.repeat(local, np.diff(predicted.offsets))
        else:
            words = pad_batch(tokens(self.word_ids), tokens.offsets, local, pad_value=-1)[0]
            lex = (pad_batch(tokens(self.lex_ids), tokens.offsets, local, pad_value=-1)[0]
                   if self.lex_ids is not None else None)
            masked = self.masker(ids, words, lex, step)
            rows, cols = np.nonzero(masked.chosen)
            ids, labels = masked.input_ids, masked.labels[rows, cols]
        out = {"input_ids": ids, "attention_mask": valid, "rows": rows, "cols": cols, "labels": labels,
               "token_type_ids": np.zeros_like(ids)}
        if self.sentence_labels is not None:
            b = self.segment_b[index]
            out["token_type_ids"] = valid & (np.arange(ids.shape[1])[None, :] >= b[:, None])
            out["sentence_labels"] = self.sentence_labels[index]
        return {k: torch.from_numpy(np.asarray(v).astype(np.int64)) for k, v in out.items()}


def micro_batches(data: PretrainingExamples, index: np.ndarray, step: int, ranks: Ranks,
                  accumulation_steps: int) -> list[dict[str, torch.Tensor]]:
    """This rank's micro-batches of the global batch ``index`` (:func:`tasks.training.distributed.split_batch`).

    Static data: each rank gathers only its own rows. Dynamic masking draws the masks of the
    whole global batch (the same draws as one process) and keeps this rank's rows.

    Raises:
        ParamsError: the global batch does not split over processes and accumulation steps.
    """
    mine = split_batch(index, ranks, accumulation_steps, "pretrain.batch_size")
    if data.masker is None:
        return [data.batch(part, step) for part in mine]
    full, size = data.batch(index, step), len(mine[0])
    first = ranks.rank * accumulation_steps * size
    return [_rows(full, first + m * size, first + (m + 1) * size) for m in range(accumulation_steps)]


def _rows(batch: dict[str, torch.Tensor], lo: int, hi: int) -> dict[str, torch.Tensor]:
    """Rows ``lo:hi`` of a batch of :meth:`PretrainingExamples.batch`, padding trimmed."""
    keep = (batch["rows"] >= lo) & (batch["rows"] < hi)
    width = int(batch["attention_mask"][lo:hi].sum(1).max())
    out = {k: batch[k][lo:hi, :width] for k in ("input_ids", "attention_mask", "token_type_ids")}
    out.update(rows=batch["rows"][keep] - lo, cols=batch["cols"][keep], labels=batch["labels"][keep])
    for key in ("sentence_labels", "groups"):  # [B]: one per row (groups: fast MLM's languages)
        if key in batch:
            out[key] = batch[key][lo:hi]
    return out
