"""SageMaker smart sifting's loss interface (``smart_sifting.loss.abstract_sift_loss_module``)."""

from __future__ import annotations

import abc
from typing import Any

import torch


class Loss(abc.ABC):
    """Per-sample loss for sifting: one loss per sample of the batch, no reduction.

    ``transformed_batch`` is what the loader's ``batch_transforms`` made of the batch (the batch itself without one);
    ``original_batch`` is the DataLoader's own batch, so a loss written against the DataLoader's format works with or
    without a transform.
    """

    @abc.abstractmethod
    def loss(self, model: torch.nn.Module, transformed_batch: Any, original_batch: Any = None) -> torch.Tensor:
        raise NotImplementedError
