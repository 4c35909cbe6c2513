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

from typing import Any

import torch

from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.losses import PerSampleLoss
from siftcli.sift.sifter import SiftConfig


def sifting_dataloader(module: torch.nn.Module, dataloader: Any, config: SiftConfig, loss_fn: PerSampleLoss,
                       **kwargs: Any) -> SiftingDataLoader:
    """Wrap ``dataloader`` so the LightningModule ``module`` scores its own batches (also ``module.sifted``)."""
    if config.anneal_fraction and "epochs" not in kwargs:
        trainer = getattr(module, "_trainer", None)
        kwargs["epochs"] = getattr(trainer, "max_epochs", None)
    loader = SiftingDataLoader(dataloader, module, loss_fn, config, **kwargs)
    module.sifted = loader
    return loader


class SiftedTrainingStep:
    """Mixin for a ``LightningModule`` whose ``train_dataloader`` returns :func:`sifting_dataloader`: its
    ``training_step`` is the sifted loss (recorded and weighted, see :meth:`SiftingDataLoader.training_loss`)."""

    sifted: SiftingDataLoader

    def training_step(self, batch: Any, batch_idx: int = 0) -> torch.Tensor:
        return self.sifted.training_loss(self.sifted.scorer.loss_fn(self, batch))
