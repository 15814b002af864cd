"""Stage ``prune_vocab``: keep only the tokens that the chosen languages' text uses (plus the
special tokens) in a continued-pretrained model; shrink its embeddings and MLM output layer;
check that the pruned model gives the same logits on held-out text whose tokens are all kept."""

import sys

import numpy as np
import torch
from prefect import flow, get_run_logger
from transformers import AutoTokenizer, BertForMaskedLM

from tasks.core import paths
from tasks.core.io import atomic_outputs, write_json
from tasks.core.params import load_params
from tasks.core.stage import run_stage, stage_task
from tasks.multilingual.continue_pretrain import pack_by_language
from tasks.multilingual.multilingual import read_documents
from tasks.multilingual.vocabulary import multilingual_tokenizer, parameter_count, prune_masked_lm, used_token_ids, vocabulary
from tasks.training.batching import pad_batch


@stage_task
def check_logits(model: BertForMaskedLM, pruned: BertForMaskedLM, keep: np.ndarray, ids: np.ndarray,
                 offsets: np.ndarray, max_sequences: int = 64) -> dict:
    """Largest |logit difference| between ``pruned`` and ``model`` restricted to ``keep``, on the
    sequences whose tokens are all kept (with their ids renumbered)."""
    new_id = np.full(model.config.vocab_size, -1, dtype=np.int64)
    new_id[keep] = np.arange(len(keep))
    kept = [i for i in range(len(offsets) - 1) if (new_id[ids[offsets[i]:offsets[i + 1]]] >= 0).all()]
    index = np.array(kept[:max_sequences], dtype=np.int64)
    if not len(index):
        return {"sequences_checked": 0, "sequences_with_dropped_tokens": len(offsets) - 1 - len(kept)}
    batch, valid = pad_batch(ids, offsets, index)
    mask = torch.from_numpy(valid.astype(np.int64))
    with torch.no_grad():
        full = model.eval()(input_ids=torch.from_numpy(batch.astype(np.int64)), attention_mask=mask).logits
        small = pruned(input_ids=torch.from_numpy(new_id[batch] * valid), attention_mask=mask).logits
    diff = (full[..., torch.from_numpy(keep)] - small).abs()[torch.from_numpy(valid)]
    return {"sequences_checked": len(index), "sequences_with_dropped_tokens": len(offsets) - 1 - len(kept),
            "max_abs_logit_diff": float(diff.max())}


@flow(name="prune_vocab")
def prune_vocab() -> None:
    params = load_params()
    spec = params.multilingual.prune
    source = paths.CONTINUED / spec.mixture
    model = BertForMaskedLM.from_pretrained(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    docs = read_documents(paths.MULTILINGUAL)
    langs = docs.column("lang").to_pylist()
    texts = docs.column("text").to_pylist()
    splits = docs.column("split").to_pylist()
    train_texts = [t for t, lang, s in zip(texts, langs, splits) if lang in spec.languages and s == "train"]
    keep = used_token_ids(tokenizer, train_texts)
    pruned = prune_masked_lm(model, keep)
    tokens = vocabulary(tokenizer)
    pruned_tokenizer = multilingual_tokenizer([tokens[i] for i in keep])

    held = [(lang, t) for t, lang, s in zip(texts, langs, splits) if lang in spec.languages and s == "heldout"]
    seqs = pack_by_language(tokenizer, [h[0] for h in held], [h[1] for h in held],
                            params.pretraining_data.max_seq_length)
    ids = np.concatenate([ids for ids, _ in seqs.values()])
    offsets = np.concatenate([[0], np.cumsum(np.concatenate([np.diff(off) for _, off in seqs.values()]))])
    # The pruned tokenizer must split kept text exactly as the full one does (WordPiece is
    # greedy longest-match: removing unused tokens cannot change a split made of kept ones).
    new_id = {old: new for new, old in enumerate(keep.tolist())}
    same = all(pruned_tokenizer(t, add_special_tokens=False)["input_ids"] == [new_id[i] for i in row]
               for t, row in zip(train_texts[:500], tokenizer(train_texts[:500], add_special_tokens=False)["input_ids"]))
    check = check_logits(model, pruned, keep, ids, offsets)
    stats = {"mixture": spec.mixture, "languages": spec.languages,
             "vocab_size": {"before": model.config.vocab_size, "after": int(len(keep))},
             "parameters": {"before": parameter_count(model), "after": parameter_count(pruned)},
             "tokenization_identical": same, **check}
    with atomic_outputs(paths.PRUNED, paths.stage_metrics("prune_vocab")) as (out, metrics):
        pruned.save_pretrained(out)
        pruned_tokenizer.save_pretrained(out)
        stats["model_bytes"] = {"before": (source / "model.safetensors").stat().st_size,
                                "after": (out / "model.safetensors").stat().st_size}
        write_json(metrics, stats)
    get_run_logger().info(f"pruned to {spec.languages}: {stats}")


if __name__ == "__main__":
    run_stage(prune_vocab, *sys.argv[1:])
