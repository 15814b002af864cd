"""Continued pretraining helpers: packing per language and the per-language MLM evaluation."""

import numpy as np
import torch
from transformers import BertConfig, BertForMaskedLM

from tasks.corpus.tokenize import SPECIAL_TOKENS
from tasks.pretraining.heldout import evaluate_mlm, pack_by_language, word_ids_for
from tasks.multilingual.vocabulary import multilingual_tokenizer

TOKENS = SPECIAL_TOKENS + list("我们今天很好的人中国abc")


def test_pack_by_language_keeps_languages_apart_and_fills_sequences():
    tok = multilingual_tokenizer(TOKENS)
    packed = pack_by_language(tok, ["zh", "za", "zh"], ["我们很好", "a b c", "中国人"], max_seq_length=6)
    assert list(packed) == ["zh", "za"]
    ids, offsets = packed["zh"]
    seqs = [tok.convert_ids_to_tokens(ids[offsets[i]:offsets[i + 1]].tolist()) for i in range(len(offsets) - 1)]
    # room for 4 tokens between [CLS] and [SEP]: 我们很好 fills one sequence, 中国人 starts the next
    assert seqs == [["[CLS]", "我", "们", "很", "好", "[SEP]"], ["[CLS]", "中", "国", "人", "[SEP]"]]
    assert word_ids_for(ids, offsets).tolist() == [-1, 1, 2, 3, 4, -1, -1, 7, 8, 9, -1]


def test_evaluation_masks_the_same_positions_for_every_model():
    tok = multilingual_tokenizer(TOKENS)
    ids, offsets = pack_by_language(tok, ["zh"] * 40, ["我们今天很好的人中国"] * 40, max_seq_length=12)["zh"]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(TOKENS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16)
    model = BertForMaskedLM(config)
    kwargs = dict(lang="zh", seed=1, mask_token_id=tok.mask_token_id, masked_lm_prob=0.15, max_predictions=20,
                  device=torch.device("cpu"))
    a = evaluate_mlm(model, ids, offsets, **kwargs)
    assert a == evaluate_mlm(model, ids, offsets, **kwargs)
    assert a["predictions"] == 40 * round(10 * 0.15)  # 15% of the 10 tokens of each sequence, rounded
    assert np.isclose(a["perplexity"], np.exp(a["loss"])) and 0 <= a["accuracy"] <= 1
    assert a["loss"] > 0.5 * np.log(len(TOKENS))  # an untrained model is near chance
