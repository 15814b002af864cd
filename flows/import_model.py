"""Stage ``import_model@<name>``: bring a pretrained Hugging Face model into ``models/<name>``
so it is fine-tuned and reported like the pipeline's own models.

The model is a folder inside an acquired source (``source`` + ``path``), a local
folder (``path``), or a hub id (``hub_id``; needs ``HF_HUB_OFFLINE=0``). It is
loaded with :mod:`tasks.core.model_dir` (``AutoModel``/``AutoTokenizer``, checked) and saved
again, so a broken or incomplete model (no tokenizer files, truncated weights) fails here,
with the model's name, not in every fine-tuning run. A model pretrained on traditional
characters (``script: traditional``) reads simplified text through its traditional
characters' embeddings (:func:`tasks.core.script.read_simplified`).
"""

import sys
from pathlib import Path

import torch
from prefect import flow

from tasks.core import paths
from tasks.core.errors import SourceError
from tasks.core.io import atomic_outputs
from tasks.core.model_dir import load_model, load_tokenizer, save_model_folder
from tasks.core.params import load_params
from tasks.core.script import read_simplified
from tasks.core.stage import run_stage


@flow(name="import_model")
def import_model(name: str) -> None:
    params = load_params()
    spec = params.hub_models.get(name)
    if spec is None:
        raise SourceError(f"no model {name!r} in hub_models ({', '.join(params.hub_models) or 'none declared'})")
    location = spec.hub_id or str(paths.RAW / spec.source / spec.path if spec.source else Path(spec.path))
    # Weights missing from a checkpoint (often the pooler) are initialised at random: seed
    # them so that the imported model, like every other artifact, is byte-identical per seed.
    torch.manual_seed(params.seed)
    if not spec.hub_id and not Path(location).is_dir():
        raise SourceError(f"hub_models.{name}: no model folder {location}")
    try:
        tokenizer = load_tokenizer(location)
        model = load_model(location)
    except SourceError as exc:
        raise SourceError(f"hub_models.{name}: {exc}") from None
    if spec.script == "traditional":
        print(f"{name}: {read_simplified(model, tokenizer)} simplified characters read as their traditional forms")
    with atomic_outputs(paths.MODELS / name) as (out,):
        save_model_folder(model, tokenizer, out)


if __name__ == "__main__":
    run_stage(import_model, *sys.argv[1:])
