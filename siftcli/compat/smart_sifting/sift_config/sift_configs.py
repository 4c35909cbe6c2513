"""SageMaker smart sifting's configuration classes, as documented (``smart_sifting.sift_config.sift_configs``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from siftcli.sift.sifter import SiftConfig


@dataclass
class SiftingBaseConfig:
    """``sift_delay``: training steps before sifting starts (default 1000, as documented); ``repeat_delay_per_epoch``:
    wait that long again every epoch."""

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
