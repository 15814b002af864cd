"""The metrics models (tasks.core.metrics): every committed metrics file parses with its model
and is written back byte for byte; a file that does not match fails with one line naming the
file and the field; the stages' own producers give values the models take; and every flow
writes its metrics through a model (the rule cannot silently regress)."""

import ast
import json
import math
import shutil
import typing
from pathlib import Path

import numpy as np
import pydantic
import pytest

from tasks.core.errors import MetricsError, PipelineError
from tasks.core.io import to_json
from tasks.core.metrics.base import Metrics, read_metrics, Record, write_metrics
from tasks.core.metrics.corpus import CorpusMetrics
from tasks.core.metrics.downstream import DownstreamMetrics, FinetuneMetrics, Malformed, Scores, SeedSummary
from tasks.core.metrics.multilingual import ResampleMetrics
from tasks.core.metrics.pretraining import PretrainMetrics
from tasks.core.metrics.registry import model_for, MODELS
from tasks.core.params import FAMILY_METRICS, Training, load_params
from tests.conftest import ROOT

METRICS = ROOT / "metrics"  # committed: the metrics of a real run
FILES = sorted(METRICS.rglob("*.json"))


def _rel(path: Path) -> str:
    return path.relative_to(METRICS).as_posix()


# --------------------------------------------------------------------------- committed files


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_committed_file_parses_and_is_rewritten_byte_identically(path, tmp_path):
    model, text = model_for(path, METRICS), path.read_text(encoding="utf-8")
    write_metrics(tmp_path / "read.json", read_metrics(path, model))
    assert (tmp_path / "read.json").read_text(encoding="utf-8") == text
    # as a stage writes it: the model built from the values (a dict), then written
    write_metrics(tmp_path / "built.json", model(**json.loads(text)))
    assert (tmp_path / "built.json").read_text(encoding="utf-8") == text == to_json(json.loads(text))


def test_every_kind_of_metrics_file_is_committed_and_has_a_model():
    assert {model_for(p, METRICS) for p in FILES} == set(MODELS.values())
    assert len(MODELS) == 22 and all(issubclass(m, Metrics) and m.file.endswith(".json") for m in MODELS.values())


def _records(annotation) -> set[type]:
    """The metrics record classes an annotation names (``dict[str, list[X]]`` -> ``{X}``)."""
    if isinstance(annotation, type) and issubclass(annotation, Record):
        return {annotation}
    return {r for arg in typing.get_args(annotation) for r in _records(arg)}


def test_every_field_is_described_where_it_carries_a_unit():
    """Seconds, rates, shares, memory, in every block of every file: the model says the unit or scale."""
    todo, seen = list(MODELS.values()), set()
    while todo:
        model = todo.pop()
        seen.add(model)
        for name, info in model.model_fields.items():
            if name.endswith(("_sec", "_mb", "_rate", "_share")):
                assert info.description, f"{model.__name__}.{name}"
            todo += _records(info.annotation) - seen
    assert {"Scores", "FitSummary", "HeldoutMlm", "LanguageSample", "ProbeLayer"} <= {m.__name__ for m in seen}


# --------------------------------------------------------------------------- files that do not match


def _edited(tmp_path: Path, rel: str, edit) -> Path:
    data = json.loads((METRICS / rel).read_text(encoding="utf-8"))
    edit(data)
    out = tmp_path / rel
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data), encoding="utf-8")
    return out


