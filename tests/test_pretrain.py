"""The pretraining loop: masked-position loss equals the full-vocabulary loss, the
schedule, the data order, and resuming after a kill reproduces the uninterrupted run."""

import copy
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from tasks.core.errors import ParamsError
from tasks.core.params import Pretrain, PretrainingData
from tasks.pretraining.masking import MaskingConfig, mask_batch
from tasks.pretraining.modeling import PretrainingModel
from tasks.pretraining.checkpoint import checkpoint_fingerprint
from tasks.pretraining.examples import DynamicMasker, PretrainingExamples
from tasks.pretraining.objectives.sentence import SentenceTask
from tasks.pretraining.pretrain import _Window, pad_width, train
from tasks.training.batching import BatchSchedule, RaggedTake, pad_batch
from tasks.training.optim import learning_rate, optimizer_for


def tiny_model(seed=0, **heads):
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=32)
    return PretrainingModel(BertForMaskedLM(cfg), **heads)


def tiny_data(n=40, seed=0, vocab=60, lengths=(6, 20), masked=2):
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "masked_positions": [], "masked_labels": []}
    for _ in range(n):
        length = int(rng.integers(*lengths))
        ids = rng.integers(5, vocab, length)
        pos = np.sort(rng.choice(np.arange(1, length - 1), masked, replace=False))
        rows["masked_labels"].append(ids[pos].tolist())
        ids[pos] = 3
        rows["input_ids"].append(ids.tolist())
        rows["masked_positions"].append(pos.tolist())
    return PretrainingExamples.from_table(pa.table(rows))


def cfg(**kw):
    base = dict(seeds=[1], snapshots=[], token_budget=2000, batch_size=4, learning_rate=1e-3, warmup_fraction=0.1,
                weight_decay=0.01, max_grad_norm=1.0, log_every=5, checkpoint_every=10, device="cpu")
    return Pretrain(**{**base, **kw})


def test_masked_position_loss_matches_full_vocabulary_loss():
    model, data = tiny_model(), tiny_data()
    model.eval()
    b = data.batch(np.arange(8))
    loss, _ = model(b)
    labels = torch.full(b["input_ids"].shape, -100)
    labels[b["rows"], b["cols"]] = b["labels"]
    full = model.mlm(input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=labels).loss
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


