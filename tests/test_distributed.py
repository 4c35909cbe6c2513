"""Scaled-out runs never deadlock: every rank yields the same number of batches."""

from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset

from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        g = torch.Generator().manual_seed(rank)  # different data per rank, so decisions differ
        x = torch.randn(240, 4, generator=g) * (1 + 2 * rank)
        y = (x[:, 0] > 0).long()
        loader = SiftingDataLoader(DataLoader(TensorDataset(x, y), batch_size=8), torch.nn.Linear(4, 2), cross_entropy_loss,
                                   SiftConfig(beta=1.0, loss_history_length=64, sift_delay=2, seed=rank))
        counts = []
        for _ in range(2):
            n = 0
            for _batch in loader:
                flag = torch.ones(1)
                dist.all_reduce(flag)  # a collective per batch, like DDP's gradient all-reduce
                n += 1
            counts.append(n)
        Path(out_dir, f"rank{rank}.txt").write_text(",".join(map(str, counts)) + f";{loader.stats.kept_samples}")
    finally:
        dist.destroy_process_group()


def test_ranks_yield_equal_batches_and_do_not_deadlock(tmp_path: Path) -> None:
    ctx = mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=False)
    deadline = time.monotonic() + 120
    while not ctx.join(timeout=1):
        if time.monotonic() > deadline:  # a deadlock fails the test instead of hanging CI
            for p in ctx.processes:
                p.kill()
            raise AssertionError("ranks deadlocked")
    results = [(tmp_path / f"rank{r}.txt").read_text() for r in range(2)]
    counts = [r.split(";")[0] for r in results]
    kept = [int(r.split(";")[1]) for r in results]
    assert counts[0] == counts[1]
    assert kept[0] == kept[1] and 0 < kept[0] < 480