@pytest.mark.parametrize("rel, edit, problem", [
    ("pretrain/mlm-42.json", lambda d: d.pop("wall_sec"), "missing field wall_sec"),
    ("pretrain/mlm-42.json", lambda d: d.update(wall_seconds=1.0), "unknown field wall_seconds"),
    ("pretrain/mlm-42.json", lambda d: d.update(tokens="9517411"), "field tokens: input should be a valid integer"),
    ("pretrain/mlm-42.json", lambda d: d.update(dynamic=0), "field dynamic: input should be a valid boolean"),
    ("pretrain/mlm-42.json", lambda d: d.update(final_loss="4.5"), "field final_loss: input should be a valid number"),
    ("pretrain/mlm-42.json", lambda d: d.update(token_target="word"), "field token_target: input should be 'token', 'position' or 'replaced'"),
    ("segment.json", lambda d: d.update(words=1.5), "field words: input should be a valid integer"),
    ("corpus.json", lambda d: d["dropped"].pop("short_sentences"), "missing field dropped.short_sentences"),
    ("corpus.json", lambda d: d["languages"]["zh"].update(words=3), "unknown field languages.zh.words"),
    ("finetune/mlm-42-msra_ner.json", lambda d: d["runs"][1]["dev"].update(f1="high"),
     "field runs[1].dev.f1: input should be a valid number"),
    ("finetune/mlm-42-msra_ner.json", lambda d: d["runs"][0]["test"].update(f2=0.5), "unknown field runs[0].test.f2"),
    ("finetune/mlm-42-msra_ner.json", lambda d: d["dev"]["f1"].pop("std"), "missing field dev.f1.std"),
    ("ablation/mlm-42.json", lambda d: d["per_head"]["p2p"]["layer_1"]["head_0"].update(em=None),
     "field per_head.p2p.layer_1.head_0.em: input should be a valid number"),
    ("attributions/mlm-42.json", lambda d: d["examples"][2]["tokens"].__setitem__(1, 7),
     "field examples[2].tokens[1]: input should be a valid string, got 7"),
    ("probe/mlm-42.json", lambda d: d.update(pos=[]), "field pos: input should be an object, got []"),
    ("pretraining_data/mlm-42.json", lambda d: d.update(similar_fallback_rate=None),
     "field similar_fallback_rate: input should be a valid number"),  # absent is fine, null is not
])
def test_a_file_that_does_not_match_its_model_names_the_file_and_the_field(tmp_path, rel, edit, problem):
    path = _edited(tmp_path, rel, edit)
    with pytest.raises(MetricsError) as info:
        read_metrics(path, model_for(path, tmp_path))
    message = str(info.value)
    assert isinstance(info.value, PipelineError) and "\n" not in message
    assert message.startswith(f"{path}: {problem}"), message
    assert f"({model_for(path, tmp_path).__name__}" in message


def test_invalid_json_is_one_line_too(tmp_path):
    path = tmp_path / "segment.json"
    path.write_text('{"words": 3,\n', encoding="utf-8")
    with pytest.raises(MetricsError, match=r"segment.json: not valid JSON \(.*line 2.*\) \(SegmentMetrics\)$"):
        read_metrics(path, model_for(path, tmp_path))


def test_the_report_names_a_broken_metrics_file(tmp_path):
    from tasks.report.corpus import corpus_section

    metrics = tmp_path / "metrics"
    shutil.copytree(METRICS, metrics)
    _edited(tmp_path / "x", "tokenize.json", lambda d: d.update(unk_rate="0%")).replace(metrics / "tokenize.json")
    with pytest.raises(MetricsError, match=r"tokenize.json: field unk_rate: input should be a valid number"):
        corpus_section(metrics, ["sentiment"])


# --------------------------------------------------------------------------- writing


def test_write_keeps_given_nulls_and_omits_what_was_not_given(tmp_path):
    values = json.loads((METRICS / "pretrain" / "mlm-42.json").read_text(encoding="utf-8"))
    assert values["sentence_task"] is None and "final_sentence_accuracy" not in values  # a given null, an absent field
    write_metrics(tmp_path / "p.json", PretrainMetrics(**values))
    assert (tmp_path / "p.json").read_text(encoding="utf-8") == to_json(values)  # what write_json wrote
    downstream = DownstreamMetrics(rows={"train": 3, "dev": 1, "test": 1}, malformed=Malformed(
        policy="skip", counts={}, examples=[]))
    assert downstream.to_dict() == {"rows": {"train": 3, "dev": 1, "test": 1},
                                    "malformed": {"policy": "skip", "counts": {}, "examples": []}}


def test_a_value_json_cannot_hold_still_fails_on_write(tmp_path):
    values = json.loads((METRICS / "segment.json").read_text(encoding="utf-8"))
    metrics = model_for(METRICS / "segment.json", METRICS)(**{**values, "mean_word_chars": math.nan})
    with pytest.raises(ValueError, match="Out of range float"):
        write_metrics(tmp_path / "segment.json", metrics)


def test_a_stage_value_the_model_does_not_declare_fails_before_writing():
    values = json.loads((METRICS / "tokenize.json").read_text(encoding="utf-8"))
    with pytest.raises(pydantic.ValidationError, match="tokens_per_word"):
        model_for(METRICS / "tokenize.json", METRICS)(**values, tokens_per_word=1.0)


# --------------------------------------------------------------------------- the stages' own producers