def test_fused_adamw_makes_the_loop_update_on_cpu():
    """optimizer_for's fused kernel (on CPU too) keeps BERT's groups (no decay on biases and
    LayerNorm) and makes the default implementation's update, to float rounding."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4))
    x, y = torch.randn(64, 16), torch.randint(0, 4, (64,))
    models, initial = [net, copy.deepcopy(net)], copy.deepcopy(net)
    opts = [optimizer_for(m, 1e-2, 0.1, fused=f) for m, f in zip(models, (True, False))]
    assert opts[0].defaults.get("fused") and not opts[1].defaults.get("fused")
    assert [g["weight_decay"] for g in opts[0].param_groups] == [0.1, 0.0]
    assert len(opts[0].param_groups[0]["params"]) == 2  # the two weight matrices; biases and LayerNorm: no decay
    for _ in range(20):
        for model, opt in zip(models, opts):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    for (name, a), b, a0 in zip(models[0].named_parameters(), models[1].parameters(), initial.parameters()):
        assert (a - a0).abs().max() > 1e-3, name  # trained
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


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
    full = train.fn(full_model, data, cfg(), seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "a.pt",
                 fingerprint="f", log=lambda _: None)
    assert full["steps"] >= 20 and full["tokens"] >= 2000 - 4 * 20

    # "kill" the run at step 15, after the checkpoint of step 10; a fresh run resumes from it.
    killed = tiny_model()
    short = cfg(token_budget=2000)
    def stop_at_15(msg):  # logged every 5 steps; the last checkpoint was at step 10
        if msg.startswith("step 15/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train.fn(killed, data, short, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "b.pt",
              fingerprint="f", log=stop_at_15)
    assert (tmp_path / "b.pt").is_file()
    resumed_model = tiny_model(seed=123)  # different init: everything must come from the checkpoint
    messages = []
    resumed = train.fn(resumed_model, data, short, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "b.pt",
                    fingerprint="f", log=messages.append)
    assert messages[0].startswith("resuming from")
    assert resumed["tokens"] == full["tokens"]
    assert [r["loss"] for r in resumed["rows"]] == [r["loss"] for r in full["rows"]]
    for (name, a), (_, b) in zip(full_model.state_dict().items(), resumed_model.state_dict().items()):
        assert torch.equal(a, b), name


def test_a_resume_between_two_log_rows_gives_the_uninterrupted_rows(tmp_path):
    """The checkpoint holds the logging window: a run killed after a checkpoint taken between two log
    rows (checkpoint_every not a multiple of log_every) logs the same rows once resumed (timings aside)."""
    data, uneven = tiny_data(), cfg(token_budget=2000, log_every=4, checkpoint_every=10)
    full = train.fn(tiny_model(), data, uneven, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "a.pt",
                    fingerprint="f", log=lambda _: None)

    def stop_at_12(msg):  # the checkpoint of step 10 holds steps 9 and 10 of the window that ends at 12
        if msg.startswith("step 12/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train.fn(tiny_model(), data, uneven, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "b.pt",
                 fingerprint="f", log=stop_at_12)
    resumed = train.fn(tiny_model(seed=123), data, uneven, seed=1, device=torch.device("cpu"),
                       checkpoint=tmp_path / "b.pt", fingerprint="f", log=lambda _: None)
    timing = ("tokens_per_sec", "elapsed_sec")
    assert [{k: v for k, v in r.items() if k not in timing} for r in resumed["rows"]] == \
        [{k: v for k, v in r.items() if k not in timing} for r in full["rows"]]


def test_the_window_reads_the_device_values_at_the_log_row_as_each_step_would():
    """The loss and parts stay on the device until a log row (no host-device sync per step); the
    row holds exactly the sums of reading them one by one, in order, as a float each step."""
    gen = torch.Generator().manual_seed(0)
    steps = [(torch.rand((), generator=gen) * 9, {"token_correct": torch.randint(0, 50, (), generator=gen),
                                                 "sentence_loss": torch.rand((), generator=gen),
                                                 "sentence_correct": torch.randint(0, 8, (), generator=gen)}, w)
             for w in (0.25, 0.5, 0.25, 1.0, 0.5, 0.75, 0.125)]
    window = _Window(0.0, logged=SentenceTask.logged)
    for k, (loss, parts, w) in enumerate(steps):
        window.add(loss, parts, 100, 15, 8, weight=w)
        if k == 3:  # a checkpoint between two log rows reads the pending values too
            half = window.state()
            assert not window.pending and half["sums"]["loss"] == sum(x.item() for x, _, _ in steps[:4])
    assert len(window.pending) == 3
    window.steps = len(steps)
    row = window.flush(1.0)
    loss = correct = sentence = 0.0
    for x, parts, w in steps:
        loss, correct = loss + x.item(), correct + parts["token_correct"].item()
        sentence += parts["sentence_loss"].item() * w
    assert row["loss"] == round(loss / len(steps), 5)
    assert row["token_accuracy"] == round(correct / (15 * len(steps)), 5)
    assert row["sentence_loss"] == round(sentence / len(steps), 5)


def test_stale_checkpoint_is_ignored(tmp_path):
    data = tiny_data()
    train.fn(tiny_model(), data, cfg(token_budget=800), seed=1, device=torch.device("cpu"),
          checkpoint=tmp_path / "c.pt", fingerprint="old", log=lambda _: None)
    messages = []
    train.fn(tiny_model(), data, cfg(token_budget=800), seed=1, device=torch.device("cpu"),
          checkpoint=tmp_path / "c.pt", fingerprint="new", log=messages.append)
    assert any("ignoring stale checkpoint" in m for m in messages)
    assert not any(m.startswith("resuming") for m in messages)


def run(checkpoint, fingerprint="f", model=None, log=None, **kw):
    return train.fn(model or tiny_model(), tiny_data(), cfg(**kw), seed=1, device=torch.device("cpu"),
                 checkpoint=checkpoint, fingerprint=fingerprint, log=log or (lambda _: None))


def killed_at_15(checkpoint, fingerprint="f"):
    """A run killed at step 15, after writing its checkpoint of step 10."""
    def stop_at_15(msg):
        if msg.startswith("step 15/"):
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        run(checkpoint, fingerprint, log=stop_at_15)
    assert checkpoint.is_file()


def assert_restarted_from_scratch(checkpoint, warning):
    """Training with ``checkpoint`` logs ``warning``, does not resume, and gives the fresh run's result."""
    messages = []
    restarted = run(checkpoint, log=messages.append)
    assert any(warning in m for m in messages), messages
    assert not any(m.startswith("resuming") for m in messages)
    fresh = run(checkpoint.with_name("fresh.pt"))
    assert [r["loss"] for r in restarted["rows"]] == [r["loss"] for r in fresh["rows"]]


