"""The classic baselines (tasks.downstream.classic) through each family's ``baseline``, on the test excerpts of
the real packaged data (tests/data), split as stage downstream splits them."""

import numpy as np
import pyarrow as pa
import pytest

from tasks.core.params import DownstreamTask
from tasks.downstream import classic
from tasks.downstream.downstream import prepare_task
from tasks.downstream.families import FAMILIES
from tests.conftest import DATA


def prepared(name: str, family: str, metrics: list[str], data: dict) -> dict[str, pa.Table]:
    spec = DownstreamTask(family=family, metrics=metrics, training={}, data={"malformed": "repair", **data})
    tables, _ = prepare_task.fn(name, spec, DATA, seed=42)
    return tables


@pytest.fixture(scope="module")
def sentiment():
    return prepared("sentiment", "classification", ["accuracy", "macro_f1"], {
        "loader": "polarity_lines", "source": "sentiment", "files": {"positive": "pos.txt", "negative": "neg.txt"},
        "split": {"dev": 0.2, "test": 0.2}})


@pytest.fixture(scope="module")
def msra():
    def read(loader):
        return prepared(f"msra_{loader}", "ner" if loader == "conll" else "mrc",
                        ["f1", "precision", "recall"] if loader == "conll" else ["f1", "em"],
                        {"loader": loader, "source": "msra_ner", "scheme": "bmes", "split": {"dev": 0.2},
                         "files": {"train": "msra_train.txt", "test": "msra_test.txt"}})
    return read("conll"), read("ner_as_mrc")


def majority(tables) -> float:
    train, test = (tables[s].column("label").to_numpy() for s in ("train", "test"))
    return float((test == np.bincount(train).argmax()).mean())


def test_tfidf_logistic_regression_beats_the_majority_class_and_scores_as_a_fine_tune(sentiment):
    family = FAMILIES["classification"]
    fit, scores, rows = family.baseline(sentiment, family.labels(sentiment), ["accuracy", "macro_f1"])
    assert fit.method.startswith("TF-IDF") and len(fit.search) == len(classic.C_GRID)
    assert fit.setting == max(fit.search, key=lambda s: s["dev"])["setting"]  # chosen on dev, the first best
    assert scores["test"]["accuracy"] > majority(sentiment) + 0.1
    # the same rows a fine-tune writes: the per-example outcomes recompute its test score
    outcome = FAMILIES["classification"].counts("accuracy", sentiment["test"], rows)
    assert outcome[:, 0].sum() / outcome[:, 1].sum() == pytest.approx(scores["test"]["accuracy"])


def test_pairs_get_overlap_features_and_beat_the_majority_class():
    import pyarrow.csv as csv

    table = csv.read_csv(DATA / "lcqmc.csv")
    n = table.num_rows
    cut = {"train": (0, n * 6 // 10), "dev": (n * 6 // 10, n * 8 // 10), "test": (n * 8 // 10, n)}
    tables = {s: pa.table({"id": [str(i) for i in range(a, b)], "text_a": table.column("s1")[a:b],
                           "text_b": table.column("s2")[a:b], "label": table.column("label")[a:b].cast(pa.int64())})
              for s, (a, b) in cut.items()}
    assert classic.overlap_features("天气好", "天气好") [:2] == [1.0, 1.0]
    assert classic.overlap_features("abcd", "abxy")[2] == 0.5  # edit distance 2 over 4 characters
    family = FAMILIES["classification"]
    fit, scores, _ = family.baseline(tables, family.labels(tables), ["accuracy"])
    assert fit.method.startswith("overlap features") and scores["test"]["accuracy"] > majority(tables)


def test_crf_finds_msra_entities_and_its_tags_are_bio(msra):
    ner, _ = msra
    family = FAMILIES["ner"]
    fit, scores, rows = family.baseline(ner, family.labels(ner), ["f1", "precision", "recall"])
    assert [s["setting"] for s in fit.search] == list(classic.CRF_GRID)
    # 240 training sentences: half the entities it predicts on test are right, most of dev's found
    assert scores["dev"]["f1"] > 0.4 and scores["test"]["precision"] > 0.3 and scores["test"]["per_type"]
    assert all(len(r["prediction"]) == len(r["tokens"]) for r in rows)
    assert {t for r in rows for t in r["prediction"]} <= set(family.labels(ner))
    outcome = FAMILIES["ner"].counts("f1", ner["test"], rows).sum(0)
    assert 2 * outcome[0] / (outcome[1] + outcome[2]) == pytest.approx(scores["test"]["f1"])


def test_crf_reader_answers_every_question_with_a_span_of_its_context(msra):
    _, mrc = msra
    family = FAMILIES["mrc"]
    fit, scores, answers = family.baseline(mrc, None, ["f1", "em"])
    contexts = dict(zip(mrc["test"].column("id").to_pylist(), mrc["test"].column("context").to_pylist()))
    assert set(answers) == set(contexts) and all(a and a in contexts[i] for i, a in answers.items())
    assert scores["test"]["f1"] > 20 and fit.details["questions"] == 3  # MSRA's three entity types


def test_best_span_falls_back_to_the_most_probable_start():
    class Tagger:  # a tagger whose Viterbi path found nothing
        def tag(self):
            return ["O"] * 4

        def marginal(self, label, i):
            return {"B-A": [0.1, 0.6, 0.1, 0.0], "I-A": [0.0, 0.0, 0.7, 0.2], "O": [0.9, 0.4, 0.3, 0.8]}[label][i]

    assert classic.best_span(Tagger(), 4, "A") == (1, 3)