def test_the_producers_values_fit_their_models(tmp_path):
    from tasks.core.io import ParquetStream
    from tasks.corpus.ingest import SCHEMA, build_corpus
    from tasks.core.quality import Issues
    from tasks.downstream import cmrc_metric
    from tasks.downstream.classification import score
    from tasks.downstream.finetune import summarize
    from tasks.downstream.ner import ner_metrics
    from tasks.multilingual.resample import resample

    documents = [["今天天气很好。今天天气很好。", ""], ["今天天气很好。"]]  # a repeated sentence, an empty paragraph
    with ParquetStream(tmp_path / "corpus.parquet", SCHEMA, 10) as out:
        stats = build_corpus([("s", "zh", documents)], set(), 2, out)
    assert CorpusMetrics(**stats.to_dict()).to_dict() == stats.to_dict()
    assert Malformed(**Issues("repair").to_dict()).policy == "repair"
    assert SeedSummary(**summarize([0.5, 0.7])).n == 2
    _, _, languages = resample.fn(["zh", "zh", "bo"], np.array([10, 20, 5]), 0.5, 0.0, 40, 1)
    ResampleMetrics(mixture="m", alpha=0.5, beta=0.0, requested_tokens=40, documents=3, tokens=35, languages=languages)
    ner = ner_metrics([["B-LOC", "I-LOC", "O"]], [["B-LOC", "I-LOC", "B-PER"]])
    scores = Scores(**{m: ner[m] for m in FAMILY_METRICS["ner"]}, per_type=ner["per_type"])
    assert scores["f1"] == scores.f1 and [m for m, _ in scores.items()] == ["f1", "precision", "recall"]
    mrc = cmrc_metric.evaluate({"q": ["北京"]}, {"q": "北京"})
    assert Scores(**{m: mrc[m] for m in FAMILY_METRICS["mrc"]}).em == 100.0
    assert "matthews" in Scores(**score(list(FAMILY_METRICS["classification"]), [0, 1, 1, 0], [0, 1, 0, 0]))


def test_scores_declare_every_metric_a_task_may_name():
    names = {m for metrics in FAMILY_METRICS.values() for m in metrics}
    assert names <= set(Scores.model_fields)


def test_finetune_training_is_params_training():
    """The knobs written into finetune/ablation metrics are params' Training model itself."""
    assert FinetuneMetrics.model_fields["training"].annotation is Training
    params = load_params(ROOT / "params.yaml")
    for name in params.finetune.tasks:
        knobs = params.finetune.for_task(params.task(name)).model_dump()
        assert FinetuneMetrics.model_fields["training"].annotation(**knobs).model_dump() == knobs


# --------------------------------------------------------------------------- every flow writes through a model


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)]


@pytest.mark.parametrize("flow", sorted((ROOT / "flows").glob("*.py")), ids=lambda p: p.name)
def test_every_flow_writes_its_metrics_through_their_model(flow):
    """No bare ``write_json`` of a metrics file: each JSON ``paths.stage_metrics(<kind>, ...)``
    of a flow is written by ``write_metrics(<path>, <the kind's model>(...))``."""
    tree = ast.parse(flow.read_text(encoding="utf-8"))
    bare = [ast.unparse(c.args[0]) for c in _calls(tree, "write_json")]
    assert bare == (["manifest"] if flow.name == "acquire.py" else []), \
        "write metrics with tasks.core.metrics.write_metrics(path, Model(...))"  # the manifest is no metrics file
    assert not [c for name in ("dump", "dumps", "to_json") for c in _calls(tree, name)], "no JSON written by hand"
    kinds = [c.args[0].value for c in _calls(tree, "stage_metrics")
             if not (len(c.args) > 2 and c.args[2].value != ".json")]
    written = [c.args[1].func.id for c in _calls(tree, "write_metrics") if isinstance(c.args[1], ast.Call)]
    assert len(written) == len(_calls(tree, "write_metrics")), "write_metrics takes the model built in the call"
    assert sorted(written) == sorted(MODELS[k].__name__ for k in kinds)


def test_the_report_reads_metrics_only_through_their_models():
    for module in sorted((ROOT / "tasks" / "report").glob("*.py")):
        text = module.read_text(encoding="utf-8")
        # errors and outcomes read predictions; the planner, a study's variance.json and the GPU figures
        if module.name not in ("errors.py", "outcomes.py", "planner.py"):
            assert "read_json" not in text and "json.load" not in text, module.name
    planner = (ROOT / "tasks" / "report" / "planner.py").read_text(encoding="utf-8")
    assert "metrics" not in "".join(line for line in planner.splitlines() if "read_json(" in line)
