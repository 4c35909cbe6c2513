"""Scaled-out sifting never deadlocks, in every mode: every rank yields the same number of batches, and one
global history ranks every rank's samples (the torchrun runs through the CLI are in test_parallel.py)."""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset

from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss

N = 240
MODES = {
    "probabilistic": {"beta": 1.0, "sift_delay": 2},
    "calibrated": {"mode": "calibrated", "beta": 1.0, "sift_delay": 2},
    "infobatch+anneal": {"mode": "infobatch", "anneal_fraction": 0.2},
    "random": {"mode": "random", "keep_fraction": 0.3, "sift_delay": 2},
    "memory": {"beta": 1.0, "sift_delay": 2, "scoring": "memory"},
    "auto-delay": {"beta": 1.0, "sift_delay": "auto"},
    "reducible": {"beta": 1.0, "sift_delay": 2, "score": "reducible"},
}


def _skewed_loss(model, batch):  # noqa: ANN001, ANN202
    """Rank 0's losses x10, rank 1's x0.1: against one global ranking rank 1 keeps far fewer samples."""
    return cross_entropy_loss(model, batch) * (10.0 if dist.get_rank() == 0 else 0.1)


def _worker(rank: int, world: int, init_file: str, out_dir: str, uneven: bool) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(rank)  # different data per rank
        n = N + (8 if uneven and rank == 1 else 0)
        x = torch.randn(n, 4, generator=g)
        y = (x[:, 0] > 0).long()
        model = torch.nn.Linear(4, 2)
        results = {}
        for name, changes in MODES.items():
            cfg = SiftConfig(loss_history_length=64, seed=0, **changes)
            reference = torch.rand(n) if cfg.score == "reducible" else None
            loader = SiftingDataLoader(DataLoader(TensorDataset(x, y), batch_size=8), model, _skewed_loss, cfg,
                                       reference_losses=reference, epochs=2, exact_len=False)  # the surplus is dropped, counted
            counts = []
            try:
                for _ in range(2):
                    batches = 0
                    for batch in loader:
                        loader.training_loss(_skewed_loss(model, batch).detach())  # records losses (memory, auto)
                        flag = torch.ones(1)
                        dist.all_reduce(flag)  # a collective per batch, like DDP's gradient all-reduce
                        batches += 1
                    counts.append(batches)
            except ValueError as exc:
                results[name] = {"error": str(exc)}
                continue
            results[name] = {"batches": counts, "kept": loader.stats.kept_samples, "dropped": loader.stats.dropped_to_sync,
                             "history": loader.sifter.history.tolist(), "started": loader.sifter.started_at}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()


