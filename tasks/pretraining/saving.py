"""A pretrained model on disk: the Hugging Face model(s) with the tokenizer, the other pretraining heads
beside them, which held-out measure it has, and the snapshots kept at fractions of the budget."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from safetensors.torch import save_file

from tasks.core.io import atomic_outputs, read_json, write_json
from tasks.core.model_dir import save_model_folder

if TYPE_CHECKING:
    from tasks.pretraining.modeling import PretrainingModule

SNAPSHOT_FILE = "snapshot.json"  # beside a snapshot's weights: when it was taken (save_snapshot)
HEADS_FILE = "pretraining_heads.safetensors"  # PerLM / SBO / NSP / SOP heads, not part of the Hugging Face model
HEADS_INFO = "pretraining.json"  # beside the weights: {"heldout": "mlm", a kind's measure, or null}: the measure it has


def save_snapshot(model: PretrainingModule, tokenizer, folder: Path, fraction: float,
                  at: dict) -> None:
    """Keep ``model`` as it is at ``fraction`` of its budget (:func:`save_pretrained`), atomically,
    in ``folder/<fraction>`` (a model folder like the final one) with ``snapshot.json`` (``fraction``,
    ``step``, ``tokens``, ``flops``: :data:`tasks.pretraining.pretrain.Snapshot`); its wall-clock
    ``seconds``, which differ from run to run, go beside it (``<fraction>.timing.json``), out of the
    model folder that DVC hashes."""
    at = dict(at)
    with atomic_outputs(folder / f"{fraction:g}", folder / f"{fraction:g}.timing.json") as (out, timing):
        save_pretrained(model, tokenizer, out)
        write_json(timing, {"seconds": at.pop("seconds")})
        write_json(out / SNAPSHOT_FILE, {"fraction": fraction, **at})


def save_pretrained(model: PretrainingModule, tokenizer, folder: Path) -> None:
    """The Hugging Face model(s) with ``tokenizer`` in ``folder`` (``model.saved()``, by sub-folder: ELECTRA's
    discriminator, and its generator in a sub-folder), the model's other heads (if any)
    beside them in :data:`HEADS_FILE`, and which held-out measure it has (:mod:`tasks.pretraining.heldout`)
    in :data:`HEADS_INFO`."""
    for sub, hf in model.saved().items():
        save_model_folder(hf, tokenizer, folder / sub)
    write_json(folder / HEADS_INFO, {"heldout": model.heldout})
    if heads := model.extra_heads():
        save_file({k: v.contiguous() for k, v in heads.items()}, folder / HEADS_FILE)


def save_run(model: PretrainingModule, tokenizer, out: Path, snapshots: Path,
             fractions: list[float]) -> list[dict]:
    """The finished run in ``out`` (a model folder, :func:`save_pretrained`) with its snapshots (kept in
    ``snapshots`` by :func:`save_snapshot`) copied into ``out/snapshots`` without their timing. Returns
    each snapshot's record with its ``seconds`` (:class:`tasks.core.metrics.pretraining.PretrainMetrics`)."""
    save_pretrained(model, tokenizer, out)
    if fractions:
        shutil.copytree(snapshots, out / "snapshots", ignore=shutil.ignore_patterns("*.timing.json"))
    return [{**read_json(snapshots / f"{f:g}" / SNAPSHOT_FILE), **read_json(snapshots / f"{f:g}.timing.json")}
            for f in fractions]
