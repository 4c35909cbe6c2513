"""Lightning: return a :class:`SiftingDataLoader` from ``train_dataloader``.

    class Module(L.LightningModule):
        def train_dataloader(self):
            return sifting_dataloader(self, DataLoader(...), SiftConfig(beta=1), hf_loss)

Needs ``pip install siftcli[lightning]``. Lightning counts batches with ``len()``, which
the sifting loader provides.
"""

from __future__ import annotations

from typing import Any

import torch

from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.losses import PerSampleLoss
from siftcli.sift.sifter import SiftConfig


def sifting_dataloader(module: torch.nn.Module, dataloader: Any, config: SiftConfig, loss_fn: PerSampleLoss,
                       **kwargs: Any) -> SiftingDataLoader:
    """Wrap ``dataloader`` so the LightningModule ``module`` scores its own batches."""
    return SiftingDataLoader(dataloader, module, loss_fn, config, **kwargs)