def test_truncated_checkpoint_is_ignored_with_a_warning(tmp_path):
    checkpoint = tmp_path / "last.pt"
    killed_at_15(checkpoint)
    size = checkpoint.stat().st_size
    with open(checkpoint, "r+b") as f:
        f.truncate(size // 2)
    assert_restarted_from_scratch(checkpoint, "warning: ignoring unreadable checkpoint")


class _RunsCode:
    """Unpickling this runs Python code that creates a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('pwned')",)


def test_crafted_checkpoint_runs_no_code_and_is_ignored(tmp_path):
    checkpoint, marker = tmp_path / "last.pt", tmp_path / "marker"
    killed_at_15(checkpoint)
    state = torch.load(checkpoint, weights_only=True)
    state["step"] = _RunsCode(marker)  # a real checkpoint, right fingerprint, one poisoned value
    torch.save(state, checkpoint)
    assert_restarted_from_scratch(checkpoint, "holds objects other than tensors and plain values")
    assert not marker.exists()


def test_fingerprint_covers_masking_params_and_data(tmp_path):
    data_params = PretrainingData(max_seq_length=64, masked_lm_prob=0.15, max_predictions_per_seq=10,
                                  ngram_probabilities=[1.0], dupe_factor=1, shard_size=100)
    shard = tmp_path / "data" / "shard-00000.parquet"
    shard.parent.mkdir()
    shard.write_bytes(b"one")
    base = checkpoint_fingerprint(cfg(), data_params, 1, data=[shard.parent])
    assert base == checkpoint_fingerprint(cfg(), data_params.model_copy(), 1, data=[shard.parent])
    other_prob = checkpoint_fingerprint(cfg(), data_params.model_copy(update={"masked_lm_prob": 0.2}), 1,
                                        data=[shard.parent])
    assert other_prob != base
    assert checkpoint_fingerprint(cfg(log_every=6), data_params, 1, data=[shard.parent]) != base
    assert checkpoint_fingerprint(cfg(), data_params, 2, data=[shard.parent]) != base
    shard.write_bytes(b"two")
    assert checkpoint_fingerprint(cfg(), data_params, 1, data=[shard.parent]) != base

    # a checkpoint written under one masking probability is not resumed under another
    killed_at_15(tmp_path / "a.pt", fingerprint=base)
    (tmp_path / "b.pt").write_bytes((tmp_path / "a.pt").read_bytes())
    for checkpoint, fingerprint, expected in [("a.pt", other_prob, "ignoring stale checkpoint"),
                                              ("b.pt", base, "resuming from")]:
        messages = []
        run(tmp_path / checkpoint, fingerprint=fingerprint, log=messages.append)
        assert messages[0].startswith(expected)


def pair_data(n=40, seed=0):
    """Dynamic-masking rows (word ids stored) with a segment B and a sentence label."""
    rng = np.random.default_rng(seed)
    rows = {"input_ids": [], "word_ids": [], "segment_b": [], "sentence_label": []}
    for _ in range(n):
        length = int(rng.integers(8, 20))
        ids = rng.integers(5, 60, length)
        ids[0], ids[-1] = 1, 2
        words = np.arange(length) // 2
        words[0] = words[-1] = -1
        rows["input_ids"].append(ids.tolist())
        rows["word_ids"].append(words.tolist())
        rows["segment_b"].append(length // 2)
        rows["sentence_label"].append(int(rng.integers(2)))
    return pa.table(rows).cast(pa.schema([("input_ids", pa.list_(pa.int32())), ("word_ids", pa.list_(pa.int32())),
                                          ("segment_b", pa.int32()), ("sentence_label", pa.int8())]))


def test_dynamic_masking_is_mask_batch_seeded_by_step():
    config = MaskingConfig(scheme="wwm", masked_lm_prob=0.3)
    masker = DynamicMasker(config, seed=5, objective="wwm_dynamic", mask_token_id=3,
                           random_token_ids=np.arange(5, 60, dtype=np.int32))
    data = PretrainingExamples.from_table(pair_data(), masker)
    index = np.array([4, 1, 7])
    a, again, later = data.batch(index, step=11), data.batch(index, step=11), data.batch(index, step=12)
    assert all(torch.equal(a[k], again[k]) for k in a)  # a pure function of the step: resumable
    assert not torch.equal(a["input_ids"], later["input_ids"])  # new masks at every step
    # exactly what the static path's function gives for the same generator
    ids = a["attention_mask"].numpy() * 0
    from tasks.training.batching import pad_batch
    ids, _ = pad_batch(data.ids[0], data.id_offsets[0], index)  # one chunk: the table in memory
    words, _ = pad_batch(data.word_ids[0], data.id_offsets[0], index, pad_value=-1)
    import zlib
    ref = mask_batch(ids, words, config, np.random.default_rng([5, zlib.crc32(b"wwm_dynamic"), 11]),
                     mask_token_id=3, random_token_ids=np.arange(5, 60, dtype=np.int32))
    assert (a["input_ids"].numpy() == ref.input_ids).all()
    rows, cols = np.nonzero(ref.chosen)
    assert (a["rows"].numpy() == rows).all() and (a["labels"].numpy() == ref.labels[rows, cols]).all()
    # segment B gets token type 1, padding and segment A type 0
    b = data.segment_b[index]
    for i, start in enumerate(b):
        n = data.lengths[index[i]]
        assert a["token_type_ids"][i, :start].sum() == 0 and (a["token_type_ids"][i, start:n] == 1).all()
        assert a["token_type_ids"][i, n:].sum() == 0


def test_perlm_and_sentence_heads_train(tmp_path):
    """PerLM predicts positions (logits over the row's own positions) and SOP adds a loss on [CLS]."""
    config = MaskingConfig(scheme="wwm", masked_lm_prob=0.3, mask=0, random=0, permute=0.9)
    masker = DynamicMasker(config, seed=1, objective="perlm", mask_token_id=3,
                           random_token_ids=np.arange(5, 60, dtype=np.int32))
    data = PretrainingExamples.from_table(pair_data(), masker)
    model = tiny_model(predicts_positions=True, sentence_task=True)
    b = data.batch(np.arange(6), step=0)
    assert (b["labels"] < b["input_ids"].shape[1]).all()
    loss, parts = model(b)
    assert set(parts) == {"token_loss", "token_correct", "sentence_loss", "sentence_correct"}
    assert torch.isclose(loss, parts["token_loss"] + parts["sentence_loss"])
    hidden = model.mlm.bert(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).last_hidden_state
    logits = model.position_head(hidden[b["rows"], b["cols"]], b["attention_mask"][b["rows"]].bool())
    assert torch.isinf(logits[b["attention_mask"][b["rows"]] == 0]).all()
    summary = train.fn(model, data, cfg(token_budget=3000), seed=1, device=torch.device("cpu"),
                    checkpoint=tmp_path / "last.pt", fingerprint="f", log=lambda _: None, logged=SentenceTask.logged)
    assert summary["final_sentence_accuracy"] is not None and summary["final_loss"] < summary["rows"][0]["loss"]
    assert set(model.extra_heads()) >= {"position_head.decoder.weight", "sentence_head.classifier.weight"}


def take_ragged_reference(values, offsets, chunk, row):
    """The former gather of a batch, a Python loop over its examples: the reference of RaggedTake."""
    parts = [values[c][offsets[c][r]:offsets[c][r + 1]] for c, r in zip(np.asarray(chunk).tolist(),
                                                                          np.asarray(row).tolist())]
    out_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=out_offsets[1:])
    dtype = values[0].dtype if len(values) else np.int32
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)), out_offsets


