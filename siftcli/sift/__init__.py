"""The sifting engine: pure selection functions, the stateful sifter and the drop-in loader."""

from siftcli.sift.algorithm import (
    calibrated_count,
    keep_probability,
    percentiles,
    sample_keep,
    sample_keep_count,
    target_keep_fraction,
)
from siftcli.sift.loader import BatchDecision, SiftingDataLoader
from siftcli.sift.losses import HFLoss, TupleLoss, Uncertainty, cross_entropy_loss, hf_loss, loss_from_logits, mse_loss
from siftcli.sift.scoring import Scorer
from siftcli.sift.sifter import SiftConfig, Sifter
from siftcli.sift.stats import EpochStats, SiftStats

__all__ = [
    "BatchDecision",
    "Scorer",
    "EpochStats",
    "HFLoss",
    "SiftConfig",
    "SiftStats",
    "Sifter",
    "SiftingDataLoader",
    "TupleLoss",
    "Uncertainty",
    "calibrated_count",
    "cross_entropy_loss",
    "hf_loss",
    "keep_probability",
    "loss_from_logits",
    "mse_loss",
    "percentiles",
    "sample_keep",
    "sample_keep_count",
    "target_keep_fraction",
]
