"""params.yaml validation: bad names and impossible settings fail at start, clearly."""

import pytest
import yaml

from tasks.core.errors import ParamsError
from tasks.core.params import load_params
from tests.conftest import ROOT


@pytest.fixture
def raw():
    with open("params.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def write(tmp_path, data):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return path


def test_repository_params_are_valid():
    params = load_params()
    assert set(params.objectives) >= {"mlm", "wwm"}
    assert params.tokenizer.vocab == "train" or params.tokenizer.vocab in params.sources
    assert set(params.finetune.tasks) <= set(params.tasks)
    assert set(params.compare) <= set(params.objectives)
    assert params.pretrained_models == [f"{o}-{s}" for o in params.compare for s in params.pretrain.seeds]
    assert params.finetune_models == [*params.pretrained_models, *(f"random-{s}" for s in params.pretrain.seeds),
                                      *params.finetune.baselines]


def test_unknown_masking_scheme(tmp_path, raw):
    raw["objectives"]["bogus"] = {"masking": "spam"}
    with pytest.raises(ParamsError,
                       match=r"objectives.bogus.masking: unknown masking scheme 'spam'; known: mlm, wwm, ngram, span"):
        load_params(write(tmp_path, raw))


def test_unknown_objective_name():
    with pytest.raises(ParamsError, match=r"unknown objective 'perlmx'; params.yaml declares: mlm, wwm, ngram, mac"):
        load_params().objective("perlmx")


def test_replacement_must_sum_to_one(tmp_path, raw):
    raw["objectives"]["mac"]["replacement"] = {"similar": 0.8, "random": 0.2, "keep": 0.1}
    with pytest.raises(ParamsError, match=r"objectives.mac.replacement: mask \+ random \+ similar \+ permute "
                                          r"\+ sound \+ keep must sum to 1, got 1.1"):
        load_params(write(tmp_path, raw))


def test_ngram_probabilities_must_sum_to_one(tmp_path, raw):
    raw["pretraining_data"]["ngram_probabilities"] = [0.4, 0.3, 0.2, 0.2]
    with pytest.raises(ParamsError, match=r"pretraining_data.ngram_probabilities: must be non-negative and sum to 1, "
                                          r"got \[0.4, 0.3, 0.2, 0.2\] \(sum 1.1\)"):
        load_params(write(tmp_path, raw))


@pytest.mark.parametrize("objective, message", [
    ({"masking": "ngram", "replacement": {"permute": 0.5, "mask": 0.4, "keep": 0.1}},
     "permute \\(PerLM\\) predicts positions and cannot be mixed with mask, random, similar or sound"),
    ({"masking": "mlm", "replacement": {"similar": 0.8, "random": 0.1, "keep": 0.1}},
     "replacement.similar \\(Mac\\) replaces whole words one by one: use masking wwm or ngram"),
    ({"masking": "wwm", "sentence_task": "nxp"}, "unknown sentence task 'nxp'; known: nsp, sop"),
    ({"masking": "wwm", "replacement": {"mask": 0.8, "random": 0.1, "keep": 0.1}, "sbo": True},
     "sbo \\(SpanBERT's span boundary objective\\) predicts spans: use masking span"),
    ({"masking": "ngram", "replacement": {"mask": 0.9, "keep": 0.1}, "permutation": {"space": "global"}},
     "permutation: options of PerLM, which needs replacement.permute > 0"),
    ({"masking": "ngram", "replacement": {"permute": 0.9, "keep": 0.1}, "dynamic": True,
      "permutation": {"granularity": "sentence"}}, "granularity sentence needs the sentence starts"),
    ({"masking": "ngram", "replacement": {"permute": 0.9, "keep": 0.1}, "rtd": {}},
     "rtd \\(ELECTRA\\): its generator is an MLM"),
    ({"masking": "mlm", "replacement": {"sound": 0.8, "random": 0.1, "keep": 0.1}, "rtd": {}},
     "rtd \\(ELECTRA\\): its generator is an MLM"),
    ({"masking": "wwm", "replacement": {"mask": 0.85, "keep": 0.15}, "budget": "flops"},
     "budget: Input should be 'tokens' or 'mlm_flops'"),
])
def test_impossible_objectives(tmp_path, raw, objective, message):
    raw["objectives"]["bad"] = objective
    with pytest.raises(ParamsError, match=r"objectives.bad"):
        load_params(write(tmp_path, raw))
    with pytest.raises(ParamsError, match=message):
        load_params(write(tmp_path, raw))


def test_compare_names_objectives(tmp_path, raw):
    raw["compare"] = ["mlm", "macbert"]
    with pytest.raises(ParamsError, match=r"compare: 'macbert' is not an objective; objectives: electra, mac, "):
        load_params(write(tmp_path, raw))


def test_full_sentences_packing_refuses_a_sentence_task(tmp_path, raw):
    raw["pretraining_data"]["packing"] = "full_sentences"
    load_params(write(tmp_path, raw))  # the default compare has no NSP/SOP objective
    raw["compare"] = ["mlm", "wwm_sop"]
    with pytest.raises(ParamsError, match="compare: 'wwm_sop' has sentence_task sop, which needs rows of one document"):
        load_params(write(tmp_path, raw))


def test_typo_in_a_key(tmp_path, raw):
    raw["pretrain"]["learning_rat"] = 1e-3
    with pytest.raises(ParamsError, match="pretrain.learning_rat: Extra inputs are not permitted"):
        load_params(write(tmp_path, raw))


def test_dangling_source(tmp_path, raw):
    raw["corpus"]["inputs"][0]["source"] = "nowhere"
    with pytest.raises(ParamsError, match=r"corpus.inputs\[0\].source: no source named 'nowhere'"):
        load_params(write(tmp_path, raw))


def test_missing_file(tmp_path):
    with pytest.raises(ParamsError, match="parameter file not found"):
        load_params(tmp_path / "none.yaml")


def test_task_training_overrides(tmp_path, raw):
    raw["tasks"]["sentiment"]["training"] = {"pooling": "cls", "epochs": 5}
    params = load_params(write(tmp_path, raw))
    training = params.finetune.for_task(params.task("sentiment"))
    assert (training.pooling, training.epochs, training.learning_rate) == ("cls", 5, raw["finetune"]["training"]["learning_rate"])
    raw["tasks"]["sentiment"]["training"] = {"pooling": "max"}
    with pytest.raises(ParamsError, match=r"tasks.sentiment.training: pooling: Input should be 'mean' or 'cls'"):
        load_params(write(tmp_path, raw))


def test_a_published_models_recipe_overrides_the_task_and_finetune(tmp_path, raw):
    """finetune.training < tasks.<t>.training < hub_models.<m>.training, for that model only."""
    raw["tasks"]["msra_ner"]["training"]["learning_rate"] = 3e-3
    raw["hub_models"]["albert_tiny"]["training"] = {"learning_rate": 1e-4, "epochs": 2}
    raw["tasks"]["msra_ner"]["training"]["epochs"] = 8
    params = load_params(write(tmp_path, raw))
    tiny, own = params.finetune_training("albert_tiny", "msra_ner"), params.finetune_training("mlm-42", "msra_ner")
    assert (tiny.learning_rate, tiny.epochs, tiny.max_seq_length) == (1e-4, 2, 128)
    assert (own.learning_rate, own.epochs) == (3e-3, 8)
    raw["hub_models"]["albert_tiny"]["training"] = {"lr": 1e-4}
    with pytest.raises(ParamsError, match=r"hub_models.albert_tiny: .*unknown knob\(s\) lr"):
        load_params(write(tmp_path, raw))
    raw["hub_models"]["albert_tiny"]["training"] = {"epochs": -1}
    with pytest.raises(ParamsError, match=r"hub_models.albert_tiny.training: epochs: Input should be greater than 0"):
        load_params(write(tmp_path, raw))


# Fields that params.yaml may leave out because absence means "none" or "off" (no hidden
# setting). Every other field with a code default must be written in params.yaml, where
# DVC tracks it per key and `dvc exp run -S` can change it.
ABSENT_MEANS_OFF = {"file", "text_field", "hub_id", "source", "files", "optional", "dynamic", "sentence_task",
                    "mask", "random", "similar", "permute", "sound", "keep", "columns", "glue_task", "labels", "queries",
                    "training", "user_dict", "path", "limit", "dev", "test", "licence",
                    # objective options: absent is plain MLM-style training (no SBO, RTD or pinyin head, a token budget)
                    # and PERT's own PerLM (no limit, local, partial)
                    "sbo", "rtd", "pinyin", "budget", "permutation", "granularity", "space", "targets",
                    # an objective without its own recipe trains with pretrain's knobs
                    "pretrain"}


def _unset_fields(model, where=""):
    from pydantic import BaseModel
    if isinstance(model, BaseModel):
        for name in type(model).model_fields:
            if name not in model.model_fields_set:
                yield f"{where}.{name}"
            yield from _unset_fields(getattr(model, name), f"{where}.{name}")
    elif isinstance(model, dict):
        for key, value in model.items():
            yield from _unset_fields(value, f"{where}.{key}")
    elif isinstance(model, list):
        for i, value in enumerate(model):
            yield from _unset_fields(value, f"{where}[{i}]")


def test_every_result_changing_default_is_written_in_params_yaml():
    params = load_params()
    hidden = [f for f in _unset_fields(params) if f.rsplit(".", 1)[1] not in ABSENT_MEANS_OFF
              and not (f.endswith(".data.scheme") and params.tasks[f.split(".")[2]].family == "classification")]
    assert hidden == []


@pytest.mark.parametrize("edit, message", [
    (lambda raw: raw.update(seed=-1), r"seed: Input should be greater than or equal to 0"),
    (lambda raw: raw["tasks"]["sentiment"]["data"]["limit"].update(train=-5),
     r"tasks.sentiment.data.limit.train: Input should be greater than 0"),
    (lambda raw: raw["tasks"]["msra_ner"]["data"]["limit"].update(test=1),
     r"tasks.msra_ner.data: limit.test: 1 example cannot be scored with an interval"),
    (lambda raw: raw["sweep"].update(seed=7), r"sweep.seed: 7 is not in pretrain.seeds \[42\]"),
    (lambda raw: raw["objectives"]["mlm"].update(pretrain={"momentum": 0.9}),
     r"objectives.mlm.pretrain: Value error, unknown knob\(s\) momentum|objectives.mlm.pretrain: unknown knob"),
    (lambda raw: raw["sweep"].update(settings={"lr_neg": {"learning_rate": -1}}),
     r"sweep.settings.lr_neg: learning_rate: Input should be greater than 0"),
    (lambda raw: raw["tasks"]["sentiment"]["data"].pop("split"),
     r"tasks.sentiment.data: split: the files give no dev or test split; set split.dev"),
    (lambda raw: raw["finetune"]["training"].pop("doc_stride"), r"finetune.training.doc_stride: Field required"),
    (lambda raw: raw["tasks"]["sentiment"].pop("training"), r"tasks.sentiment.training: Field required"),
])
def test_impossible_or_missing_values_name_the_key(tmp_path, raw, edit, message):
    edit(raw)
    with pytest.raises(ParamsError, match=message):
        load_params(write(tmp_path, raw))


def test_readme_cmrc2018_example_is_valid_and_leaves_room_for_context(tmp_path, raw):
    """docs/data.md's own-MRC-data example validates, and its windows fit the pipeline models:
    doc_stride + max_query_length + 3 special tokens < max_seq_length <= the pretrained positions."""
    import re

    block = re.search(r"```yaml\n(sources:\n  cmrc2018:.*?)```", (ROOT / "docs" / "data.md").read_text(), re.S).group(1)
    example = yaml.safe_load(block)
    raw["sources"].update(example["sources"])
    raw["tasks"].update(example["tasks"])
    raw["finetune"].update(example["finetune"])
    raw["compression"].update(example["compression"])
    raw["ablation"].update(example["ablation"])
    params = load_params(write(tmp_path, raw))
    training = params.finetune.for_task(params.task("cmrc2018"))
    assert training.doc_stride + training.max_query_length + 3 < training.max_seq_length
    assert training.max_seq_length <= params.pretraining_data.max_seq_length


@pytest.mark.parametrize("block,key,value,message", [
    ("finetune", "tasks", ["sentiment", "lcqmc", "msra_ner"], "ablation.task: 'msra_mrc' is not in finetune.tasks"),
    ("attributions", "models", ["mlm-42", "mlm"], "attributions.models: 'mlm' is no model of this run"),
    ("attributions", "models", ["mlm-7"], "attributions.models: 'mlm-7' is no model of this run"),
])
def test_the_analyses_of_fine_tuned_models_need_finetune_to_make_them(tmp_path, raw, block, key, value, message):
    """ablation and attributions read back the models finetune saved: a model or task it does
    not fine-tune is refused at load time, not found missing minutes into the stage."""
    raw[block][key] = value
    with pytest.raises(ParamsError, match=message):
        load_params(write(tmp_path, raw))


def test_electra_starts_from_random_weights(tmp_path, raw):
    raw["compare"] = ["mlm", "wwm", "electra"]
    load_params(write(tmp_path, raw))
    raw["pretrain"]["init_from"] = "albert_tiny"
    with pytest.raises(ParamsError, match="compare: 'electra' \\(ELECTRA\\) starts from random weights"):
        load_params(write(tmp_path, raw))


def test_a_baseline_is_fine_tuned_on_its_baseline_tasks_only(tmp_path, raw):
    """The reference row's tasks are finetune.baseline_tasks, a subset of finetune.tasks; an analysis of a
    baseline on a task it is not fine-tuned on is refused."""
    raw["finetune"]["baseline_tasks"] = ["sentiment", "squad"]
    with pytest.raises(ParamsError, match=r"finetune.baseline_tasks: 'squad' is not in finetune.tasks"):
        load_params(write(tmp_path, raw))
    raw["finetune"]["baseline_tasks"] = ["sentiment"]
    raw["ablation"]["models"] = ["albert_tiny"]  # ablation.task: msra_mrc
    with pytest.raises(ParamsError, match=r"ablation.models: 'albert_tiny' is not fine-tuned on 'msra_mrc'"):
        load_params(write(tmp_path, raw))


def test_every_knob_is_documented_in_the_schema_and_the_reference_is_generated_from_it(monkeypatch):
    """One place per knob: its meaning is its field's description (a section's, its model's docstring), and
    docs/params.md is generated from them (python -m tasks.core.params.reference)."""
    from tasks.core.params import Params
    from tasks.core.params.reference import _doc, _models, _paths, main

    found = {}
    _paths("", Params, found)
    undocumented = [f"{model.__name__}.{name}" for model in found for name, field in model.model_fields.items()
                    if not field.description and not (len(_models(field.annotation)) == 1
                                                       and _doc(_models(field.annotation)[0]))]
    assert undocumented == []
    monkeypatch.chdir(ROOT)
    assert main(["--check"]) == 0, "docs/params.md is out of date: python -m tasks.core.params.reference"
