"""The fine-tuned task model an analysis looks at: the one stage finetune saved, when it did.

Reuse, not redo: ablation and attributions study ``finetune``'s first seed. When finetune
fine-tunes that model on that task, its saved model is read back (its training summary stays
in finetune's metrics, which these stages therefore do not depend on: those carry timings,
which change whenever finetune reruns); otherwise the analysis fine-tunes it the same way
(same knobs, same seed).
"""

from __future__ import annotations

import torch

from tasks.core import paths
from tasks.downstream.finetune import Batches, fine_tune, load_finetuned, model_file


def analysed_model(params, model_name: str, task_name: str, family, labels, train: Batches, training,
                   device: torch.device) -> tuple[torch.nn.Module, dict | None]:
    """``model_name`` fine-tuned on ``task_name`` under finetune's first seed.

    Read back from ``results/finetune/<model>-<task>/model-seed<k>.safetensors`` when
    finetune covers this model (``compare`` or ``finetune.baselines``) and task
    (``finetune.tasks``); otherwise fine-tuned here on ``train``. Decided by params, not by
    which files exist, so a model left over from another ``compare`` is never picked up.

    Returns:
        ``(model, training summary)``: :func:`tasks.downstream.finetune.fit_seed`'s summary when
        trained here, None when read back (it is in ``metrics/finetune/<model>-<task>.json``).
    Raises:
        SourceError: the saved model is missing or does not fit.
    """
    model_dir, seed = paths.MODELS / model_name, params.finetune.seeds[0]
    if model_name not in params.finetune_models or task_name not in params.finetune.tasks:
        return fine_tune(family, model_dir, labels, train, training, seed, device)
    name = paths.finetune_name(model_name, task_name)
    model = load_finetuned(family, model_dir, labels, training, model_file(paths.PREDICTIONS / name, seed))
    return model.to(device), None