def batch_reference(data, index, step=0):
    """PretrainingExamples.batch as it was, one reference gather per column."""
    take = take_ragged_reference
    index = np.asarray(index)
    chunk = np.searchsorted(data.chunk_starts, index, side="right") - 1
    row, local = index - data.chunk_starts[chunk], np.arange(len(index))
    flat_ids, offsets = take(data.ids, data.id_offsets, chunk, row)
    ids, valid = pad_batch(flat_ids, offsets, local)
    if data.masker is None:
        cols, label_offsets = take(data.positions, data.label_offsets, chunk, row)
        labels = take(data.labels, data.label_offsets, chunk, row)[0]
        rows = np.repeat(local, np.diff(label_offsets))
    else:
        words = pad_batch(take(data.word_ids, data.id_offsets, chunk, row)[0], offsets, local, pad_value=-1)[0]
        lex = (pad_batch(take(data.lex_ids, data.id_offsets, chunk, row)[0], offsets, local, pad_value=-1)[0]
               if data.lex_ids is not None else None)
        masked = data.masker(ids, words, lex, step)
        rows, cols = np.nonzero(masked.chosen)
        ids, labels = masked.input_ids, masked.labels[rows, cols]
    out = {"input_ids": ids, "attention_mask": valid, "rows": rows, "cols": cols, "labels": labels,
           "token_type_ids": np.zeros_like(ids)}
    return {k: torch.from_numpy(np.asarray(v).astype(np.int64)) for k, v in out.items()}


