"""Artifact paths, relative to the project root (the same paths ``dvc.yaml`` declares).

``corpora/``, ``data/`` and ``models/`` hold DVC-cached artifacts (git-ignored);
``metrics/`` holds small JSON/CSV files that git tracks so that
``dvc metrics diff`` and ``dvc plots diff`` work between commits.
"""

from pathlib import Path

from tasks.core.errors import SourceError

RAW = Path("corpora/raw")
MANIFEST = Path("corpora/manifest.json")

DOWNSTREAM = Path("data/downstream")
EVAL_TEXTS = Path("data/eval_texts")  # <task>.parquet: its dev and test text, kept out of pretraining (not beside
# the splits, so that `datasets` reads a task's folder as is: load_dataset("parquet", data_dir=...))
CORPUS = Path("data/corpus/sentences.parquet")
SEGMENTED = Path("data/segmented/sentences.parquet")
TOKENS = Path("data/tokens/sentences.parquet")
TOKENIZER = Path("models/tokenizer")
LEXICON = Path("data/similar_words/lexicon.parquet")
PRETRAINING = Path("data/pretraining")
RECIPES = Path("data/recipes")            # sweep@<objective>: <objective>.json, the setting pretrain trains with
MULTILINGUAL = Path("data/multilingual/documents.parquet")
MULTILINGUAL_TOKENIZER = Path("models/tokenizer_multilingual")
MIXTURES = Path("data/mixtures")          # resample@<mixture>: <mixture>.parquet
CONTINUED = Path("models/continued")      # continue_pretrain@<mixture>: <mixture>/
VOCAB_PRUNED = Path("models/pruned")      # prune_vocab: the continued model cut to some languages
MODELS = Path("models")
PREDICTIONS = Path("results/finetune")
PRUNED = Path("results/prune")            # prune@<model>-<task>: <model>-<task>/<variant>/ (save_pruned)
ATTRIBUTIONS = Path("results/attributions")  # attributions@<model>: <model>/attributions.html

METRICS = Path("metrics")
CHECKPOINTS = Path("checkpoints")
REPORTS = Path("reports")


def seeded(procedure: str, seed: int) -> str:
    """The name of what ``procedure`` (an objective, or ``random``) made with pretraining seed
    ``seed``: ``mlm-42``, the folder ``models/mlm-42`` and the item of ``pretrain@mlm-42``."""
    return f"{procedure}-{seed}"


def procedure_of(model: str) -> tuple[str, int | None]:
    """``("mlm", 42)`` for ``mlm-42``; ``(model, None)`` for a model without a seed (a hub model)."""
    head, _, tail = model.rpartition("-")
    return (head, int(tail)) if head and tail.isdigit() else (model, None)


def model_dir(model: str) -> Path:
    """The folder of a model name: ``models/<name>``, or for a snapshot ``<name>@<fraction>`` (the
    model at that fraction of its pretraining budget) ``models/<name>/snapshots/<fraction>``."""
    name, _, fraction = model.partition("@")
    return MODELS / name / "snapshots" / fraction if fraction else MODELS / name


def downstream_split(task: str, split: str) -> Path:
    return DOWNSTREAM / task / f"{split}.parquet"


def eval_texts(task: str) -> Path:
    """``data/eval_texts/<task>.parquet``: the task's dev and test text (columns ``text``, ``split``)."""
    return EVAL_TEXTS / f"{task}.parquet"


def finetune_name(model: str, task: str) -> str:
    """The DVC matrix item of a fine-tuning run (``finetune@<model>-<task>``)."""
    return f"{model}-{task}"


def stage_metrics(stage: str, name: str | None = None, suffix: str = ".json") -> Path:
    """``metrics/<stage>.json`` or, for a per-item stage, ``metrics/<stage>/<name>.json``."""
    return METRICS / (f"{stage}{suffix}" if name is None else f"{stage}/{name}{suffix}")


def source_file(raw_dir: Path, source: str, file: str | None = None) -> Path:
    """Path of an acquired file; ``file`` may be omitted when the source has one file.

    Raises:
        SourceError: the source was not acquired or the file is ambiguous/missing.
    """
    folder = Path(raw_dir) / source
    if not folder.is_dir():
        raise SourceError(f"source {source!r}: not found under {raw_dir} (run the acquire stage, "
                          f"or see 'missing' in {Path(raw_dir).parent / 'manifest.json'})")
    if file is None:
        files = sorted(p for p in folder.iterdir() if p.is_file())
        if len(files) != 1:
            raise SourceError(f"source {source!r} has {len(files)} files; name one with 'file:'")
        return files[0]
    path = folder / file
    if not path.is_file():
        raise SourceError(f"source {source!r}: file {file!r} is missing from {folder}")
    return path
