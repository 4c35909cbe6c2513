"""Run by tests/test_parallel.py under torchrun: the Lightning tutorial shape (a DataModule owns train_dataloader) on 2
processes with DDP; writes rank<N>.json in the working folder: the rows this rank trained on, steps, validation epochs.
``plain`` as the first argument: the same module on a plain DataLoader (for ``python -m benchmarks library-shapes``);
``compat``: the SageMaker smart-sifting shape (the compat ``SiftingDataloader`` made in the DataModule, the module's own
mean-loss training step)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import lightning.pytorch as L
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from siftcli.compat.smart_sifting import (  # noqa: E402
    Loss,
    LossConfig,
    RelativeProbabilisticSiftConfig,
    SiftingBaseConfig,
    SiftingDataloader,  # noqa: E402
)
from siftcli.integrations.lightning import SiftedTrainingStep, sifting_dataloader  # noqa: E402
from siftcli.sift import SiftConfig  # noqa: E402
from siftcli.sift.losses import cross_entropy_loss  # noqa: E402

x = torch.randn(128, 4, generator=torch.Generator().manual_seed(0))
data = TensorDataset(x, (x[:, 0] > 0).long())


class Module(SiftedTrainingStep, L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 2)
        self.validated = 0

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.net(inputs)

    def validation_step(self, batch, batch_idx: int) -> None:  # noqa: ANN001
        self.log("val_loss", torch.nn.functional.cross_entropy(self(batch[0]), batch[1]), sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        if not self.trainer.sanity_checking:
            self.validated += 1

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


PLAIN, COMPAT = sys.argv[1:2] == ["plain"], sys.argv[1:2] == ["compat"]


class CELoss(Loss):
    def loss(self, model, transformed_batch, original_batch=None):  # noqa: ANN001, ANN201
        return torch.nn.functional.cross_entropy(model(original_batch[0]), original_batch[1], reduction="none")


class Data(L.LightningDataModule):
    def train_dataloader(self):  # noqa: ANN201
        if PLAIN:
            return DataLoader(data, batch_size=8, shuffle=True)
        if COMPAT:
            config = RelativeProbabilisticSiftConfig(beta_value=1, loss_history_length=100, loss_based_sift_config=LossConfig(
                sift_config=SiftingBaseConfig(sift_delay=0)))
            module.sifted = SiftingDataloader(sift_config=config, orig_dataloader=DataLoader(data, batch_size=8, shuffle=True),
                                              loss_impl=CELoss(), model=module)
            return module.sifted
        return sifting_dataloader(self, DataLoader(data, batch_size=8, shuffle=True), SiftConfig(beta=1.0, sift_delay=0,
                                  mode="probabilistic"), cross_entropy_loss)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(data, batch_size=16)


module = Module()
rows: list[int] = []
trainer = L.Trainer(max_epochs=2, accelerator="cpu", devices=2, strategy="ddp", logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=True)
data_module = Data()
orig = data_module.train_dataloader


def recording():  # noqa: ANN202
    loader = orig()
    loader.add_batch_hook(lambda d: rows.extend(d.indices.tolist()))
    return loader


if PLAIN or COMPAT:  # a plain training step (on a plain loader, or the compat one, which records nothing back)
    Module.training_step = lambda self, batch, batch_idx: torch.nn.functional.cross_entropy(self(batch[0]), batch[1])
if not PLAIN:
    data_module.train_dataloader = recording
trainer.fit(module, data_module)
Path(f"rank{dist.get_rank()}.json").write_text(json.dumps({
    "rank": dist.get_rank(), "rows": rows, "steps": trainer.global_step, "validated": module.validated,
    "raw": 128 if PLAIN else module.sifted.stats.raw_samples, "kept": 128 if PLAIN else module.sifted.stats.kept_samples,
    "planned": trainer.estimated_stepping_batches,
    "weights": [float(p.detach().sum()) for p in module.parameters()]}))
dist.barrier()
os._exit(0)  # results written, ranks met: skip the interpreter's finalisation, where gloo's threads now and then
#             abort the process ("terminate called without an active exception") after all is done
