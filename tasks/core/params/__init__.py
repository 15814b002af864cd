"""The schema of ``params.yaml``, validated before any stage does work.

Every knob of the pipeline lives in ``params.yaml``; this package turns it into
typed objects. Unknown keys, unknown objective names, and impossible values
(ratios that do not sum to 1, probabilities outside [0, 1]) raise
:class:`~tasks.core.errors.ParamsError` naming the offending key, at the start of a
stage rather than minutes into it.

The sections' models live in one module each (:mod:`.corpus`, :mod:`.pretraining`,
:mod:`.downstream`, :mod:`.multilingual`, :mod:`.interpretability`); this package
assembles them into :class:`Params`, loads the file with :func:`load_params`, and
exports every section's names, so ``from tasks.core.params import X`` works for all.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import Field, NonNegativeInt, ValidationError, model_validator

from tasks.core.errors import ParamsError
from tasks.core.paths import seeded
from tasks.core.params.base import _Strict
from tasks.core.params.compression import Compression, Distill, IntermediateMatch, Prune, Student
from tasks.core.params.corpus import (Corpus, CorpusInput, HubSource, LocalSource, PackageFile, PackageSource,
                                      Segment, Source, Tokenizer)
from tasks.core.params.execution import EXECUTOR_KINDS, Executor, Shards
from tasks.core.params.downstream import (FAMILY_LOADERS, FAMILY_METRICS, SPLITS, DownstreamTask, Finetune, HubModel,
                                          TaskData, TaskSplit, Training)
from tasks.core.params.interpretability import (ATTENTION_ZONES, Ablation, Attributions, Probe, ProbeSplit,
                                                ScalarMixParams)
from tasks.core.params.multilingual import (MULTILINGUAL_FORMATS, ContinuedPretraining, Mixture, Multilingual,
                                            MultilingualInput, VocabExtension, VocabPruning)
from tasks.core.params.pretraining import (MASKING_SCHEMES, SENTENCE_TASKS, Curves, Distributed, ModelSize, Objective,
                                           Permutation, Pretrain, PretrainingData, Replacement, Rtd,
                                           SimilarWordsSpec, Sweep, resolve_model_preset)

__all__ = [
    "PARAMS_FILE", "Params", "load_params",
    "PackageFile", "PackageSource", "LocalSource", "HubSource", "Source",
    "CorpusInput", "Corpus", "Segment", "Tokenizer",
    "EXECUTOR_KINDS", "Executor", "Shards",
    "MASKING_SCHEMES", "SENTENCE_TASKS", "Replacement", "Permutation", "Rtd", "Objective", "PretrainingData",
    "SimilarWordsSpec",
    "ModelSize", "Pretrain", "Curves", "Distributed",
    "MULTILINGUAL_FORMATS", "MultilingualInput", "Mixture", "VocabExtension", "ContinuedPretraining",
    "VocabPruning", "Multilingual",
    "FAMILY_LOADERS", "FAMILY_METRICS", "SPLITS", "Training", "TaskSplit", "TaskData", "DownstreamTask", "Finetune", "HubModel",
    "Compression", "Distill", "IntermediateMatch", "Prune", "Student",
    "ATTENTION_ZONES", "Ablation", "ProbeSplit", "Probe", "ScalarMixParams", "Attributions",
]

PARAMS_FILE = "params.yaml"


class Params(_Strict):
    """The whole of ``params.yaml``: every knob of the pipeline (the reference: docs/params.md)."""

    seed: NonNegativeInt = Field(description="the run's seed: data splits, held-out masks and what no other seed "
                                             "sets (pretraining and fine-tuning seeds: pretrain.seeds, finetune.seeds)")
    sources: dict[str, Source] = Field(description="name -> every file the pipeline reads (stage acquire), pinned")
    corpus: Corpus
    segment: Segment
    shards: Shards
    executor: Executor
    tokenizer: Tokenizer
    similar_words: SimilarWordsSpec
    objectives: dict[str, Objective] = Field(min_length=1, description="name -> a pretraining objective "
                                                                      "(docs/objectives.md)")
    compare: list[str] = Field(min_length=1, description="objectives to pretrain, fine-tune and compare")
    pretraining_data: PretrainingData
    model_presets: dict[str, ModelSize] = Field(min_length=1, description="encoder sizes that model.preset picks")
    model: ModelSize = Field(description="model_presets[model.preset] with the other keys of model as overrides")
    pretrain: Pretrain
    sweep: Sweep
    curves: Curves
    distributed: Distributed
    tasks: dict[str, DownstreamTask] = Field(min_length=1, description="name -> a downstream task")
    hub_models: dict[str, HubModel] = Field(default_factory=dict, description="name -> a published model "
                                                                              "(stage import_model@<name>)")
    finetune: Finetune
    multilingual: Multilingual
    ablation: Ablation
    probe: Probe
    scalar_mix: ScalarMixParams
    attributions: Attributions
    compression: Compression

    @model_validator(mode="before")
    @classmethod
    def _model_preset(cls, raw):
        return resolve_model_preset(raw)

    @model_validator(mode="after")
    def _references_resolve(self) -> "Params":
        for i, item in enumerate(self.corpus.inputs):
            if item.source not in self.sources:
                raise ValueError(f"corpus.inputs[{i}].source: no source named {item.source!r} in sources")
        for name, task in self.tasks.items():
            if task.data.source not in self.sources:
                raise ValueError(f"tasks.{name}.data.source: no source named {task.data.source!r} in sources")
        for name, model in self.hub_models.items():
            if model.source is not None and model.source not in self.sources:
                raise ValueError(f"hub_models.{name}.source: no source named {model.source!r} in sources")
        if self.tokenizer.vocab != "train" and self.tokenizer.vocab not in self.sources:
            raise ValueError(f"tokenizer.vocab: {self.tokenizer.vocab!r} is neither 'train' nor a source name")
        if self.similar_words.source not in self.sources:
            raise ValueError(f"similar_words.source: no source named {self.similar_words.source!r} in sources")
        if self.pretrain.init_from in self.pretrained_models or self.pretrain.init_from in self.compare:
            raise ValueError(f"pretrain.init_from: {self.pretrain.init_from!r} is pretrained by this run "
                             "(compare x pretrain.seeds), so pretrain would start from its own output; name another "
                             "model")
        for name in self.compare:
            if name not in self.objectives:
                raise ValueError(f"compare: {name!r} is not an objective; objectives: {', '.join(self.objectives)}")
            spec = self.objectives[name]
            if spec.sentence_task and self.pretraining_data.packing == "full_sentences":
                raise ValueError(f"compare: {name!r} has sentence_task {spec.sentence_task}, which "
                                 f"needs rows of one document: set pretraining_data.packing to doc_sentences")
            if spec.rtd and (self.pretrain.init_from or spec.sentence_task):
                raise ValueError(f"compare: {name!r} (ELECTRA) starts from random weights and has no sentence task: "
                                 "unset pretrain.init_from and its sentence_task")
        for name in self.finetune.baselines:
            if name not in self.hub_models:
                raise ValueError(f"finetune.baselines: {name!r} is no hub_models name (the random-init baseline "
                                 "random-<seed> is always fine-tuned)")
        if len(set(self.finetune_models)) != len(self.finetune_models):
            raise ValueError("compare and finetune.baselines must not repeat a name")
        for name in self.finetune.baseline_tasks:
            if name not in self.finetune.tasks:
                raise ValueError(f"finetune.baseline_tasks: {name!r} is not in finetune.tasks")
        for i, item in enumerate(self.multilingual.inputs):
            if item.source is not None and item.source not in self.sources:
                raise ValueError(f"multilingual.inputs[{i}].source: no source named {item.source!r} in sources")
        if self.multilingual.vocab.coverage_vocab not in self.sources:
            raise ValueError(f"multilingual.vocab.coverage_vocab: no source named "
                             f"{self.multilingual.vocab.coverage_vocab!r} in sources")
        if self.multilingual.base_model not in self.pretrained_models:
            raise ValueError(f"multilingual.base_model: {self.multilingual.base_model!r} is not pretrained by this "
                             f"run ({', '.join(self.pretrained_models)})")
        self._check_analyses()
        self._check_compression()
        for name in self.finetune.tasks:
            if name not in self.tasks:
                raise ValueError(f"finetune.tasks: no task named {name!r} in tasks")
        if self.sweep.seed not in self.pretrain.seeds:
            raise ValueError(f"sweep.seed: {self.sweep.seed} is not in pretrain.seeds {self.pretrain.seeds} (the sweep "
                             "trains on that seed's pretraining data)")
        if self.curves.heldout_task not in self.tasks:
            raise ValueError(f"curves.heldout_task: no task named {self.curves.heldout_task!r} in tasks")
        for name in self.curves.tasks:
            if name not in self.finetune.tasks:
                raise ValueError(f"curves.tasks: {name!r} is not in finetune.tasks")
        for where, task, model in [*((f"tasks.{n}", t, None) for n, t in self.tasks.items()),
                                   *((f"hub_models.{n}", t, m) for n, m in self.hub_models.items()
                                     for t in self.tasks.values())]:
            try:
                self.finetune.for_task(task, model)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"{where}.training: {problems}") from None
        # each recipe alone first, so that a bad value is named where it is written; then each combination
        recipes = [*((f"sweep.settings.{s}", {}, v) for s, v in self.sweep.settings.items()),
                   *((f"objectives.{n}.pretrain", spec.pretrain, {}) for n, spec in self.objectives.items()),
                   *((f"sweep.settings.{s} over objectives.{n}.pretrain", spec.pretrain, v)
                     for n, spec in self.objectives.items() for s, v in self.sweep.settings.items())]
        for where, own, setting in recipes:
            try:
                self.pretrain.check_recipe({**own, **setting})
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ValueError(f"{where}: {problems}") from None
        self._check_global_batches()
        return self

    def _check_analyses(self) -> None:
        """The interpretability stages name existing models and tasks of the right family."""
        families = {"ablation.task": (self.ablation.task, {"mrc"}), "probe.ner_task": (self.probe.ner_task, {"ner"}),
                    "attributions.task": (self.attributions.task, {"classification"}),
                    **{f"scalar_mix.tasks: {t}": (t, {"classification", "ner"}) for t in self.scalar_mix.tasks}}
        for where, (name, allowed) in families.items():
            if name not in self.tasks or self.tasks[name].family not in allowed:
                raise ValueError(f"{where}: {name!r} is not a {' or '.join(sorted(allowed))} task of tasks")
        if self.probe.pos_source not in self.sources:
            raise ValueError(f"probe.pos_source: no source named {self.probe.pos_source!r}")
        for block in ("ablation", "probe", "scalar_mix", "attributions"):
            for name in getattr(self, block).models:
                if name not in self.finetune_models and name not in self.hub_models:
                    raise ValueError(f"{block}.models: {name!r} is no model of this run: "
                                     f"{', '.join(self.finetune_models)} or a hub_models name")
        # these two study the models finetune saved (tasks.downstream.finetuned): it must make them
        for block in ("ablation", "attributions"):
            cfg = getattr(self, block)
            if cfg.models and cfg.task not in self.finetune.tasks:
                raise ValueError(f"{block}.task: {cfg.task!r} is not in finetune.tasks, so no model is fine-tuned on it")
            for name in cfg.models:
                if name not in self.finetune_models:
                    raise ValueError(f"{block}.models: {name!r} is not fine-tuned (add it to compare or "
                                     f"finetune.baselines)")
                if name in self.finetune.baselines and cfg.task not in self.finetune.baseline_tasks:
                    raise ValueError(f"{block}.models: {name!r} is not fine-tuned on {cfg.task!r} (add it to "
                                     "finetune.baseline_tasks)")

    def _check_global_batches(self) -> None:
        """Every global batch splits evenly over the DDP processes (and accumulation steps), so that
        a run is refused before it starts, not a traceback per rank after torchrun started them."""
        world = self.distributed.nproc_per_node * self.distributed.nnodes
        for where, cfg in [("pretrain", self.pretrain), *((f"objectives.{n}.pretrain", self.pretrain_for(n))
                                                          for n in self.compare if self.objectives[n].pretrain)]:
            if cfg.batch_size % (world * cfg.accumulation_steps):
                raise ValueError(f"{where}.batch_size {cfg.batch_size} (the global batch) is not a multiple of "
                                 f"{world} processes x {cfg.accumulation_steps} accumulation_steps")
        for name in self.finetune.tasks:
            batch = self.finetune.for_task(self.tasks[name]).batch_size
            if batch % world:
                raise ValueError(f"the training batch_size {batch} of task {name} (the global batch) is not a "
                                 f"multiple of the {world} processes of distributed")

    def _check_compression(self) -> None:
        """Compression names fine-tuned models and tasks."""
        cfg = self.compression
        for name in cfg.tasks:
            if name not in self.finetune.tasks:
                raise ValueError(f"compression.tasks: {name!r} is not in finetune.tasks (nothing is fine-tuned on it)")
        for where, name in [("compression.distill.teacher", cfg.distill.teacher),
                            *(("compression.prune.models", m) for m in cfg.prune.models)]:
            if name not in self.finetune_models:
                raise ValueError(f"{where}: {name!r} is not fine-tuned (compare or finetune.baselines: "
                                 f"{', '.join(self.finetune_models)})")
            missing = [t for t in cfg.tasks if name in self.finetune.baselines and t not in self.finetune.baseline_tasks]
            if missing:
                raise ValueError(f"{where}: {name!r} is not fine-tuned on {', '.join(missing)} (compression.tasks; "
                                 "add them to finetune.baseline_tasks)")

    @property
    def pretrained_models(self) -> list[str]:
        """The models pretrained by this run: ``<objective>-<seed>`` for each compared objective and
        pretraining seed (:func:`tasks.core.paths.seeded`)."""
        return [seeded(o, s) for o in self.compare for s in self.pretrain.seeds]

    @property
    def random_models(self) -> list[str]:
        """The random-init baseline, once per pretraining seed: ``random-<seed>``."""
        return [seeded("random", s) for s in self.pretrain.seeds]

    @property
    def finetune_models(self) -> list[str]:
        """Every fine-tuned model: the pretrained ones, random init, then the hub baselines."""
        return [*self.pretrained_models, *self.random_models, *self.finetune.baselines]

    def task(self, name: str) -> DownstreamTask:
        """The downstream task called ``name``; :class:`ParamsError` if there is none."""
        if name not in self.tasks:
            raise ParamsError(f"unknown task {name!r}; params.yaml declares: {', '.join(self.tasks)}")
        return self.tasks[name]

    def finetune_training(self, model_name: str, task_name: str) -> Training:
        """The knobs ``model_name`` is fine-tuned with on ``task_name``: ``finetune.training``, the
        task's overrides, and a ``hub_models`` entry's own (its published recipe).

        Raises:
            ParamsError: an unknown task.
        """
        return self.finetune.for_task(self.task(task_name), self.hub_models.get(model_name))

    def pretrain_for(self, name: str, setting: dict | None = None) -> Pretrain:
        """The pretraining knobs of objective ``name``: ``pretrain`` with its recipe over them, and a
        sweep ``setting``'s (the chosen one, :mod:`tasks.pretraining.sweep`) over those."""
        return self.pretrain.for_objective(self.objective(name), setting)

    def objective(self, name: str) -> Objective:
        """The objective called ``name``; :class:`ParamsError` if there is none."""
        if name not in self.objectives:
            raise ParamsError(f"unknown objective {name!r}; params.yaml declares: {', '.join(self.objectives)}")
        return self.objectives[name]


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(part) for part in e["loc"] if part not in ("function-after[_known(), str]",))
        msg = e["msg"].removeprefix("Value error, ")
        lines.append(f"  {loc or '(top level)'}: {msg}")
    return "\n".join(lines)


def load_params(path: str | Path = PARAMS_FILE) -> Params:
    """Read and validate ``params.yaml``.

    Raises:
        ParamsError: the file is missing, is not YAML, or fails validation; the
            message lists every offending key.
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ParamsError(f"{path}: parameter file not found") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{path}: not valid YAML: {exc}") from None
    try:
        params = Params.model_validate(raw)
    except ValidationError as exc:
        raise ParamsError(f"{path}: invalid parameters:\n{_format_errors(exc)}") from None
    return params
