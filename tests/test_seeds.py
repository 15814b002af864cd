"""map_seeds: one run per seed, side by side in spawned single-thread workers (tasks.training.seeds)."""

import logging
import os

import pytest
import torch

from tasks.core.errors import SourceError
from tasks.downstream.finetune import fit
from tasks.training.seeds import map_seeds
from tests.test_compression import Toy, classifier, train_args

CPU = torch.device("cpu")


def toy_run(seed, log=print):
    """A seed's run as the stages pass one: fine-tune a toy classifier under ``seed`` with ``fit``."""
    if seed == 13:
        raise SourceError("seed 13: a truncated file")
    model = classifier(seed).train()
    summary = fit(model, Toy(), **{**train_args(seed), "log": log})
    return {"pid": os.getpid(), "threads": summary["threads"]}, model


def test_seeds_side_by_side_match_a_single_thread_run_whatever_the_workers(caplog):
    with caplog.at_level(logging.INFO):
        three = map_seeds(toy_run, [1, 2, 3], 3, CPU, "toy")
    assert len({r["pid"] for r, _ in three} | {os.getpid()}) == 4  # one worker process per seed
    assert all(r["threads"] == 1 for r, _ in three)
    assert sum(m.startswith("toy-seed-2: step") for m in caplog.messages) >= 1  # workers' lines relayed
    two = map_seeds(toy_run, [1, 2, 3], 2, CPU, "toy")  # the third seed waits for a free worker
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        alone = [toy_run(seed, log=lambda _: None)[1] for seed in (1, 2, 3)]
    finally:
        torch.set_num_threads(threads)
    for (_, a), (_, b), c in zip(three, two, alone):  # results in seed order, equal bit for bit
        for (name, x), y, z in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
            assert torch.equal(x, y) and torch.equal(x, z), name
    assert not torch.equal(three[0][1].classifier.weight, three[1][1].classifier.weight)  # seeds differ


def test_a_failing_seed_fails_the_stage_with_its_error():
    with pytest.raises(SourceError, match="seed 13: a truncated file"):
        map_seeds(toy_run, [1, 13], 2, CPU, "toy")


def test_one_worker_runs_the_seeds_in_turn_here_as_prefect_tasks(prefect_server):
    from prefect import flow

    in_turn = flow(name="toy")(lambda: map_seeds(toy_run, [2, 1], 1, CPU, "toy"))()
    assert [r["pid"] for r, _ in in_turn] == [os.getpid()] * 2
    assert [r["threads"] for r, _ in in_turn] == [torch.get_num_threads()] * 2  # all of this process's threads
    for (_, model), seed in zip(in_turn, [2, 1]):  # in the order given
        expected = toy_run(seed, log=lambda _: None)[1]
        assert all(torch.equal(x, y) for x, y in zip(model.state_dict().values(), expected.state_dict().values()))
