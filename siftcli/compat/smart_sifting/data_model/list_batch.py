"""``ListBatch`` (``smart_sifting.data_model.list_batch``): per-sample inputs and, optionally, labels as lists."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from siftcli.compat.smart_sifting.data_model.data_model_interface import SiftingBatch


class ListBatch(SiftingBatch):
    """``ListBatch(inputs, labels=None)``: ``inputs[i]`` and ``labels[i]`` are sample ``i`` (any Python objects:
    token lists, tensors, strings)."""

    def __init__(self, inputs: list[Any], labels: list[Any] | None = None) -> None:
        if labels is not None and len(labels) != len(inputs):
            raise ValueError(f"ListBatch: {len(inputs)} inputs but {len(labels)} labels; expected one label per input")
        self.inputs, self.labels = list(inputs), None if labels is None else list(labels)

    def __len__(self) -> int:
        return len(self.inputs)

    def row(self, i: int) -> tuple[Any, Any]:
        return self.inputs[i], None if self.labels is None else self.labels[i]

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Any, Any]]) -> ListBatch:
        labels = [r[1] for r in rows]
        return cls([r[0] for r in rows], None if rows and all(v is None for v in labels) else labels)
