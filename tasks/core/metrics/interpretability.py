"""Metrics of the interpretability stages: attention-zone ablation, layer probes, the
feature-based scalar mix, and Integrated Gradients attributions."""

from __future__ import annotations

from tasks.core.metrics.base import Metrics, Record, absent
from tasks.core.metrics.downstream import Family, FitSummary, Scores
from tasks.core.params.downstream import Training


class AblationEvaluation(Record):
    evaluations: int
    """Evaluations of the split (baseline, every zone in all layers, in each layer, in each head)."""
    wall_sec: float
    """Wall-clock seconds of all of them (2 decimals)."""
    features: int
    """Windows of the evaluated split."""


class AblationMetrics(Metrics):
    """Stage ``ablation@<model>``: official CMRC 2018 EM/F1 (percentages) with each attention
    zone blocked. Zone keys are those of :data:`tasks.core.params.interpretability.ATTENTION_ZONES`; layers
    and heads are keyed ``layer_<k>`` and ``head_<h>`` (from 0)."""

    file = "ablation/<model>.json"
    model: str
    task: str
    split: str
    seed: int
    """The fine-tuning seed (``finetune``'s first)."""
    layers: int
    heads: int
    training: Training
    baseline: Scores
    all_layers: dict[str, Scores]
    """Zone -> scores with it blocked in every layer."""
    per_layer: dict[str, dict[str, Scores]]
    """Zone -> layer -> scores with it blocked in that layer only."""
    per_head: dict[str, dict[str, dict[str, Scores]]]
    """Zone (``ablation.per_head_zones``) -> layer -> head -> scores with it blocked in that head only."""
    evaluation: AblationEvaluation


class ProbeLayer(Record):
    layer: int
    """0 = embeddings."""
    accuracy: float
    """Tag accuracy (0-1) on the test words."""
    entity_f1: float = absent()
    """NER probe only: entity-level F1 (seqeval, 0-1) of the probe's tags."""


class Probe(Record):
    labels: int
    """Distinct tags."""
    train_words: int
    test_words: int
    majority_baseline: float
    """Accuracy (0-1) of always predicting the most frequent training tag."""
    layers: list[ProbeLayer]


class ProbeMetrics(Metrics):
    """Stage ``probe@<model>``: linear probes per layer for POS and NER tags."""

    file = "probe/<model>.json"
    model: str
    pos_source: str
    """``<source>/<file>`` of the gold POS tags."""
    ner_task: str
    pos: Probe
    ner: Probe
    wall_sec: float
    """Wall-clock seconds of both probes (2 decimals)."""


class ScalarMixMetrics(Metrics):
    """Stage ``scalar_mix@<model>-<task>``: the feature-based approach, the encoder frozen and a
    head on the scalar mix of its layers."""

    file = "scalar_mix/<model>-<task>.json"
    model: str
    task: str
    learning_rate: float
    """Peak learning rate of the mix and the head (``scalar_mix.learning_rate``; the encoder is frozen)."""
    family: Family
    headline: str
    seed: int
    train: FitSummary
    layer_weights: list[float]
    """The softmax-normalised weights s_j, layer 0 (embeddings) first."""
    gamma: float
    """The learnt scale γ."""
    dev: Scores
    test: Scores


class AttributedExample(Record):
    id: str
    label: str
    prediction: str
    probability: float
    """Probability (0-1) of the predicted class."""
    tokens: list[str]
    attributions: list[float]
    """Per token: Integrated Gradients towards the predicted class, in logit units (5 decimals)."""
    convergence_delta: float
    """Sum of attributions minus the logit gap to the baseline input (completeness error)."""


class AttributionsMetrics(Metrics):
    """Stage ``attributions@<model>``: the explained dev examples (attention maps are in the HTML page)."""

    file = "attributions/<model>.json"
    model: str
    task: str
    steps: int
    """Integrated Gradients steps."""
    attention_maps_of: int
    """Index in ``examples`` of the example whose attention maps the page shows."""
    examples: list[AttributedExample]
