"""The whole pipeline through ``dvc repro`` on the test excerpts (a shrunk params.yaml):
every stage runs its Prefect flow; a second repro does nothing; the data stages are
byte-identical when forced to rerun; a sampling exponent reruns only what follows resampling;
the Prefect pipeline flow walks the same graph; the compression stages' saved models load.
(Every objective through DVC: ``test_objectives.py``.)"""

import json
import shutil
import sys

import pyarrow.parquet as pq
import pytest
import yaml

from tests.conftest import ROOT, small_params
from tasks.orchestration.progress import planned, ran_stages
from tests.e2e.repo import lock_outs, params_problems, reproduced, run, write_params

pytestmark = pytest.mark.slow

TASKS = ["sentiment", "lcqmc", "msra_mrc", "msra_ner"]  # fine-tuned
DECLARED = list(small_params()["tasks"])  # prepared (downstream@<task>): the fine-tuned ones and sts_b
SECOND = "electra"  # compared with mlm here, so that every stage downstream of pretraining sees an ELECTRA model
# (whole word masking, the default's second objective, runs through DVC in test_objectives.py)
MODELS = ["mlm-42", f"{SECOND}-42", "random-42"]
# Each analysis runs on one model here (the stage's path is the same for every model; the default run
# analyses three), and two snapshots are fine-tuned per objective (three points of a curve: the report's
# rank correlation): 10 stages fewer on this module's critical path.
ANALYSED = {"ablation": "mlm-42", "probe": "random-42", "scalar_mix": f"{SECOND}-42"}
SNAPSHOTS = [0.25, 0.5]
SCALES = [1.0, 2.0]
MIXTURES = ["natural", "resampled"]
DATA_STAGES = ["acquire", *(f"downstream@{t}" for t in DECLARED), "ingest", "segment", "tokenize", "similar_words",
               "pretraining_data@mlm-42", f"pretraining_data@{SECOND}-42", "multilingual", "vocab_extension",
               *(f"resample@{m}" for m in MIXTURES)]
MULTILINGUAL_STAGES = {*(f"continue_pretrain@{m}" for m in MIXTURES), "prune_vocab"}
FINETUNE_STAGES = {*(f"finetune@{o}-42-{t}" for o in ("mlm", SECOND) for t in TASKS),
                   *(f"finetune_random@42-{t}" for t in TASKS),
                   *(f"finetune_snapshot@{o}-42-{f}-sentiment" for o in ("mlm", SECOND) for f in SNAPSHOTS)}
CURVES_STAGES = {"curves@mlm-42", f"curves@{SECOND}-42"}
BASELINE_STAGES = {f"baseline@{t}" for t in TASKS}
ANALYSIS_STAGES = {f"ablation@{ANALYSED['ablation']}", f"probe@{ANALYSED['probe']}",
                   *(f"scalar_mix@{ANALYSED['scalar_mix']}-{t}" for t in ("sentiment", "msra_ner")),
                   f"attributions@{SECOND}-42"}
COMPRESSED = ["sentiment", "msra_ner", "msra_mrc"]  # compression.tasks
COMPRESSION_STAGES = {*(f"distill@l1-{t}" for t in COMPRESSED), *(f"prune@{SECOND}-42-{t}" for t in COMPRESSED)}


@pytest.fixture(scope="module")
def repo(tmp_path_factory, prefect_server):
    """The repository after ``dvc repro`` of the default DAG on the shrunk params, ELECTRA in place of WWM."""
    repo = tmp_path_factory.mktemp("repo")
    params = small_params()
    params["compare"] = ["mlm", SECOND]
    params["attributions"]["models"] = [f"{SECOND}-42"]  # compression and attributions on the ELECTRA model
    params["compression"]["distill"]["teacher"] = f"{SECOND}-42"
    params["compression"]["prune"]["models"] = [f"{SECOND}-42"]
    # every family through the analyses and compression (the default run has one task each)
    params["scalar_mix"]["tasks"] = ["sentiment", "msra_ner"]
    for analysis, model in ANALYSED.items():
        params[analysis]["models"] = [model]
    params["pretrain"]["snapshots"] = SNAPSHOTS
    params["compression"]["tasks"] = COMPRESSED
    params["finetune"]["learning_rate_scales"] = SCALES  # the study's recipe search, at two settings
    with reproduced(repo, params, prefect_server) as (env, out):
        yield repo, env, out


