"""Run by tests/test_shapes.py under torchrun (2 processes, gloo): published scripts' shapes, plain and sifted.

``accelerate-plain`` / ``accelerate-sifted``: accelerate's ``nlp_example.py`` shape (prepare, a linear schedule planned
from ``len(train_dataloader)``, gradient accumulation 2 under ``accelerator.accumulate``). ``tutorial-plain`` /
``tutorial-sifted``: the PyTorch DDP tutorial's ``multigpu_torchrun.py`` loop (a ``DistributedSampler``, ``DDP``,
``sampler.set_epoch`` and the peek at the batch size every epoch). Each rank writes rank<N>.json in the working folder.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss  # noqa: E402

SHAPE, SIFTED = sys.argv[1].split("-")[0], sys.argv[1].endswith("sifted")
EPOCHS = 3
x = torch.randn(96, 4, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x, (x[:, 0] > 0).long())
torch.manual_seed(0)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
rows: list[list[int]] = []  # the rows this rank was offered, per epoch
out: dict = {}


def record_rows(loader: SiftingDataLoader) -> None:
    loader.add_batch_hook(lambda d: rows[-1].extend(d.indices.tolist()))


if SHAPE == "accelerate":  # the shape tests/test_shapes.py runs in one process, here on each rank
    from tests.test_shapes import accelerate_loop

    out = accelerate_loop(SIFTED, accumulation=2, epochs=EPOCHS, n=len(data))
    rows, weights = out.pop("rows"), out.pop("weights")
else:  # the DDP tutorial
    dist.init_process_group("gloo")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    train_data = DataLoader(data, batch_size=8, shuffle=False, sampler=DistributedSampler(data))  # prepare_dataloader
    if SIFTED:
        train_data = SiftingDataLoader(train_data, ddp, cross_entropy_loss, SiftConfig(beta=1.0, sift_delay=0, seed=0))
        record_rows(train_data)
    steps = 0
    for epoch in range(EPOCHS):
        rows.append([])
        b_sz = len(next(iter(train_data))[0])  # the tutorial's peek
        train_data.sampler.set_epoch(epoch)
        for source, targets in train_data:
            if not SIFTED:
                rows[-1].extend([-1] * len(targets))
            optimizer.zero_grad()
            losses = torch.nn.functional.cross_entropy(ddp(source), targets, reduction="none")
            (train_data.training_loss(losses) if SIFTED else losses.mean()).backward()
            optimizer.step()
            steps += 1
    out = {"steps": steps, "b_sz": b_sz, "epochs": train_data.epoch if SIFTED else EPOCHS}
    if SIFTED:  # the tutorial's snapshot, as siftcli's docs change it: every rank saves its own loader state
        state = train_data.state_dict()
        out["state_rank"] = state["rank"]
    weights = [float(p.detach().sum()) for p in model.parameters()]

out.update(rank=dist.get_rank(), rows=rows, weights=weights)
Path(f"rank{dist.get_rank()}.json").write_text(json.dumps(out))
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # results written, ranks met: skip the interpreter's finalisation, where gloo's threads now and then
#             abort the process ("terminate called without an active exception") after all is done
