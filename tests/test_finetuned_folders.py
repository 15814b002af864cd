"""A fine-tuned model folder as finetune saves it is a Hugging Face model: it loads with transformers alone (the
task's ``AutoModelFor*``; the mean-pooling head from the code saved beside its weights), its pipeline or the
card's documented decode predicts what the family's own evaluation predicts, and its card is a valid card."""

import numpy as np
import pyarrow as pa
import pytest
import torch
from huggingface_hub import ModelCard
from transformers import (AutoModelForQuestionAnswering, AutoModelForSequenceClassification,
                          AutoModelForTokenClassification, BertConfig, BertModel, pipeline)

from tasks.core.errors import SourceError
from tasks.core.model_dir import save_model_folder
from tasks.core.params import Params
from tasks.downstream.families import FAMILIES
from tasks.downstream.finetuned import load_finetuned, save_finetuned
from tasks.downstream.outcomes import mean_counts
from tasks.report.cards import finetuned_card, pretrained_card, usage
from tests.conftest import small_params
from tests.test_mrc import make_tokenizer

TEXT = "中国科学院位于北京哪里有这家酒店的服务很好不错差人名地机构？。"
PARAMS = Params.model_validate(small_params())


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A tiny random BERT and its character tokenizer as a pretrained model folder."""
    folder, tokenizer = tmp_path_factory.mktemp("base"), make_tokenizer(TEXT)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    save_model_folder(BertModel(config), tokenizer, folder)
    return folder, tokenizer


def _finetuned(tmp_path, base, task: str, labels):
    """``task``'s head on the base model, its head weights made large (a new head predicts nearly one class),
    saved as finetune saves a seed's model; returns the family, the recipe and the folder."""
    spec = PARAMS.task(task)
    family, training = FAMILIES[spec.family], PARAMS.finetune.for_task(spec)
    model = family.model(base[0], labels, training).eval()
    torch.manual_seed(3)  # a head whose predictions differ by text (the pooled states share much)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith(("classifier", "qa_outputs")):
                p.normal_(0, 30) if name.endswith("weight") else p.zero_()
    folder = tmp_path / "seed1"
    save_finetuned(model, base[1], folder, "card")
    return family, training, folder, model


def test_a_classification_folder_loads_with_transformers_alone_and_its_pipeline_predicts_the_stages_labels(
        tmp_path, base):
    labels = ["neg", "neu", "pos"]
    family, training, folder, model = _finetuned(tmp_path, base, "sentiment", labels)
    assert (folder / "mean_pool.py").is_file() and (folder / "README.md").read_text() == "card"
    texts = ["这家酒店的服务很好", "不错", "差", "中国科学院位于北京", "哪里有人名", "很好不错", "机构地名", "北京很差"]
    table = pa.table({"id": [str(i) for i in range(8)], "text_a": texts, "text_b": pa.nulls(8, pa.string()),
                      "label": pa.array([0, 1, 2, 0, 1, 2, 0, 1], pa.int64())})
    data = family.encode(table, base[1], training, labels)
    _, rows = family.evaluate(model, data, table, training, labels, ["accuracy"], torch.device("cpu"))
    loaded = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
    assert type(loaded).__name__ == "MeanPoolForSequenceClassification" and loaded.config.id2label[2] == "pos"
    classify = pipeline("text-classification", model=loaded, tokenizer=str(folder))
    assert [p["label"] for p in classify(texts)] == [labels[r["prediction"]] for r in rows]
    assert len({r["prediction"] for r in rows}) > 1  # the check can fail: predictions differ by text
    # and the pipeline's own loader gives the same weights back
    again = load_finetuned(family, training, folder)
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), loaded.state_dict().values()))