def test_every_stage_runs_and_produces_its_outputs(repo):
    repo, _, out = repo
    assert ran_stages(out) == set(DATA_STAGES) | FINETUNE_STAGES | MULTILINGUAL_STAGES | ANALYSIS_STAGES | \
        COMPRESSION_STAGES | CURVES_STAGES | BASELINE_STAGES | {"code", "sweep@mlm", f"sweep@{SECOND}", "pretrain@mlm-42",
                                               f"pretrain@{SECOND}-42", "init_random@42", "report"}
    for model in MODELS:
        assert (repo / "models" / model / "model.safetensors").is_file()
        assert (repo / "models" / model / "tokenizer.json").is_file()
    headline = {"sentiment": "accuracy", "lcqmc": "accuracy", "msra_mrc": "f1", "msra_ner": "f1"}
    for task, metric in headline.items():
        metrics = json.loads((repo / "metrics" / "finetune" / f"random-42-{task}.json").read_text())
        assert metrics["dev"][metric]["n"] == 2 and 0 <= metrics["dev"][metric]["mean"] <= 100
    curve = json.loads((repo / "metrics" / "curves" / "mlm-42.json").read_text())
    assert [p["fraction"] for p in curve["points"]] == [*SNAPSHOTS, 1.0]
    assert all(p["loss"] > 0 for p in curve["points"]) and (repo / "models" / "mlm-42" / "snapshots" / "0.25").is_dir()
    pretrained = json.loads((repo / "metrics" / "pretrain" / "mlm-42.json").read_text())
    card = (repo / "models" / "mlm-42" / "README.md").read_text()  # its model card, the gates' verdicts in it
    assert card.startswith("---\nlanguage: zh") and all(f"| {g['name']} |" in card for g in pretrained["gates"]
                                                               if g["value"] is not None)
    assert [s["fraction"] for s in pretrained["snapshots"]] == SNAPSHOTS and pretrained["flops"] > 0
    log = (repo / "metrics" / "pretrain" / f"{SECOND}-42.csv").read_text().splitlines()
    assert log[0].startswith("step,tokens,loss") and len(log) > 2
    # ELECTRA: the discriminator loads with AutoModel, the generator beside it; equal FLOPs to mlm within a step
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(repo / "models" / "electra-42").model_type == "electra"
    assert (repo / "models" / "electra-42" / "generator" / "model.safetensors").is_file()
    electra = json.loads((repo / "metrics" / "pretrain" / "electra-42.json").read_text())
    assert electra["token_target"] == "replaced" and electra["budget"] == "mlm_flops"
    assert 0 <= electra["final_rtd_accuracy"] <= 1
    assert abs(electra["flops"] - pretrained["flops"]) < electra["flops"] / electra["steps"]
    curve = json.loads((repo / "metrics" / "curves" / "electra-42.json").read_text())
    assert curve["measure"] == "rtd" and all(p["loss"] is None and p["rtd_loss"] > 0 for p in curve["points"])
    html = (repo / "reports" / "report.html").read_text()
    assert "data:image/png;base64," in html and "http://" not in html and "https://" not in html
    md = (repo / "reports" / "report.md").read_text()
    assert "| pretraining beats random init | BERT (Devlin et al. 2019) | sentiment |" in md
    assert "| pretraining beats the classic baseline |" in md and "**Competence**" in md
    for task, metric in headline.items():  # each task's classic baseline, scored as the fine-tunes are
        classic = json.loads((repo / "metrics" / "baseline" / f"{task}.json").read_text())
        assert classic["test"][metric] > 0 and len(classic["search"]) > 1
        assert (repo / "metrics" / "outcomes" / f"classic-{task}.parquet").is_file()
    run = json.loads((repo / "metrics" / "finetune" / f"mlm-42-sentiment.json").read_text())["runs"][0]["train"]
    assert run["dev_curve"][-1]["step"] == run["steps"] and run["best_step"] in [p["step"] for p in run["dev_curve"]]
    assert "| replaced-token detection beats MLM at equal compute | ELECTRA (Clark et al. 2020, §3.3) | sentiment |" \
        in md
    assert "Spearman's ρ between minus the held-out loss and the fine-tuned test score" in md  # snapshots fine-tuned
    for heading in ("Findings", "Corpus", "Pretraining", "Score for compute", "Objective comparison", "Fine-tuning",
                    "Multilingual", "Interpretability", "Compression", "Run times", "Parameters", "Data versions"):
        assert f"## {heading}" in md
    manifest = json.loads((repo / "corpora" / "manifest.json").read_text())
    assert {e["source"] for e in manifest["files"]} == set(small_params()["sources"])  # the excerpts
    assert all(len(e["sha256"]) == 64 and e["bytes"] > 0 for e in manifest["files"])


