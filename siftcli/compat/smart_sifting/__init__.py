"""SageMaker smart sifting's API on siftcli's engine: replace the prefix ``smart_sifting`` with
``siftcli.compat.smart_sifting`` in each import line, and nothing else::

    # from smart_sifting.dataloader.sift_dataloader import SiftingDataloader
    from siftcli.compat.smart_sifting.dataloader.sift_dataloader import SiftingDataloader

The original's modules are mirrored (``dataloader.sift_dataloader``, ``loss.abstract_sift_loss_module``,
``sift_config.sift_configs``, ``data_model.data_model_interface``, ``data_model.list_batch``,
``data_model.tensor_batch``, ``integrations.trainer``, ``metrics.lightning``), and every name is also importable from
here. ``TrainingMetricsRecorder`` needs Lightning and ``enable_sifting`` Transformers: both are imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from siftcli.compat.smart_sifting.data_model.data_model_interface import SiftingBatch, SiftingBatchTransform
from siftcli.compat.smart_sifting.data_model.list_batch import ListBatch
from siftcli.compat.smart_sifting.data_model.tensor_batch import TensorBatch
from siftcli.compat.smart_sifting.dataloader.sift_dataloader import SiftingDataloader
from siftcli.compat.smart_sifting.loss.abstract_sift_loss_module import Loss
from siftcli.compat.smart_sifting.sift_config.sift_configs import LossConfig, RelativeProbabilisticSiftConfig, SiftingBaseConfig

_LAZY = {"enable_sifting": "siftcli.compat.smart_sifting.integrations.trainer",
         "TrainingMetricsRecorder": "siftcli.compat.smart_sifting.metrics.lightning"}

__all__ = ["ListBatch", "Loss", "LossConfig", "RelativeProbabilisticSiftConfig", "SiftingBaseConfig", "SiftingBatch",
           "SiftingBatchTransform", "SiftingDataloader", "TensorBatch", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