def test_an_ner_folder_names_its_labels_and_its_pipeline_tags_as_the_stage_decodes(tmp_path, base):
    labels = ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    family, training, folder, model = _finetuned(tmp_path, base, "msra_ner", labels)
    sentences = ["中国科学院位于北京", "这家酒店很好"]
    table = pa.table({"id": ["a", "b"], "tokens": [list(s) for s in sentences],
                      "tags": [["O"] * len(s) for s in sentences]})
    data = family.encode(table, base[1], training, labels)
    _, rows = family.evaluate(model, data, table, training, labels, ["f1"], torch.device("cpu"))
    loaded = AutoModelForTokenClassification.from_pretrained(folder)
    assert loaded.config.id2label == dict(enumerate(labels))
    tag = pipeline("token-classification", model=loaded, tokenizer=str(folder))
    for sentence, row in zip(sentences, rows):  # the card's way: the characters as words, "O" left out
        tags = {t["start"] // 2: t["entity"] for t in tag([list(sentence)], is_split_into_words=True)[0]}
        assert [tags.get(i, "O") for i in range(len(sentence))] == row["prediction"]
    assert {t for row in rows for t in row["prediction"]} - {"O"}  # the check can fail: entities are tagged


def test_an_mrc_folder_answers_with_the_cards_decode_as_the_stage_does(tmp_path, base):
    family, training, folder, model = _finetuned(tmp_path, base, "msra_mrc", None)
    question, context = "哪里有科学院？", "中国科学院位于北京。"
    table = pa.table({"id": ["q"], "question": [question], "context": [context],
                      "answers": [[{"text": "北京", "start": 7}]]})
    data = family.encode(table, base[1], training, None)
    _, answers = family.evaluate(model, data, table, training, None, ["f1"], torch.device("cpu"))
    code = usage(family, folder, training.model_dump())
    printed = []
    exec(code.replace("print(", "printed.append("), {"printed": printed})  # the card's code, as a user runs it
    assert printed == [answers["q"]] and answers["q"]
    assert AutoModelForQuestionAnswering.from_pretrained(folder).num_parameters() == model.num_parameters()


def test_a_folder_that_is_not_a_finetuned_model_is_refused_by_name(tmp_path, base):
    family, training = FAMILIES["ner"], PARAMS.finetune.for_task(PARAMS.task("msra_ner"))
    with pytest.raises(SourceError, match="no config.json"):
        load_finetuned(family, training, tmp_path / "seed1")
    with pytest.raises(SourceError, match="not a fine-tuned"):  # the base encoder has no head
        load_finetuned(family, training, base[0])


def test_cards_are_hugging_face_cards_with_the_runs_scores_and_intervals():
    family = FAMILIES["classification"]
    counts = {s: mean_counts(np.random.default_rng(s).integers(0, 2, 200).astype(float)) for s in (1, 2)}
    runs = [{"seed": s, "dev": {"accuracy": 0.6}, "test": {"accuracy": float(c[:, 0].mean()),
                                                            "per_type": {"LOC": {"f1": 0.5}}}}  # as NER's
            for s, c in counts.items()]
    text = finetuned_card("mlm-42", "sentiment", family, 1, [1, 2], runs, {"learning_rate": 1e-4}, ["neg", "pos"],
                          counts, "accuracy")
    card = ModelCard(text)
    assert card.data.language == "zh" and card.data.pipeline_tag == "text-classification"
    assert card.data.eval_results[0].metric_value == pytest.approx(runs[0]["test"]["accuracy"] * 100)
    low, high = (float(x) for x in text.split("| accuracy | ")[1].split("[")[1].split("]")[0].split(", "))
    assert low < runs[0]["test"]["accuracy"] * 100 < high and high - low < 20
    summary = {"objective": "mlm", "seed": 42, "steps": 10, "tokens": 1000, "wall_sec": 3.5,
               "gates": [{"name": "mlm_loss", "value": 5.0, "low": 4.9, "high": 5.1, "threshold": 6.0,
                          "above": False, "passed": True}]}
    text = pretrained_card("mlm-42", summary)
    assert ModelCard(text).data.tags == ["zhplm", "mlm"] and "| mlm_loss | 5 [4.9, 5.1] | < 6 | yes |" in text
    assert "wall_sec" not in text and "snapshots/*" in text
