"""The metrics files (``metrics/``), one typed model per kind of file: the one source of truth
for their keys.

Each model is written by its stage (``write_metrics(path, Model(**values))`` in
``flows/<stage>.py``) and read by the report (``read_metrics(path, Model)``, then attribute
access), so a key renamed on one side fails on the other, not silently in a template.
:mod:`.base` holds the writer and the reader, one module per pipeline section holds its models,
and this package imports none of them: a stage depends on its own models only.
Models are strict: every key declared (extra keys refused), types checked without coercion
(``"3"`` is no number and ``1`` no boolean; an integer passes for a float).
Reading a file that does not match its model raises :class:`tasks.core.errors.MetricsError`,
one line naming the file, the field and the model.

Serialisation: :func:`write_metrics` writes :func:`tasks.core.io.to_json` of the fields
that were *given* (``exclude_unset``; a ``None`` given stays ``null``; floats as Python's
``repr``), so the bytes do not depend on the order fields are declared in (keys are sorted;
the declaration order groups fields for the reader), and a file read and written again is
byte-identical. A field without a default is in every file; one declared ``= absent()`` is
left out by some runs (:mod:`tasks.core.metrics.base`).

Files, their models and the stages that write them (:data:`.registry.MODELS` maps each kind
to its model):

* ``corpus.json``: :class:`CorpusMetrics`, stage ``ingest``
* ``segment.json``: :class:`SegmentMetrics`, stage ``segment``
* ``tokenize.json``: :class:`TokenizeMetrics`, stage ``tokenize``
* ``similar_words.json``: :class:`SimilarWordsMetrics`, stage ``similar_words``
* ``downstream/<task>.json``: :class:`DownstreamMetrics`, stage ``downstream``
* ``pretraining_data/<objective>-<seed>.json``: :class:`PretrainingDataMetrics`, stage ``pretraining_data``
* ``pretrain/<objective>-<seed>.json``: :class:`PretrainMetrics`, stage ``pretrain``
* ``curves/<objective>-<seed>.json``: :class:`CurvesMetrics`, stage ``curves``
* ``baseline/<task>.json``: :class:`BaselineMetrics`, stage ``baseline``
* ``finetune/<model>-<task>.json``: :class:`FinetuneMetrics`, stage ``finetune``
* ``multilingual.json``: :class:`MultilingualMetrics`, stage ``multilingual``
* ``vocab_extension.json``: :class:`VocabExtensionMetrics`, stage ``vocab_extension``
* ``resample/<mixture>.json``: :class:`ResampleMetrics`, stage ``resample``
* ``continue_pretrain/<mixture>.json``: :class:`ContinuePretrainMetrics`, stage ``continue_pretrain``
* ``prune_vocab.json``: :class:`PruneVocabMetrics`, stage ``prune_vocab``
* ``ablation/<model>.json``: :class:`AblationMetrics`, stage ``ablation``
* ``probe/<model>.json``: :class:`ProbeMetrics`, stage ``probe``
* ``scalar_mix/<model>-<task>.json``: :class:`ScalarMixMetrics`, stage ``scalar_mix``
* ``attributions/<model>.json``: :class:`AttributionsMetrics`, stage ``attributions``
* ``distill/<student>-<task>.json``: :class:`DistillMetrics`, stage ``distill``
* ``prune/<model>-<task>.json``: :class:`PruneMetrics`, stage ``prune``

Units are in the fields' descriptions: ``*_sec`` are wall-clock seconds, ``*_per_sec`` rates
per wall-clock second, ``peak_memory_mb`` MiB; rates and shares are fractions (0-1) except
MRC scores, which are percentages (:mod:`tasks.core.metrics.downstream`).
"""