def test_datasets_reads_each_tasks_folder_as_is(repo, tmp_path, monkeypatch):
    from datasets import load_dataset

    repo, _, _ = repo
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path))
    for task in ("sentiment", "lcqmc", "msra_mrc", "msra_ner"):
        folder = repo / "data" / "downstream" / task
        loaded = load_dataset("parquet", data_dir=str(folder))
        assert sorted(loaded) == ["test", "train", "validation"], task  # dev.parquet is datasets' validation
        assert loaded["validation"].num_rows == pq.read_metadata(folder / "dev.parquet").num_rows
    assert (repo / "data" / "eval_texts" / "sentiment.parquet").is_file()


def test_each_finetuned_model_loads_with_transformers_alone_and_predicts_the_stages_test_predictions(repo):
    """Every task's fine-tuned model folder, loaded as a user of transformers would (its AutoModelFor* class and
    pipeline, or the card's MRC decode), gives the stage's own test predictions on the test examples that need
    no truncation (the stage keeps a long review's head and tail; the pipeline cuts its end)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from tasks.core.io import read_jsonl
    from tasks.downstream.families import FAMILIES
    from tasks.report.cards import usage

    repo, _, _ = repo
    for task in TASKS:
        out = repo / "results" / "finetune" / f"mlm-42-{task}"
        folder = out / "seed1"
        training = json.loads((repo / "metrics" / "finetune" / f"mlm-42-{task}.json").read_text())["training"]
        test = pq.read_table(repo / "data" / "downstream" / task / "test.parquet").to_pylist()
        tokenizer, fits = AutoTokenizer.from_pretrained(folder), training["max_seq_length"]
        assert tokenizer.model_max_length >= fits and "---\nlanguage: zh" in (folder / "README.md").read_text()
        stage = {r["id"]: r for r in read_jsonl(out / "test-seed1.jsonl")} if task != "msra_mrc" else \
            json.loads((out / "test-seed1.json").read_text())
        if task in ("sentiment", "lcqmc"):
            model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)
            classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
            rows = [r for r in test if len(tokenizer(r["text_a"], r["text_b"])["input_ids"]) <= fits][:40]
            got = classify([{"text": r["text_a"], "text_pair": r["text_b"]} if r["text_b"] else r["text_a"]
                            for r in rows])
            assert [g["label"] for g in got] == [model.config.id2label[stage[r["id"]]["prediction"]] for r in rows]
        elif task == "msra_ner":
            tag = pipeline("token-classification", model=str(folder))
            rows = [r for r in test if len(tokenizer(r["tokens"], is_split_into_words=True)["input_ids"]) <= fits][:40]
            for r in rows:  # the card's way: the characters as words; a word's tag at its start in " ".join(words)
                starts = {2 * i: i for i in range(len(r["tokens"]))}  # every token one character
                tags = {starts[t["start"]]: t["entity"] for t in tag([r["tokens"]], is_split_into_words=True)[0]
                        if t["start"] in starts}
                assert [tags.get(i, "O") for i in range(len(r["tokens"]))] == stage[r["id"]]["prediction"], r["id"]
        else:
            scope = {}
            exec(usage(FAMILIES["mrc"], folder, training).replace("print(", "str("), scope)  # the card's code
            rows = [r for r in test if len(tokenizer(r["question"], r["context"])["input_ids"]) <= fits
                    and len(tokenizer.tokenize(r["question"])) <= training["max_query_length"]][:40]
            assert [scope["answer"](r["question"], r["context"]) for r in rows] == [stage[r["id"]] for r in rows]
        assert len(rows) >= (3 if task == "msra_mrc" else 10), task  # NER-as-MRC questions are long


def test_dvc_plots_show_renders_the_pipelines_plots_on_the_offline_page(repo, tmp_path):
    repo, env, _ = repo
    page = ROOT / ".dvc" / "plots" / "offline.html"  # what the project's .dvc/config names
    run(["dvc", "plots", "show", "--html-template", str(page), "-o", str(tmp_path / "plots")], repo, env)
    html = (tmp_path / "plots" / "index.html").read_text(encoding="utf-8")
    assert html.count("vegaEmbed(") >= 2 and "metrics/pretrain/mlm-42.csv" in html
    assert "cdn.jsdelivr" not in html and "<script src=" not in html


def test_finetune_chooses_its_learning_rate_on_dev_and_its_outcomes_give_its_test_scores(repo):
    """Each fine-tuned model keeps the learning rate of the grid with the best mean dev score (never test), and
    the per-example outcomes it wrote (what the report's statistics and the study's units read) give back each
    seed's test headline score."""
    from tasks.report.outcomes import run_counts

    repo, _, _ = repo
    for file in sorted((repo / "metrics" / "finetune").glob("*.json")):
        m = json.loads(file.read_text())
        assert [p["learning_rate"] for p in m["search"]] == [0.001 * s for s in SCALES], file.name
        best = max(m["search"], key=lambda p: p["dev"])
        assert m["training"]["learning_rate"] == best["learning_rate"] and m["dev"][m["headline"]]["mean"] == best["dev"]
        seeds = [r["seed"] for r in m["runs"]]
        c, metric, family = run_counts(repo / "metrics" / "outcomes" / f"{file.stem}.parquet", seeds)
        assert family == m["family"] and len(c) == len(seeds)
        for run, score in zip(m["runs"], metric(c.sum(1))):
            assert score == pytest.approx(run["test"][m["headline"]], abs=1e-9), file.name


