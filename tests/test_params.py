"""params.yaml validation: bad names and impossible settings fail at start, clearly."""

import pytest
import yaml

from tasks.core.errors import ParamsError
from tasks.core.params import load_params


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
    assert params.finetune_models == [*params.compare, *params.finetune.baselines]


def test_unknown_masking_scheme(tmp_path, raw):
    raw["objectives"]["bogus"] = {"masking": "span"}
    with pytest.raises(ParamsError, match=r"objectives.bogus.masking: unknown masking scheme 'span'; known: mlm, wwm, ngram"):
        load_params(write(tmp_path, raw))


def test_unknown_objective_name():
    with pytest.raises(ParamsError, match=r"unknown objective 'perlmx'; params.yaml declares: mlm, wwm, ngram, mac"):
        load_params().objective("perlmx")


def test_replacement_must_sum_to_one(tmp_path, raw):
    raw["objectives"]["mac"]["replacement"] = {"similar": 0.8, "random": 0.2, "keep": 0.1}
    with pytest.raises(ParamsError, match=r"objectives.mac.replacement: mask \+ random \+ similar \+ permute \+ keep "
                                          r"must sum to 1, got 1.1"):
        load_params(write(tmp_path, raw))


def test_ngram_probabilities_must_sum_to_one(tmp_path, raw):
    raw["pretraining_data"]["ngram_probabilities"] = [0.4, 0.3, 0.2, 0.2]
    with pytest.raises(ParamsError, match=r"pretraining_data.ngram_probabilities: must be non-negative and sum to 1, "
                                          r"got \[0.4, 0.3, 0.2, 0.2\] \(sum 1.1\)"):
        load_params(write(tmp_path, raw))


@pytest.mark.parametrize("objective, message", [
    ({"masking": "ngram", "replacement": {"permute": 0.5, "mask": 0.4, "keep": 0.1}},
     "permute \\(PerLM\\) predicts positions and cannot be mixed with mask, random or similar"),
    ({"masking": "mlm", "replacement": {"similar": 0.8, "random": 0.1, "keep": 0.1}},
     "replacement.similar \\(Mac\\) replaces whole words: use masking wwm or ngram"),
    ({"masking": "wwm", "sentence_task": "nxp"}, "unknown sentence task 'nxp'; known: nsp, sop"),
])
def test_impossible_objectives(tmp_path, raw, objective, message):
    raw["objectives"]["bad"] = objective
    with pytest.raises(ParamsError, match=r"objectives.bad"):
        load_params(write(tmp_path, raw))
    with pytest.raises(ParamsError, match=message):
        load_params(write(tmp_path, raw))


def test_compare_names_objectives(tmp_path, raw):
    raw["compare"] = ["mlm", "macbert"]
    with pytest.raises(ParamsError, match=r"compare: 'macbert' is not an objective; objectives: mac, "):
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
    assert (training.pooling, training.epochs, training.learning_rate) == ("cls", 5, raw["finetune"]["learning_rate"])
    raw["tasks"]["sentiment"]["training"] = {"pooling": "max"}
    with pytest.raises(ParamsError, match=r"tasks.sentiment.training: pooling: Input should be 'mean' or 'cls'"):
        load_params(write(tmp_path, raw))
