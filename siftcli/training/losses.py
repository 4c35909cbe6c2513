"""The loss a training step backpropagates: Workload's per-sample loss in, a :class:`StepLoss` out.

Every step calls ``loss(model, batch, indices)`` with the batch's dataset indices (a teacher's cache is keyed by them)
and afterwards asks ``take_cost()`` for the spans its own phases took inside the forward (a teacher's forward is the
``teacher`` phase, off the student's forward/backward; spans are read once the device has passed them, so asking costs
no synchronisation) and the teacher forwards it ran. The loop reads the same with or without a teacher.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from siftcli.sift.losses import PerSampleLoss, Uncertainty
from siftcli.sift.transfer import Span


class StepLoss(Protocol):
    def __call__(self, model: torch.nn.Module, batch: Any, indices: torch.Tensor | None = None) -> torch.Tensor: ...

    def take_cost(self) -> tuple[list[tuple[str, Span]], int]:
        """(phase, span) of its own work since the last call, and teacher forwards (in samples)."""
        ...


class LabelLoss:
    """The labels' loss alone: ``fn(model, batch)`` per sample; it has no phases of its own and no teacher."""

    def __init__(self, fn: PerSampleLoss) -> None:
        self.fn = fn

    def __call__(self, model: torch.nn.Module, batch: Any, indices: torch.Tensor | None = None) -> torch.Tensor:
        return self.fn(model, batch)

    def take_cost(self) -> tuple[list[tuple[str, Span]], int]:
        return [], 0


def own_loss(loss_fn: PerSampleLoss, unlabeled: bool) -> LabelLoss:
    """The student's own loss, for steps taken outside the run's (the pilot, the warm-up, compiling the buckets): the
    workload's ``loss_fn``, or, where the rows carry no label, the student's entropy, which costs the same forward and
    backward."""
    return LabelLoss(Uncertainty("entropy") if unlabeled else loss_fn)
