"""SageMaker smart sifting's API on top of siftcli: change only the imports.

    # from smart_sifting.dataloader.sift_dataloader import SiftingDataloader
    # from smart_sifting.loss.abstract_sift_loss_module import Loss
    # from smart_sifting.sift_config.sift_configs import RelativeProbabilisticSiftConfig, LossConfig, SiftingBaseConfig
    from siftcli.compat.smart_sifting import (
        SiftingDataloader, Loss, RelativeProbabilisticSiftConfig, LossConfig, SiftingBaseConfig)

Unlike the original, the loader has a length and reports what it kept (``.stats``).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import torch

from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.sifter import SiftConfig


@dataclass
class SiftingBaseConfig:
    """``sift_delay``: training steps before sifting starts (default 1000, as documented)."""

    sift_delay: int = 1000
    repeat_delay_per_epoch: bool = False


@dataclass
class LossConfig:
    sift_config: SiftingBaseConfig | dict = field(default_factory=SiftingBaseConfig)

    def __post_init__(self) -> None:
        if isinstance(self.sift_config, dict):
            self.sift_config = SiftingBaseConfig(**self.sift_config)


@dataclass
class RelativeProbabilisticSiftConfig:
    """Keep probability ``percentile ** beta_value`` against the last ``loss_history_length`` losses."""

    beta_value: float
    loss_history_length: int
    loss_based_sift_config: LossConfig | dict = field(default_factory=LossConfig)

    def __post_init__(self) -> None:
        if isinstance(self.loss_based_sift_config, dict):
            self.loss_based_sift_config = LossConfig(**self.loss_based_sift_config)

    def to_sift_config(self, seed: int = 0) -> SiftConfig:
        base = self.loss_based_sift_config.sift_config
        return SiftConfig(beta=self.beta_value, loss_history_length=self.loss_history_length, sift_delay=base.sift_delay,
                          repeat_delay_per_epoch=base.repeat_delay_per_epoch, seed=seed)


class Loss(abc.ABC):
    """Per-sample loss for sifting: return a 1-D tensor with one loss per sample."""

    @abc.abstractmethod
    def loss(self, model: torch.nn.Module, transformed_batch: Any, original_batch: Any = None) -> torch.Tensor:
        raise NotImplementedError


class SiftingBatchTransform(abc.ABC):
    """Optional: turn a custom batch into tensors/dicts siftcli can slice, and back."""

    @abc.abstractmethod
    def transform(self, batch: Any) -> Any: ...

    def reverse_transform(self, batch: Any) -> Any:
        return batch


class SiftingDataloader(SiftingDataLoader):
    """``SiftingDataloader(sift_config, orig_dataloader, model, loss_impl, batch_transforms=None, log_batch_data=False)``."""

    def __init__(
        self,
        sift_config: RelativeProbabilisticSiftConfig | dict,
        orig_dataloader: Any,
        model: torch.nn.Module,
        loss_impl: Loss,
        batch_transforms: SiftingBatchTransform | None = None,
        log_batch_data: bool = False,
        seed: int = 0,
    ) -> None:
        if isinstance(sift_config, dict):
            sift_config = RelativeProbabilisticSiftConfig(**sift_config)
        self.loss_impl = loss_impl
        self.batch_transforms = batch_transforms
        self.log_batch_data = log_batch_data
        self.batch_log: list[dict[str, Any]] = []

        def per_sample(m: torch.nn.Module, batch: Any) -> torch.Tensor:
            return loss_impl.loss(m, batch, batch)

        super().__init__(
            orig_dataloader, model, per_sample, sift_config.to_sift_config(seed),
            batch_transform=batch_transforms.transform if batch_transforms else None,
        )
        if log_batch_data:
            self.add_batch_hook(lambda d: self.batch_log.append(
                {"kept": d.mask.nonzero().flatten().tolist(), "losses": None if d.losses is None else d.losses.tolist()}))

    def __iter__(self):  # noqa: D105
        for batch in super().__iter__():
            yield self.batch_transforms.reverse_transform(batch) if self.batch_transforms else batch


__all__ = ["Loss", "LossConfig", "RelativeProbabilisticSiftConfig", "SiftingBaseConfig", "SiftingBatchTransform", "SiftingDataloader"]
