"""``TensorBatch`` (``smart_sifting.data_model.tensor_batch``): inputs and, optionally, labels as tensors whose first
dimension is the sample."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from siftcli.compat.smart_sifting.data_model.data_model_interface import SiftingBatch


class TensorBatch(SiftingBatch):
    """``TensorBatch(inputs, labels=None)``: ``inputs[i]`` (and ``labels[i]``) is sample ``i``."""

    def __init__(self, inputs: torch.Tensor, labels: torch.Tensor | None = None) -> None:
        if labels is not None and labels.shape[0] != inputs.shape[0]:
            raise ValueError(f"TensorBatch: {inputs.shape[0]} inputs but {labels.shape[0]} labels; expected one label per input")
        self.inputs, self.labels = inputs, labels

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def row(self, i: int) -> tuple[Any, Any]:
        return self.inputs[i], None if self.labels is None else self.labels[i]

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, Any]]) -> TensorBatch:
        labels = None if rows[0][1] is None else torch.stack([r[1] for r in rows])
        return cls(torch.stack([r[0] for r in rows]), labels)
