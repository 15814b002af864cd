"""The pretraining loop: masked-position loss equals the full-vocabulary loss, the
schedule, the data order, and resuming after a kill reproduces the uninterrupted run."""

import numpy as np
import pyarrow as pa
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from tasks.modeling import masked_lm_loss
from tasks.params import Pretrain
from tasks.batching import BatchSchedule
from tasks.pretrain import MaskedExamples, learning_rate, train


def tiny_model(seed=0):
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)
    return BertForMaskedLM(cfg)


def tiny_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "masked_positions": [], "masked_labels": []}
    for _ in range(n):
        length = int(rng.integers(6, 20))
        ids = rng.integers(5, 60, length)
        pos = np.sort(rng.choice(np.arange(1, length - 1), 2, replace=False))
        rows["masked_labels"].append(ids[pos].tolist())
        ids[pos] = 3
        rows["input_ids"].append(ids.tolist())
        rows["masked_positions"].append(pos.tolist())
    return MaskedExamples.from_table(pa.table(rows))


def cfg(**kw):
    base = dict(token_budget=2000, batch_size=4, learning_rate=1e-3, warmup_fraction=0.1, weight_decay=0.01,
                max_grad_norm=1.0, log_every=5, checkpoint_every=10)
    return Pretrain(**{**base, **kw})


def test_masked_position_loss_matches_full_vocabulary_loss():
    model, data = tiny_model(), tiny_data()
    model.eval()
    b = data.batch(np.arange(8))
    loss, _ = masked_lm_loss(model, b["input_ids"], b["attention_mask"], b["rows"], b["cols"], b["labels"])
    labels = torch.full(b["input_ids"].shape, -100)
    labels[b["rows"], b["cols"]] = b["labels"]
    full = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=labels).loss
    assert torch.allclose(loss, full, atol=1e-5)


def test_batch_padding_and_label_positions():
    data = tiny_data()
    b = data.batch(np.array([3, 0]))
    assert b["input_ids"].shape[1] == max(data.lengths[3], data.lengths[0])
    assert b["attention_mask"].sum(1).tolist() == [data.lengths[3], data.lengths[0]]
    assert b["rows"].tolist() == [0, 0, 1, 1]
    assert (b["input_ids"][b["rows"], b["cols"]] == 3).all()


def test_learning_rate_schedule():
    lrs = [learning_rate(s, 100, 1.0, 0.1) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert max(lrs) == pytest.approx(1.0) and lrs[-1] == pytest.approx(1 / 90)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:]))


def test_batch_schedule_covers_each_epoch_and_groups_lengths():
    lengths = np.random.default_rng(0).integers(5, 128, 1000)
    schedule = BatchSchedule(lengths, 8, seed=3, bucket=25)
    assert schedule.per_epoch == 125
    epoch0 = np.concatenate([schedule(s) for s in range(125)])
    epoch1 = np.concatenate([schedule(s) for s in range(125, 250)])
    assert sorted(epoch0) == list(range(1000)) and sorted(epoch1) == list(range(1000))
    assert not (epoch0 == epoch1).all()
    again = BatchSchedule(lengths, 8, seed=3, bucket=25)
    assert (again(130) == schedule(130)).all() and (again(7) == schedule(7)).all()  # any order of calls
    # padding: grouped batches waste far less than random ones
    def waste(s):
        return sum((lengths[s(k)].max() - lengths[s(k)]).sum() for k in range(125)) / lengths.sum()
    assert waste(schedule) < 0.1 < waste(BatchSchedule(lengths, 8, seed=3, bucket=1))


def test_resume_after_kill_reproduces_the_uninterrupted_run(tmp_path):
    data = tiny_data()
    full_model = tiny_model()
    full = train(full_model, data, cfg(), seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "a.pt",
                 fingerprint="f", log=lambda _: None)
    assert full["steps"] >= 20 and full["tokens"] >= 2000 - 4 * 20

    # "kill" the run at step 15, after the checkpoint of step 10; a fresh run resumes from it.
    killed = tiny_model()
    short = cfg(token_budget=2000)
    def stop_at_15(msg):  # logged every 5 steps; the last checkpoint was at step 10
        if msg.startswith("step 15/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(killed, data, short, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "b.pt",
              fingerprint="f", log=stop_at_15)
    assert (tmp_path / "b.pt").is_file()
    resumed_model = tiny_model(seed=123)  # different init: everything must come from the checkpoint
    messages = []
    resumed = train(resumed_model, data, short, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "b.pt",
                    fingerprint="f", log=messages.append)
    assert messages[0].startswith("resuming from")
    assert resumed["tokens"] == full["tokens"]
    assert [r["loss"] for r in resumed["rows"]] == [r["loss"] for r in full["rows"]]
    for (name, a), (_, b) in zip(full_model.state_dict().items(), resumed_model.state_dict().items()):
        assert torch.equal(a, b), name


def test_stale_checkpoint_is_ignored(tmp_path):
    data = tiny_data()
    train(tiny_model(), data, cfg(token_budget=800), seed=1, device=torch.device("cpu"),
          checkpoint=tmp_path / "c.pt", fingerprint="old", log=lambda _: None)
    messages = []
    train(tiny_model(), data, cfg(token_budget=800), seed=1, device=torch.device("cpu"),
          checkpoint=tmp_path / "c.pt", fingerprint="new", log=messages.append)
    assert any("ignoring stale checkpoint" in m for m in messages)
    assert not any(m.startswith("resuming") for m in messages)
