"""SageMaker smart sifting's batch interfaces (``smart_sifting.data_model.data_model_interface``).

A :class:`SiftingBatchTransform` turns a DataLoader batch that siftcli cannot cut into samples into a
:class:`SiftingBatch` (a :class:`~siftcli.compat.smart_sifting.data_model.list_batch.ListBatch` or
:class:`~siftcli.compat.smart_sifting.data_model.tensor_batch.TensorBatch`), and a batch of kept samples back.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any


class SiftingBatch(abc.ABC):
    """A batch sifting can cut into samples and put back together: its length, one sample, and a batch of samples."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def row(self, i: int) -> Any:
        """Sample ``i``, in any form :meth:`from_rows` takes back."""

    @classmethod
    @abc.abstractmethod
    def from_rows(cls, rows: Sequence[Any]) -> SiftingBatch:
        """A batch of the given samples, in order."""


class SiftingBatchTransform(abc.ABC):
    """``transform(batch)``: the DataLoader's batch in a form sifting can cut (a :class:`SiftingBatch`, or tensors,
    dicts, tuples of them); ``reverse_transform(batch)``: a batch of kept samples back in the form the loop expects."""

    @abc.abstractmethod
    def transform(self, batch: Any) -> Any: ...

    def reverse_transform(self, batch: Any) -> Any:
        return batch