def test_each_stage_declares_exactly_the_params_it_reads(repo):
    """dvc.yaml's params deps against the keys each stage read (tests/e2e/trace_site/params_trace.py): a key
    it reads but does not declare could change its result unseen; one it declares but never
    reads (e.g. finetune.tasks for a fine-tuning run) reruns it for nothing."""
    assert params_problems(repo[0]) == {}


def test_second_repro_does_nothing(repo):
    repo, env, _ = repo
    out = run(["dvc", "repro"], repo, env)
    assert ran_stages(out) == set()


def test_data_stages_are_byte_identical_when_rerun(repo):
    repo, env, _ = repo
    before = lock_outs(repo)
    shutil.rmtree(repo / "data")
    out = run(["dvc", "repro", "--force", "pretraining_data@mlm-42", f"pretraining_data@{SECOND}-42",
               *(f"resample@{m}" for m in MIXTURES)], repo, env)
    assert set(DATA_STAGES) <= ran_stages(out)
    after = lock_outs(repo)
    data_outs = [p for p in before if p.startswith(("data/", "corpora/", "models/tokenizer"))]
    assert len(data_outs) >= 13
    assert {p: after[p] for p in data_outs} == {p: before[p] for p in data_outs}


def test_multilingual_stages_build_resample_extend_prune_and_continue(repo):
    repo, _, _ = repo
    corpus = json.loads((repo / "metrics" / "multilingual.json").read_text())
    assert set(corpus["languages"]) == {"zh", "yue", "ko", "ug", "bo", "mn", "kk", "za"}
    assert corpus["absent_languages"] == [] and corpus["missing_inputs"] == []
    vocab = json.loads((repo / "metrics" / "vocab_extension.json").read_text())
    assert {"bo", "ug", "mn", "kk", "ko", "za"} <= set(vocab["extended_languages"]) and vocab["new_tokens"] > 0
    for lang in ("bo", "ug", "ko"):
        cov = vocab["coverage"][lang]
        assert cov["extended"]["unk_rate"] < cov["base"]["unk_rate"], lang
    natural = json.loads((repo / "metrics" / "resample" / "natural.json").read_text())
    resampled = json.loads((repo / "metrics" / "resample" / "resampled.json").read_text())
    assert resampled["languages"]["bo"]["token_share_after"] > natural["languages"]["bo"]["token_share_after"]
    for lang, s in resampled["languages"].items():
        assert abs(s["document_share_after"] - s["probability"]) < 0.01, lang
    pruned = json.loads((repo / "metrics" / "prune_vocab.json").read_text())
    assert pruned["vocab_size"]["after"] < pruned["vocab_size"]["before"]
    assert pruned["sequences_checked"] > 0 and pruned["max_abs_logit_diff"] < 1e-4 and pruned["tokenization_identical"]
    cont = json.loads((repo / "metrics" / "continue_pretrain" / "resampled.json").read_text())
    assert set(cont["heldout"]["after"]) == set(corpus["languages"])
    assert cont["vocab_size"] == vocab["extended_vocab_size"]


