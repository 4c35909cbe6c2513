"""Run by tests/test_shapes.py under torchrun (2 processes, gloo): published scripts' shapes, plain and sifted.

``accelerate-plain`` / ``accelerate-sifted``: accelerate's ``nlp_example.py`` shape (prepare, a linear schedule planned
from ``len(train_dataloader)``, gradient accumulation 2 under ``accelerator.accumulate``). ``tutorial-plain`` /
``tutorial-sifted``: the PyTorch DDP tutorial's ``multigpu_torchrun.py`` loop (a ``DistributedSampler``, ``DDP``,
``sampler.set_epoch`` and the peek at the batch size every epoch). Each rank writes rank<N>.json in the working folder.
"""

from __future__ import annotations

import json
import math
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


if SHAPE == "accelerate":
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=8, shuffle=True))
    if SIFTED:
        loader = SiftingDataLoader(loader, model, cross_entropy_loss, SiftConfig(beta=1.0, sift_delay=0, seed=0),
                                   exact_len=True, epochs=EPOCHS)
        record_rows(loader)
    planned = EPOCHS * math.ceil(len(loader) / 2)
    scheduler = accelerator.prepare(torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1 - s / planned)))
    steps, last_synced = 0, []
    for _ in range(EPOCHS):
        rows.append([])
        n = len(loader)
        for i, (inputs, labels) in enumerate(loader):
            if not SIFTED:
                rows[-1].extend([-1] * len(labels))  # a plain loader does not say which rows: count them
            with accelerator.accumulate(model):
                losses = torch.nn.functional.cross_entropy(model(inputs), labels, reduction="none")
                accelerator.backward(loader.training_loss(losses) if SIFTED else losses.mean())
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                steps += accelerator.sync_gradients
                if i == n - 1:
                    last_synced.append(accelerator.sync_gradients)
    out = {"steps": steps, "planned": planned, "lr": scheduler.get_last_lr()[0], "last_synced": last_synced}
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

out.update(rank=dist.get_rank(), rows=rows, weights=[float(p.detach().sum()) for p in model.parameters()])
Path(f"rank{dist.get_rank()}.json").write_text(json.dumps(out))
dist.barrier()
