"""Mac's held-out measure: the held-out text is segmented by jieba and corrupted as Mac's pretraining
data is (whole words or N-grams of them, each replaced by a similar word of its token length, a random
word where it has none, never [MASK]), the same on every call; and its accuracy gate must beat
copying the input, not only the top token."""

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tasks.core import paths
from tasks.corpus.similar_words import LEXICON_SCHEMA
from tasks.corpus.tokenize import SPECIAL_TOKENS, load_vocab_tokenizer
from tasks.pretraining.gates import mlm_gates, unigram_log_probs
from tasks.pretraining.heldout import mac_text, masked_batches
from tasks.pretraining.objectives.masked import mlm_measure

TEXTS = ["国家的新年", "中华民族的春节", "国家和政府的元旦", "新年的国家"]
SIMILAR = {"国家": ["政府"], "新年": ["春节", "元旦"], "中华民族": []}  # 中华民族: in the lexicon, no candidate


@pytest.fixture
def held_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(SPECIAL_TOKENS + list("国家的新年中华民族春节和政府元旦")) + "\n", encoding="utf-8")
    tokenizer = load_vocab_tokenizer(vocab)
    paths.EVAL_TEXTS.mkdir(parents=True)
    texts = TEXTS * 30
    pq.write_table(pa.table({"text": texts, "split": ["dev"] * len(texts)}), paths.eval_texts("news"))
    ids = lambda w: tokenizer(w, add_special_tokens=False)["input_ids"]  # noqa: E731
    lexicon = pa.table({"word": list(SIMILAR), "input_ids": [ids(w) for w in SIMILAR],
                        "similar": list(SIMILAR.values()), "similarity": [[0.9] * len(v) for v in SIMILAR.values()],
                        "similar_ids": [sum((ids(s) for s in v), []) for v in SIMILAR.values()]}, schema=LEXICON_SCHEMA)
    pq.write_table(lexicon, tmp_path / "lexicon.parquet")
    return tokenizer


def _corrupt(tokenizer, scheme="wwm"):
    ids, offsets, mac = mac_text("news", tokenizer, 32, 1000, scheme=scheme, ngram_probs=(0.5, 0.5),
                                 lexicon=Path("lexicon.parquet"), hmm=True, user_dict=None)
    batches = list(masked_batches(ids, offsets, "news", 0, tokenizer.mask_token_id, 0.3, 8, 16,
                                   torch.device("cpu"), mac))
    return ids, offsets, mac, batches


def test_mac_held_out_text_replaces_whole_words_by_similar_ones(held_out):
    tokenizer = held_out
    ids, offsets, mac, batches = _corrupt(tokenizer)
    assert len(offsets) > 2 and len(mac.words) == len(mac.lex_ids) == len(ids)
    seen = {}
    for input_ids, valid, rows, cols, labels, inputs, start in batches:
        assert (inputs != tokenizer.mask_token_id).all()  # Mac never sees [MASK]
        for r in rows.unique().tolist():
            row = offsets[start + r] + np.arange(int(valid[r].sum()))
            words, chosen = mac.words[row], np.zeros(len(row), bool)
            chosen[cols[rows == r].numpy()] = True
            for w in np.unique(words[chosen]):  # whole words: every token of a chosen word is chosen
                assert chosen[words == w].all()
                original = tokenizer.decode(ids[row][words == w]).replace(" ", "")
                seen.setdefault(original, set()).add(tokenizer.decode(input_ids[r, :len(row)].numpy()[words == w]).replace(" ", ""))
    assert seen["国家"] == {"政府"} and seen["新年"] <= {"春节", "元旦"} and len(seen["新年"]) == 2
    # no candidate (中华民族) or not in the lexicon (的): a random word of the same length
    assert seen["中华民族"] and "中华民族" not in seen["中华民族"] and len(seen["的"]) > 1
    again = _corrupt(tokenizer)[3]
    assert all(all(torch.equal(a, b) for a, b in zip(x[:-1], y[:-1])) for x, y in zip(batches, again))


def test_measure_of_a_mac_model_is_mac():
    assert mlm_measure({"mac": object()}).name == "mac"
    assert mlm_measure({"seed": 0}).name == "mlm"


def test_copying_the_input_is_a_trivial_solution_under_mac():
    rng = np.random.default_rng(0)
    labels = rng.integers(4, 40, 4000)
    rows = np.repeat(np.arange(200), 20)
    inputs = np.where(rng.random(4000) < 0.4, labels, 3)  # a similar word keeps 40% of its tokens
    unigram = unigram_log_probs(np.bincount(labels, minlength=40))
    losses = np.full(4000, 2.0)
    copier = inputs == labels
    gates, references = mlm_gates(losses, copier, labels, rows, unigram, inputs=inputs)
    assert references["copy_accuracy"] == pytest.approx(copier.mean()) and not gates[0].passed
    assert mlm_gates(losses, copier, labels, rows, unigram)[0][0].passed  # it beats the top token alone
    better = copier | (rng.random(4000) < 0.5)
    assert mlm_gates(losses, better, labels, rows, unigram, inputs=inputs)[0][0].passed