def test_interpretability_stages(repo):
    repo, _, _ = repo
    zones = {"cls", "sep_mid", "sep_end", "special", "diagonal", "q2q", "q2p", "p2q", "p2p"}
    model = ANALYSED["ablation"]
    ablation = json.loads((repo / "metrics" / "ablation" / f"{model}.json").read_text())
    assert set(ablation["all_layers"]) == set(ablation["per_layer"]) == zones
    assert set(ablation["per_head"]) == {"p2q", "p2p"}
    assert set(ablation["per_head"]["p2p"]["layer_0"]) == {"head_0", "head_1"}
    assert ablation["evaluation"]["evaluations"] == 1 + 9 * 2 + 2 * 2
    finetuned = json.loads((repo / "metrics" / "finetune" / f"{model}-msra_mrc.json").read_text())
    assert ablation["baseline"] == finetuned["runs"][0]["dev"]  # the same model as finetune's first seed
    assert "train" not in ablation  # read back, not retrained: the summary stays in finetune's metrics
    probe = json.loads((repo / "metrics" / "probe" / f"{ANALYSED['probe']}.json").read_text())
    for name in ("pos", "ner"):
        assert [x["layer"] for x in probe[name]["layers"]] == [0, 1]  # embeddings + one block
        assert all(0 <= x["accuracy"] <= 1 for x in probe[name]["layers"])
    for task in ("sentiment", "msra_ner"):
        mix = json.loads((repo / "metrics" / "scalar_mix" / f"{ANALYSED['scalar_mix']}-{task}.json").read_text())
        assert len(mix["layer_weights"]) == 2 and abs(sum(mix["layer_weights"]) - 1) < 1e-6
    attributions = json.loads((repo / "metrics" / "attributions" / f"{SECOND}-42.json").read_text())
    assert attributions["examples"] and all(len(e["tokens"]) == len(e["attributions"])
                                            for e in attributions["examples"])
    page = (repo / "results" / "attributions" / f"{SECOND}-42" / "attributions.html").read_text()
    assert "layer 0 head 1" in page and "http" not in page
    md = (repo / "reports" / "report.md").read_text()
    assert "| No P² |" in md and "figures/ablation_heads_p2p.png" in md and "figures/probes.png" in md
    assert "reproduces the fine-tuning stage's seed-1 score exactly" in md