def _leave() -> None:
    """End a finished worker without Python's finalisation, where torch's gloo threads now and then abort the process
    ("terminate called without an active exception", no Python frame) after its results are written."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run(tmp_path: Path, uneven: bool = False, worker=_worker) -> list[dict]:  # noqa: ANN001
    ctx = mp.spawn(worker, args=(2, str(tmp_path / "init"), str(tmp_path), uneven), nprocs=2, join=False)
    deadline = time.monotonic() + 150
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:  # a deadlock fails the test instead of hanging CI
            for p in ctx.processes:
                p.kill()
            raise AssertionError("ranks deadlocked")
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
def test_every_mode_yields_equal_batches_with_one_global_history(tmp_path: Path) -> None:
    ranks = _run(tmp_path)
    for name in MODES:
        r0, r1 = ranks[0][name], ranks[1][name]
        assert "error" not in r0, (name, r0)
        assert r0["batches"] == r1["batches"], name  # equal steps on every rank: no all-reduce waits forever
        assert r0["history"] == r1["history"], name  # one history, gathered from both ranks, in the same order
        assert r0["started"] == r1["started"], name
        assert 0 < r1["kept"] <= 2 * N, name
    # one global ranking: rank 1's losses are 100x smaller, so it keeps far fewer (the surplus is counted, not trained)
    for name in ("probabilistic", "memory", "reducible"):
        assert ranks[0][name]["kept"] > ranks[1][name]["kept"] + 100, (name, ranks[0][name]["kept"], ranks[1][name]["kept"])
    assert ranks[0]["probabilistic"]["dropped"] > 0
    for name in ("random", "calibrated"):  # a fixed count per raw batch: nothing skews it
        assert ranks[0][name]["kept"] == ranks[1][name]["kept"], name


@pytest.mark.slow
def test_ranks_with_different_numbers_of_raw_batches_fail_together_instead_of_hanging(tmp_path: Path) -> None:
    ranks = _run(tmp_path, uneven=True)
    for name in MODES:
        for r in ranks:
            assert "different numbers of raw batches per epoch (30 to 31)" in r[name]["error"]


#: (scoring, per-rank batch size, kept fraction, learning rate): the GPU's decision order under torchrun, where whether a
#: rank's raw batch must wait for its scores depends on its own samples (memory scoring: all remembered, or not).
ORDER_CASES = [("memory", 2, 0.3, 0.0), ("memory", 4, 0.9, 0.1), ("fresh", 3, 0.5, 0.1), ("memory", 3, 0.6, 0.0),
               ("memory", 3, 0.5, 0.1)]
COLLECTIVES = ("all_reduce", "all_gather", "broadcast", "all_gather_object", "broadcast_object_list")


def _order_worker(rank: int, world: int, init_file: str, out_dir: str, _: bool) -> None:
    """Each case trained 8 passes (one left early and taken up again), in the GPU's order and the CPU's, gradients
    averaged by hand as DDP does; every collective this process makes is counted."""
    from siftcli.sift import loader as loader_module

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=30))
    calls: list[str] = []  # each collective this rank made, in order, with its size: one sequence on every rank

    def counted(name: str, original):  # noqa: ANN001, ANN202
        def call(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            first = args[0] if args else None
            calls.append(f"{name}:{first.numel() if isinstance(first, torch.Tensor) else len(first or [])}")
            return original(*args, **kwargs)
        return call

    for name in COLLECTIVES:
        setattr(dist, name, counted(name, getattr(dist, name)))
    results = {}
    try:
        for order, devices in (("gpu", ("cuda", "cpu")), ("cpu", ("cuda",))):
            loader_module.OVERLAP_DEVICES = devices
            for scoring, batch, keep, lr in ORDER_CASES:
                calls.clear()
                g = torch.Generator().manual_seed(rank)  # different data per rank
                x = torch.randn(10 * batch + 1, 4, generator=g)
                y = (x[:, 0] > 0).long()
                torch.manual_seed(0)  # the same initial weights on every rank
                model = torch.nn.Linear(4, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=lr)
                # each rank draws its own keep decisions: which rows its next epoch must score differs by rank
                cfg = SiftConfig(beta=1 / keep - 1, loss_history_length=16, seed=0, scoring=scoring)
                loader = SiftingDataLoader(DataLoader(TensorDataset(x, y), batch_size=batch), model, cross_entropy_loss, cfg)
                passes = []
                for p in range(8):
                    yielded = 0
                    for i, b in enumerate(loader):
                        loader.training_loss(cross_entropy_loss(model, b)).backward()
                        for param in model.parameters():  # DDP's gradient all-reduce, one collective per batch
                            dist.all_reduce(param.grad)
                            param.grad /= world
                        optimizer.step()
                        optimizer.zero_grad()
                        yielded += 1
                        if p == 3 and i == 1:  # a pass left early: the next one takes its epoch up again
                            break
                    passes.append(yielded)
                results[f"{order}/{scoring}/{batch}/{keep}/{lr}"] = {
                    "collectives": dict(Counter(c.split(":")[0] for c in calls)), "sequence": list(calls),
                    "passes": passes, "epoch": loader.epoch,
                    "weights": [p.detach().flatten().tolist() for p in model.parameters()]}
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(results))
    finally:
        dist.destroy_process_group()
    _leave()


@pytest.mark.slow
def test_the_gpu_decision_order_joins_the_same_collectives_on_every_rank(tmp_path: Path) -> None:
    """A raw batch decided at once on one rank and held for its scores on another must not shift the ranks'
    collectives against each other (a hang, or a gloo size mismatch, before the fix): in both decision orders every
    rank makes the same collectives, yields the same batches and ends with the same weights."""
    ranks = _run(tmp_path, worker=_order_worker)
    assert len(ranks[0]) == 2 * len(ORDER_CASES)
    for case, r0 in ranks[0].items():
        r1 = ranks[1][case]
        assert r0["collectives"]["all_gather"] > 0, case
        assert r0["sequence"] == r1["sequence"], (case, r0["collectives"], r1["collectives"])
        assert r0["passes"] == r1["passes"] and r0["epoch"] == r1["epoch"] == 7, case  # pass 4 continued epoch 3
        assert r0["weights"] == r1["weights"], case


@pytest.mark.parametrize("world", [1, 2, 3])
def test_seeded_sampler_shards_evenly_and_covers_the_data(world: int) -> None:
    from siftcli.training.setup import SeededSampler

    shards = [list(SeededSampler(10, seed=3, rank=r, world=world)) for r in range(world)]
    assert len({len(s) for s in shards}) == 1 and all(len(s) == -(-10 // world) for s in shards)
    assert set().union(*shards) == set(range(10))
    if world == 1:
        assert shards[0] == torch.randperm(10, generator=torch.Generator().manual_seed(3 * 100_003)).tolist()
