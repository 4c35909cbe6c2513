"""Loss memory: each sample's last known loss, by dataset index, and the epoch it was recorded in.

Fed for free by the training forward (``SiftingDataLoader.record``) and by scoring passes. In
``scoring="memory"`` mode a sample whose remembered loss is young enough is decided from memory,
without a scoring forward: only unknown (or, with an age limit, stale) samples are scored. A
sample's loss changes slowly between visits, and every sample still has a chance to be kept
(``percentile ** beta`` > 0), so a stale low loss is refreshed whenever the sample is trained
(Selective-Backprop's stale variant; InfoBatch scores only from the training forward).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from siftcli.sift.stateful import StateDict


class LossMemory:
    """``loss[i]`` and ``epoch[i]`` (-1: never seen) for every dataset index ``i``; grows as needed."""

    def __init__(self, n: int = 0) -> None:
        self.loss = torch.full((n,), float("nan"))
        self.epoch = torch.full((n,), -1, dtype=torch.long)
        # called with the indices about to be read: losses still on their way for any of them are stored first
        self.before_read: Callable[[torch.Tensor], None] | None = None

    def _arrive(self, indices: torch.Tensor) -> None:
        if self.before_read is not None:
            self.before_read(indices)

    def _grow(self, top: int) -> None:
        if top >= self.loss.numel():
            extra = top + 1 - self.loss.numel()
            self.loss = torch.cat([self.loss, torch.full((extra,), float("nan"))])
            self.epoch = torch.cat([self.epoch, torch.full((extra,), -1, dtype=torch.long)])

    def known(self, indices: torch.Tensor, epoch: int, max_age: int | None) -> torch.Tensor:
        """Which of ``indices`` have a finite loss recorded at most ``max_age`` epochs ago (``None``: any age)."""
        self._arrive(indices)
        self._grow(int(indices.max()))
        seen = (self.epoch[indices] >= 0) & torch.isfinite(self.loss[indices])
        return seen if max_age is None else seen & (epoch - self.epoch[indices] <= max_age)

    def ages(self, indices: torch.Tensor, epoch: int) -> torch.Tensor:
        """Epochs since each of ``indices`` had its loss recorded, as of ``epoch`` (-1: never recorded)."""
        self._arrive(indices)
        self._grow(int(indices.max()))
        recorded = self.epoch[indices]
        return torch.where(recorded < 0, torch.full_like(recorded, -1), epoch - recorded)

    def write(self, indices: torch.Tensor, losses: torch.Tensor, epoch: int) -> None:
        self._grow(int(indices.max()))
        self.loss[indices] = losses.detach().float().flatten().cpu()
        self.epoch[indices] = epoch

    def read(self, indices: torch.Tensor) -> torch.Tensor:
        self._arrive(indices)
        return self.loss[indices].clone()

    def state_dict(self) -> StateDict:
        return {"loss": self.loss.clone(), "epoch": self.epoch.clone()}

    def load_state_dict(self, state: StateDict) -> None:
        self.loss, self.epoch = state["loss"].clone(), state["epoch"].clone()
