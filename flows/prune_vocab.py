"""Stage ``prune_vocab``: keep only the tokens that the chosen languages' text uses (plus the
special tokens) in a continued-pretrained model; shrink its embeddings and MLM output layer;
check that the pruned model gives the same logits on held-out text whose tokens are all kept."""

import sys

from prefect import flow, get_run_logger
from transformers import AutoTokenizer, BertForMaskedLM

from tasks.core import paths
from tasks.core.io import atomic_outputs
from tasks.core.model_dir import save_model_folder
from tasks.core.metrics.base import write_metrics
from tasks.core.metrics.multilingual import PruneVocabMetrics
from tasks.core.params import load_params
from tasks.core.stage import run_stage
from tasks.multilingual.multilingual import read_documents
from tasks.multilingual.prune import prune_to_languages


@flow(name="prune_vocab")
def prune_vocab() -> None:
    params = load_params()
    spec = params.multilingual.prune
    source = paths.CONTINUED / spec.mixture
    model = BertForMaskedLM.from_pretrained(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    pruned, pruned_tokenizer, checks = prune_to_languages(model, tokenizer, read_documents(paths.MULTILINGUAL),
                                                          spec.languages, params.pretraining_data.max_seq_length)
    stats = {"mixture": spec.mixture, "languages": spec.languages, **checks}
    with atomic_outputs(paths.VOCAB_PRUNED, paths.stage_metrics("prune_vocab")) as (out, metrics):
        save_model_folder(pruned, pruned_tokenizer, out)
        stats["model_bytes"] = {"before": (source / "model.safetensors").stat().st_size,
                                "after": (out / "model.safetensors").stat().st_size}
        write_metrics(metrics, PruneVocabMetrics(**stats))
    get_run_logger().info(f"pruned to {spec.languages}: {stats}")


if __name__ == "__main__":
    run_stage(prune_vocab, *sys.argv[1:])
