"""tasks.core.script: a model pretrained on traditional characters reads simplified text as if it were
converted character by character (OpenCC s2tw), with the text, its offsets and its tokens unchanged."""

import opencc
import torch
from transformers import BertConfig, BertModel, BertTokenizerFast

from tasks.core.script import CONVERSION, counterparts, read_simplified

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# 发/發 头/頭 后/後 说/說: simplified and traditional; 好 and 的 are written alike; 门 has no 門 here
CHARS = ["发", "發", "头", "頭", "后", "後", "说", "說", "好", "的", "门", "##发", "##發"]


def tiny():
    vocab = {t: i for i, t in enumerate(SPECIAL + CHARS)}
    tokenizer = BertTokenizerFast(vocab=vocab, tokenize_chinese_chars=True)
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(vocab), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16, max_position_embeddings=32))
    return tokenizer, model.eval()


def test_counterparts_are_the_vocabulary_pairs_opencc_gives():
    tokenizer, _ = tiny()
    ids = tokenizer.get_vocab()
    expected = [(ids[s], ids[t]) for s, t in (("发", "發"), ("头", "頭"), ("后", "後"), ("说", "說"), ("##发", "##發"))]
    assert counterparts(tokenizer) == expected


def test_simplified_text_reads_as_its_character_by_character_conversion():
    tokenizer, model = tiny()
    converter = opencc.OpenCC(CONVERSION)
    assert [converter.convert(ch) for ch in "门发"] == ["門", "發"]  # 门's form is not in this vocabulary
    before = model.get_input_embeddings().weight.clone()
    assert read_simplified(model, tokenizer) == 5
    after = model.get_input_embeddings().weight
    ids = tokenizer.get_vocab()
    for simplified, traditional in (("发", "發"), ("头", "頭"), ("##发", "##發")):
        assert torch.equal(after[ids[simplified]], before[ids[traditional]])
    for kept in ("發", "頭", "好", "的", "门", "[CLS]"):  # traditional rows and unconverted characters untouched
        assert torch.equal(after[ids[kept]], before[ids[kept]])
    # the model's output on the simplified text equals the unadapted model's on its traditional form
    simplified, traditional = tokenizer("头说的后", return_tensors="pt"), tokenizer("頭說的後", return_tensors="pt")
    with torch.no_grad():
        adapted = model(**simplified).last_hidden_state
        model.get_input_embeddings().weight.copy_(before)
        original = model(**traditional).last_hidden_state
    assert torch.allclose(adapted, original, atol=1e-6)