def ragged_chunks(rng, chunks, max_rows=6, max_length=5):
    """Random chunked ragged columns: int32 and int8 values sharing offsets (int32, as Arrow's),
    with empty examples and empty chunks."""
    offsets, values, small = [], [], []
    for _ in range(chunks):
        lengths = rng.integers(0, max_length + 1, int(rng.integers(0, max_rows + 1)))
        offsets.append(np.r_[0, np.cumsum(lengths)].astype(np.int32))
        values.append(rng.integers(-50, 50, int(lengths.sum())).astype(np.int32))
        small.append(values[-1].astype(np.int8))
    return offsets, values, small


@pytest.mark.parametrize("heads", [{}, {"sbo": True}, {"predicts_positions": True, "sentence_task": True},
                                   {"predicts_positions": True, "full_targets": True, "space": "both"}])
def test_a_batch_padded_to_a_multiple_of_8_gives_the_same_loss(heads):
    """On CUDA the loop pads each batch's width to a multiple of 8 (GPU_WIDTH_MULTIPLE): the extra
    columns are masked out, so loss and parts are those of the unpadded batch, and the width never
    passes the longest example."""
    if heads.get("predicts_positions"):
        config = MaskingConfig(scheme="wwm", masked_lm_prob=0.3, mask=0, random=0, permute=0.9)
        data = PretrainingExamples.from_table(pair_data(), DynamicMasker(
            config, seed=1, objective="perlm", mask_token_id=3, random_token_ids=np.arange(5, 60, dtype=np.int32)))
    else:
        data = tiny_data()
    model = tiny_model(**heads).eval()
    longest, widened = int(data.lengths.max()), 0
    for step, index in enumerate((np.argsort(data.lengths)[:6], np.arange(6), np.argsort(-data.lengths)[:4])):
        batch = data.batch(index, step)
        padded = pad_width(batch, 8, longest)
        width = batch["input_ids"].shape[1]
        assert padded["input_ids"].shape[1] == min(-(-width // 8) * 8, longest)
        assert not padded["attention_mask"][:, width:].any()
        widened += padded["input_ids"].shape[1] > width
        with torch.no_grad():
            (loss, parts), (loss_p, parts_p) = model(batch), model(padded)
        torch.testing.assert_close(loss_p, loss, rtol=1e-5, atol=1e-5)
        assert parts_p.keys() == parts.keys()
        for k in parts:
            torch.testing.assert_close(parts_p[k], parts[k], rtol=1e-5, atol=1e-5)
    assert widened  # the padded path ran


def test_ragged_take_gives_the_arrays_of_the_per_example_loop():
    rng = np.random.default_rng(0)
    cases = 0
    for _ in range(300):
        offsets, values, small = ragged_chunks(rng, int(rng.integers(1, 6)))
        where = [(c, r) for c, o in enumerate(offsets) for r in range(len(o) - 1)]
        if not where:
            continue
        size = int(rng.choice([0, 1, 2, 8, 20]))
        picks = [where[i] for i in rng.integers(0, len(where), size)]  # repeats, any chunk order
        chunk, row = np.array([p[0] for p in picks], dtype=np.int64), np.array([p[1] for p in picks], dtype=np.int64)
        take = RaggedTake(offsets, chunk, row)
        for column in (values, small):
            ref, ref_offsets = take_ragged_reference(column, offsets, chunk, row)
            got = take(column)
            assert got.dtype == ref.dtype and np.array_equal(got, ref)
            assert take.offsets.dtype == ref_offsets.dtype and np.array_equal(take.offsets, ref_offsets)
        cases += 1
    assert cases > 250
    offsets, values, _ = ragged_chunks(np.random.default_rng(1), 3, max_rows=4)
    offsets[1] = np.zeros(3, np.int32)  # a chunk of empty examples only
    values[1] = values[1][:0]
    got = RaggedTake(offsets, [1, 1], [1, 0])
    assert got(values).dtype == np.int32 and len(got(values)) == 0 and got.offsets.tolist() == [0, 0, 0]
    for chunk, row in [([0], [len(offsets[0])]), ([3], [0]), ([0], [-1]), ([-1], [0])]:
        with pytest.raises(IndexError):
            RaggedTake(offsets, chunk, row)(values)


def test_batch_gives_the_tensors_of_the_per_example_loop():
    """Static and dynamic examples over several chunks (batches across chunk boundaries, empty
    label lists): batch() gives exactly what the former per-column, per-example gather gave."""
    rng = np.random.default_rng(2)
    batches = []
    for c in range(4):
        rows = {"input_ids": [], "masked_positions": [], "masked_labels": []}
        for _ in range(int(rng.integers(1, 7))):
            length = int(rng.integers(2, 12))
            pos = np.sort(rng.choice(length, int(rng.integers(0, 3)), replace=False))
            rows["input_ids"].append(rng.integers(5, 60, length).tolist())
            rows["masked_positions"].append(pos.tolist())
            rows["masked_labels"].append(rng.integers(5, 60, len(pos)).tolist())
        batches.extend(pa.table(rows, schema=pa.schema([(k, pa.list_(pa.int32())) for k in rows])).to_batches())
    static = PretrainingExamples.from_table(pa.Table.from_batches(batches))
    assert len(static.ids) == 4

    seen = []

    def record(ids, words, lex, step):  # a masker that shows what it was given
        seen.append((ids, words, lex))
        return SimpleNamespace(chosen=words > 3, input_ids=ids + step, labels=lex)

    ids = static.ids
    words = [(i % 7).astype(np.int32) for i in ids]
    lex = [(i * 3 - 100).astype(np.int32) for i in ids]
    dynamic = PretrainingExamples(ids, static.id_offsets, word_ids=words, lex_ids=lex, masker=record)
    edges = [np.array([0]), np.array([len(static) - 1, 0]), np.zeros(0, np.int64),
             np.arange(len(static))[::-1], np.arange(len(static))]
    for step, index in enumerate([*edges, *rng.integers(0, len(static), (30, 6))]):
        for data in (static, dynamic):
            x, y = data.batch(index, step), batch_reference(data, index, step)
            assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
        (new_ids, new_words, new_lex), (old_ids, old_words, old_lex) = seen[-2:]
        assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in
                   [(new_ids, old_ids), (new_words, old_words), (new_lex, old_lex)])
    with pytest.raises(IndexError):
        static.batch(np.array([-1]))


def test_pinned_threads_give_the_same_weights_whatever_threads_the_process_has(tmp_path):
    """``pretrain.threads`` fixes the run's intra-op threads, so a study's workers (each with its share
    of the cores) train the models a one-worker study trains; unpinned, the thread count shows in the
    weights (the check can fail)."""
    before = torch.get_num_threads()
    data = tiny_data(64, vocab=500, lengths=(120, 121), masked=18)  # the default model's width: reductions split

    def weights(process_threads, threads):
        torch.manual_seed(0)
        config = BertConfig(vocab_size=500, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=512, max_position_embeddings=128)
        model = PretrainingModel(BertForMaskedLM(config))
        torch.set_num_threads(process_threads)
        try:
            summary = train.fn(model, data, cfg(token_budget=8 * 120 * 10, batch_size=8, threads=threads), seed=1,
                               device=torch.device("cpu"), checkpoint=tmp_path / f"{process_threads}-{threads}.pt",
                               fingerprint="f", log=lambda _: None)
            assert torch.get_num_threads() == process_threads  # restored
        finally:
            torch.set_num_threads(before)
        assert summary["threads"] == (threads or process_threads)
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    assert not torch.equal(weights(1, None), weights(2, None))
    assert torch.equal(weights(1, 2), weights(2, 2))


@pytest.mark.slow
def test_a_sweep_without_settings_records_the_params_recipe_and_trains_nothing(project, prefect_server):
    """The default run's sweep (``sweep.settings: {}``): pretrain trains with params' own recipe; no data is read."""
    import yaml

    from flows.sweep import sweep
    from tasks.core.io import read_json
    from tasks.core.params import load_params
    from tasks.pretraining.recipe import recipe

    params = yaml.safe_load((project / "params.yaml").read_text(encoding="utf-8"))
    params["sweep"]["settings"] = {}
    (project / "params.yaml").write_text(yaml.safe_dump(params, allow_unicode=True), encoding="utf-8")
    sweep("mlm")  # no pretraining data, tokenizer or held-out text exists in the project
    assert read_json(project / "data" / "recipes" / "mlm.json") == {"chosen": "params", "overrides": {}}
    metrics = read_json(project / "metrics" / "sweep" / "mlm.json")
    assert metrics["chosen"] == "params" and metrics["settings"] == []
    cfg, chosen = recipe(load_params(), "mlm", project / "data" / "recipes" / "mlm.json")
    assert chosen == "params" and cfg.learning_rate == params["pretrain"]["learning_rate"]


def test_time_left_is_the_rest_at_the_pace_so_far():
    from tasks.training.loop import time_left

    assert time_left(30.0, 100, 400) == "1:30 left"
    assert time_left(0.0, 0, 10) == "0:00 left" and time_left(125.0, 1, 2) == "2:05 left"


def diverging(model, after: int):
    """``model`` whose loss turns NaN from its ``after``-th forward pass on (a planted divergence)."""
    forward, calls = model.forward, []

    def nan_after(batch):
        calls.append(1)
        loss, parts = forward(batch)
        return (loss * float("nan") if len(calls) > after else loss), parts
    model.forward = nan_after
    return model, calls


def test_a_diverging_pretraining_stops_at_the_first_log_row_naming_step_loss_and_recipe(tmp_path):
    from tasks.core.errors import DivergedError
    model, calls = diverging(tiny_model(), after=7)
    with pytest.raises(DivergedError, match=r"loss nan at step 10/\d+ \(pretraining lr .* of peak 0.001, warm-up 0.1"):
        train.fn(model, tiny_data(), cfg(), seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "a.pt",
                 fingerprint="f", log=lambda _: None)
    assert len(calls) == 10  # stopped at the log row (log_every 5) that first saw the NaN, not at the budget's end


def test_a_sweep_setting_that_diverged_loses_and_a_sweep_with_no_setting_that_learned_fails_naming_each():
    from tasks.core.errors import PipelineError
    from tasks.pretraining.sweep import choose
    passed = {"name": "loss 0.1 nats below the unigram loss", "passed": True}
    failed = {"name": "mean cosine between token states", "passed": False}
    results = {"lr_2e-3": {"score": None, "diverged": "training diverged: loss nan at step 40/200", "gates": []},
               "lr_1e-3": {"score": -6.4, "gates": [passed, failed]},
               "lr_5e-4": {"score": -6.5, "gates": [passed]}}
    assert choose("wwm", results) == "lr_5e-4"  # the best score lost: its model collapsed
    assert choose("wwm", results, learned_only=False) == "lr_1e-3"  # the best finite score, gates aside
    del results["lr_5e-4"]
    with pytest.raises(PipelineError, match=r"sweep wwm: no setting learned at the sweep's horizon \(lr_2e-3: "
                                            r"diverged; lr_1e-3: failed mean cosine between token states\)"):
        choose("wwm", results)


def test_a_fine_tuning_or_distillation_history_stops_a_non_finite_loss_at_its_log_row():
    from tasks.core.errors import DivergedError
    from tasks.training.loop import History
    logged = []
    history = History(20, logged.append, recipe="fine-tuning lr 0.001")  # a log row every 4 steps, of the last 2
    for step, loss in enumerate([0.7, 0.6, 0.6, 0.5, 0.5, 0.4, float("inf")], start=1):
        history.add(step, loss=torch.tensor(loss))
    with pytest.raises(DivergedError, match=r"loss inf at step 8/20 \(fine-tuning lr 0.001\)"):
        history.add(8, loss=torch.tensor(0.4))
    assert len(logged) == 1  # step 4's row; the run stopped at step 8's


@pytest.mark.parametrize("text, why", [
    ("{not json", "is not JSON"),
    ('{"chosen": "lr1e-3"}', "is not a sweep's choice"),
    ('{"chosen": "lr1e-3", "overrides": {"learning_rate": "fast"}}', "learning_rate: Input should be a valid number"),
    ('{"chosen": "lr1e-3", "overrides": {"learnig_rate": 0.001}}', "learnig_rate: Extra inputs are not permitted"),
])
def test_a_corrupt_or_invalid_recipe_choice_names_the_file_and_what_is_wrong(tmp_path, text, why):
    from tasks.core.errors import SourceError
    from tasks.core.params import load_params
    from tasks.pretraining.recipe import recipe
    choice = tmp_path / "mlm.json"
    choice.write_text(text)
    with pytest.raises(SourceError, match=rf"^{choice}.*{why}.*sweep@mlm"):
        recipe(load_params(Path(__file__).parents[1] / "params.yaml"), "mlm", choice)


def test_more_pretraining_threads_than_cores_is_a_warning(monkeypatch):
    from tasks.pretraining.pretrain import intra_op_threads
    monkeypatch.setattr("os.sched_getaffinity", lambda _: {0, 1})
    logged = []
    with intra_op_threads(99, torch.device("cpu"), logged.append):
        assert torch.get_num_threads() == 99
    assert logged == ["warning: pretrain.threads 99 > the 2 cores this process may use: the threads thrash (a slower "
                      "run, same result); pretrain.threads: 2 fits them"]
    with intra_op_threads(2, torch.device("cpu"), logged.append):
        pass
    assert len(logged) == 1


def test_a_sweep_setting_leaves_no_checkpoint_or_lock_and_records_its_gates(tmp_path):
    """Every sweep left checkpoints/sweep/<objective>/<setting>.pt.lock behind."""
    from tasks.pretraining.gates import unigram_log_probs
    from tasks.core.params import load_params
    from tasks.pretraining.objectives import build
    from tasks.pretraining.sweep import run_setting
    from tests.conftest import ROOT
    rng = np.random.default_rng(0)
    offsets = np.concatenate([[0], np.cumsum(rng.integers(8, 20, 30))])
    ids = rng.integers(5, 60, offsets[-1])
    masks = dict(lang="dev", seed=1, mask_token_id=3, masked_lm_prob=0.15, max_predictions=5,
                 device=torch.device("cpu"))
    folder = tmp_path / "checkpoints" / "sweep" / "mlm"
    mlm = build(load_params(ROOT / "params.yaml"), "mlm")
    result = run_setting(mlm, tiny_model, tiny_data(), cfg(), 0.5, seed=1, device=torch.device("cpu"),
                         checkpoint=folder / "lr1e-3.pt", fingerprint="f", heldout=(ids, offsets), masks=masks,
                         unigram=unigram_log_probs(np.bincount(ids, minlength=60)), log=lambda _: None)
    assert not folder.exists()
    assert [g["name"] for g in result["gates"]] == ["accuracy above the top token's",
                                                    "loss 0.1 nats below the unigram loss",
                                                    "mean cosine between token states"]
    assert result["score"] == -result["loss"] and result["steps"] > 0


def test_a_budget_too_small_for_the_snapshots_is_refused_naming_the_budget_that_fits(tmp_path):
    """Snapshots at 1/8, 1/4 and 1/2 of a 3-step run fall on the same steps: one was never kept and a later stage
    died with FileNotFoundError. The run now stops before training, naming a budget that keeps them apart."""
    data, kept = tiny_data(), []
    setting = cfg(token_budget=150)
    with pytest.raises(ParamsError, match=r"pretrain.token_budget: 150 tokens make \d step\(s\) of 4 sequences, too "
                                          r"few to keep the snapshots at \[0.125, 0.25, 0.5\] of the budget at "
                                          r"distinct steps: give at least (\d|,)+$") as raised:
        train.fn(tiny_model(), data, setting, seed=1, device=torch.device("cpu"), checkpoint=tmp_path / "c.pt",
                 fingerprint="f", log=lambda _: None, snapshots=(0.125, 0.25, 0.5))
    enough = int(str(raised.value).rsplit(" ", 1)[1].replace(",", ""))
    train.fn(tiny_model(), data, cfg(token_budget=enough), seed=1, device=torch.device("cpu"),
             checkpoint=tmp_path / "c.pt", fingerprint="f", log=lambda _: None, snapshots=(0.125, 0.25, 0.5),
             snapshot=lambda fraction, at: kept.append(fraction))
    assert kept == [0.125, 0.25, 0.5]