def test_compression_stages(repo, monkeypatch):
    """Every distillation and pruning variant ran on each family; the saved pruned model loads
    with the documented loader and scores exactly what the stage recorded for its first seed."""
    import torch

    from tasks.compression.prune import load_pruned
    from tasks.core.model_dir import load_tokenizer
    from tasks.core.params import load_params
    from tasks.downstream.families import FAMILIES, load_task_data
    from tasks.downstream.finetuned import load_finetuned, model_folder, read_scores

    repo, _, _ = repo
    for task in COMPRESSED:
        distill = json.loads((repo / "metrics" / "distill" / f"l1-{task}.json").read_text())
        variants = {v["name"]: v for v in distill["variants"]}
        assert list(variants) == ["teacher", "teacher_ensemble", "labels", "kd", "kd_intermediate", "multi_teacher"]
        teacher, student = variants["teacher"], variants["labels"]
        assert [r["seed"] for r in student["runs"]] == [1, 2]
        assert student["size"]["parameters"] < teacher["size"]["parameters"]
        finetuned = json.loads((repo / "metrics" / "finetune" / f"{SECOND}-42-{task}.json").read_text())
        assert teacher["test"] == finetuned["test"]  # the teachers are the models finetune saved
        assert variants["kd"]["runs"][0]["train"]["kd_loss"] > 0
        assert variants["kd_intermediate"]["runs"][0]["train"]["match_loss"] > 0
        prune = json.loads((repo / "metrics" / "prune" / f"{SECOND}-42-{task}.json").read_text())
        assert len(prune["variants"]) == 1 + 2 * 2 * 2
        for v in prune["variants"][1:]:  # one layer of 2 heads and 64 FFN neurons, pruned to 1 and 32
            assert v["runs"][0]["heads"] == [1] and v["runs"][0]["ffn"] == [32]
            assert v["vocabulary_pruned"]["parameters"] < v["size"]["parameters"] < teacher["size"]["parameters"]
    monkeypatch.chdir(repo)
    params = load_params()
    spec, family, name = params.task("msra_ner"), FAMILIES["ner"], "self_supervised-uneven-iterative2"
    training = params.finetune.for_task(spec)
    tables, labels, data = load_task_data("msra_ner", family, ("train", "dev", "test"),
                                          load_tokenizer(f"models/{SECOND}-42"), training)
    model = load_pruned(family, repo / "results" / "prune" / f"{SECOND}-42-msra_ner" / name,
                        repo / "models" / f"{SECOND}-42",
                        labels, training)
    scores, _ = family.evaluate(model, data["dev"], tables["dev"], training, labels, spec.metrics,
                                torch.device("cpu"))
    recorded = next(v for v in json.loads((repo / "metrics" / "prune" / f"{SECOND}-42-msra_ner.json").read_text())[
        "variants"] if v["name"] == name)["runs"][0]["dev"]
    assert {m: scores[m] for m in spec.metrics} == recorded
    # the unpruned and teacher rows reuse finetune's recorded scores: they are what its saved model scores
    model = load_finetuned(family, training, model_folder(repo / "results" / "finetune" / f"{SECOND}-42-msra_ner", 1))
    scores, _ = family.evaluate(model, data["dev"], tables["dev"], training, labels, spec.metrics,
                                torch.device("cpu"))
    assert read_scores(repo / "results" / "finetune" / f"{SECOND}-42-msra_ner", [1], spec.metrics)[0]["dev"] == \
        {m: scores[m] for m in spec.metrics}
    assert "| l1: kd |" in (repo / "reports" / "report.md").read_text()


def test_sampling_exponent_reruns_only_what_follows_resampling(repo):
    repo, env, _ = repo
    run(["dvc", "repro"], repo, env)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["multilingual"]["mixtures"]["resampled"]["alpha"] = 0.5
    write_params(repo, params)
    # what `make repro` announces as the stages to look at again: those downstream of the change
    assert planned(str(repo)) == ["resample@resampled", "continue_pretrain@resampled", "prune_vocab", "report"]
    out = run([sys.executable, "-m", "tasks.orchestration.progress"], repo, env)
    assert ran_stages(out) == {"resample@resampled", "continue_pretrain@resampled", "prune_vocab", "report"}
    assert "[1/4] resample@resampled" in out and "[4/4] report" in out and "4 stages ran in" in out


def test_prefect_pipeline_flow_walks_the_dvc_graph(repo, monkeypatch):
    repo, env, _ = repo
    from flows.pipeline import pipeline
    from tasks.orchestration.repro import stage_order

    monkeypatch.chdir(repo)
    monkeypatch.setenv("PYTHONPATH", env["PYTHONPATH"])
    order = stage_order()
    assert order.index("acquire") < order.index("ingest") < order.index("segment") < order.index("tokenize")
    assert order.index(f"pretrain@{SECOND}-42") < order.index(f"finetune@{SECOND}-42-sentiment") < order.index("report")
    state = pipeline(return_state=True)
    assert state.is_completed()
    assert state.result() == order
