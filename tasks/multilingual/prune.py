"""Stage ``prune_vocab``'s work: a continued-pretrained model pruned to the tokens of some
languages' training text (:func:`tasks.multilingual.embeddings.prune_masked_lm`), checked to
tokenize that text as before and to give the same logits on held-out text whose tokens
are all kept (:func:`check_logits`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch
from transformers import BertForMaskedLM, BertTokenizerFast, PreTrainedTokenizerBase

from tasks.core.stage import stage_task
from tasks.multilingual.continue_pretrain import concat_sequences
from tasks.pretraining.heldout import pack_by_language
from tasks.multilingual.embeddings import parameter_count, prune_masked_lm
from tasks.multilingual.vocabulary import multilingual_tokenizer, used_token_ids, vocabulary
from tasks.training.batching import pad_batch


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


@stage_task
def prune_to_languages(model: BertForMaskedLM, tokenizer: PreTrainedTokenizerBase, docs: pa.Table,
                       languages: list[str], max_seq_length: int) -> tuple[BertForMaskedLM, BertTokenizerFast, dict]:
    """``model`` and ``tokenizer`` pruned to the tokens of the training documents of ``languages``
    in ``docs`` (columns ``lang``, ``text``, ``split``), and the checks: vocabulary size and
    parameters before and after, whether the pruned tokenizer splits training text as the full
    one does, and :func:`check_logits` on held-out text."""
    langs = docs.column("lang").to_pylist()
    texts = docs.column("text").to_pylist()
    splits = docs.column("split").to_pylist()
    train_texts = [t for t, lang, s in zip(texts, langs, splits) if lang in languages and s == "train"]
    keep = used_token_ids(tokenizer, train_texts)
    pruned = prune_masked_lm(model, keep)
    tokens = vocabulary(tokenizer)
    pruned_tokenizer = multilingual_tokenizer([tokens[i] for i in keep])

    held = [(lang, t) for t, lang, s in zip(texts, langs, splits) if lang in languages and s == "heldout"]
    ids, offsets = concat_sequences(pack_by_language(tokenizer, [h[0] for h in held], [h[1] for h in held],
                                                     max_seq_length))
    # The pruned tokenizer must split kept text exactly as the full one does (WordPiece is
    # greedy longest-match: removing unused tokens cannot change a split made of kept ones).
    new_id = {old: new for new, old in enumerate(keep.tolist())}
    # split_special_tokens, as used_token_ids and pack_by_language tokenize the text.
    rows = tokenizer(train_texts[:500], add_special_tokens=False, split_special_tokens=True)["input_ids"]
    same = all(pruned_tokenizer(t, add_special_tokens=False, split_special_tokens=True)["input_ids"]
               == [new_id[i] for i in row]
               for t, row in zip(train_texts[:500], rows))
    check = check_logits(model, pruned, keep, ids, offsets)
    stats = {"vocab_size": {"before": model.config.vocab_size, "after": int(len(keep))},
             "parameters": {"before": parameter_count(model), "after": parameter_count(pruned)},
             "tokenization_identical": same, **check}
    return pruned, pruned_tokenizer, stats
