"""Lightning: return a :class:`SiftingDataLoader` from ``train_dataloader``.

    class Module(L.LightningModule):
        def train_dataloader(self):
            return sifting_dataloader(self, DataLoader(...), SiftConfig(beta=1), hf_loss)

Needs ``pip install siftcli[lightning]``. Lightning counts batches with ``len()``, which
the sifting loader provides. Mix in :class:`SiftedTrainingStep` instead of writing a
``training_step``: the per-sample loss of ``loss_fn`` is recorded for free scores and weighted
by the rule, so memory scoring, the ``auto`` delay and ``infobatch`` work with no code. A module
with its own ``training_step`` returns ``self.sifted.training_loss(per_sample_losses)`` instead.

    class Module(SiftedTrainingStep, L.LightningModule):
        def train_dataloader(self):
            return sifting_dataloader(self, DataLoader(...), SiftConfig(scoring="memory"), hf_loss)
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.losses import PerSampleLoss
from siftcli.sift.sifter import SiftConfig
from siftcli.sift.stateful import BatchSource


def sifting_dataloader(module: Any, dataloader: BatchSource, config: SiftConfig, loss_fn: PerSampleLoss,
                       **kwargs: Any) -> SiftingDataLoader:
    """Wrap ``dataloader`` so the LightningModule scores its own batches (also ``module.sifted``).

    ``module`` is the LightningModule, or a LightningDataModule (the module is then found through its trainer, as in
    Lightning's own tutorials where the DataModule owns ``train_dataloader``). Under DDP a plain ``DataLoader`` gets a
    ``DistributedSampler`` here, as Lightning gives one to a loader it sees itself (it cannot see inside this one), so
    each rank reads its own shard.

    Lightning plans validation from the ``len()`` it reads when fit starts (an epoch validates when its batch index
    reaches it, whatever ``val_check_interval`` says), so the loader yields exactly ``len()`` batches every epoch
    (``exact_len``, on unless ``exact_len=False`` is passed): the run's expected batches per epoch, every raw row offered.
    With ``limit_train_batches`` Lightning stops each epoch early; the sifted epoch ends there too (the next epoch is a
    new pass, as over a plain loader), so the planned steps, the schedule and every validation are the plain run's.
    """
    trainer = getattr(module, "_trainer", None) or getattr(module, "trainer", None)
    model = module
    if not isinstance(module, torch.nn.Module) or not any(True for _ in module.parameters()):
        model = getattr(trainer, "lightning_module", None)
        if model is None:
            raise ValueError("sifting_dataloader: the first argument has no parameters and no trainer to find the "
                             "LightningModule through; pass the LightningModule (self in its train_dataloader), or call "
                             "this from a DataModule's train_dataloader while the Trainer runs")
    kwargs.setdefault("exact_len", True)
    if "epochs" not in kwargs and (getattr(trainer, "max_epochs", None) or 0) > 0:
        kwargs["epochs"] = trainer.max_epochs
    loader = SiftingDataLoader(sharded(dataloader, trainer), model, loss_fn, config, **kwargs)
    if trainer is not None and hasattr(trainer, "num_training_batches"):
        # limit_train_batches stops each epoch at Lightning's own count (min(len, limit), or a fraction of len):
        # there the epoch ends, and the next starts a new pass, as over a plain loader
        loader.pass_limit = lambda: float(trainer.num_training_batches)
    model.sifted = loader
    return loader


def sharded(dataloader: BatchSource, trainer: Any) -> BatchSource:
    """A plain ``DataLoader`` re-made with a ``DistributedSampler`` when the trainer runs several processes (Lightning's
    own helper re-makes it with every argument it was given), as Lightning does to a loader it sees itself; the compat
    ``SiftingDataloader`` calls it too."""
    world = int(getattr(trainer, "world_size", 1) or 1)
    if world < 2 or type(dataloader) is not DataLoader or isinstance(dataloader.sampler, DistributedSampler):
        return dataloader
    from lightning.fabric.utilities.data import _update_dataloader

    shuffle = isinstance(dataloader.sampler, RandomSampler)
    sampler = DistributedSampler(dataloader.dataset, num_replicas=world, rank=int(trainer.global_rank), shuffle=shuffle,
                                 seed=int(os.environ.get("PL_GLOBAL_SEED", 0)))
    return _update_dataloader(dataloader, sampler)


class SiftedTrainingStep:
    """Mixin for a ``LightningModule`` whose ``train_dataloader`` returns :func:`sifting_dataloader`: its
    ``training_step`` is the sifted loss (recorded and weighted, see :meth:`SiftingDataLoader.training_loss`)."""

    sifted: SiftingDataLoader

    def training_step(self, batch: Any, batch_idx: int = 0) -> torch.Tensor:
        sifted = getattr(self, "sifted", None)
        if not isinstance(sifted, SiftingDataLoader):
            raise AttributeError(
                f"{type(self).__name__} uses SiftedTrainingStep, but no sifting loader was made for it: Lightning took the "
                "training loader from elsewhere (a LightningDataModule's train_dataloader is used instead of the "
                "module's). Return sifting_dataloader(self, DataLoader(...), config, loss_fn) from the train_dataloader "
                "Lightning calls; in a DataModule, self is the DataModule and the module is found through the trainer")
        return sifted.training_loss(sifted.scorer.loss_fn(self, batch))
