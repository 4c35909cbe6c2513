"""The names the sifting loader's parts share: what a part's saved state is, and what the loader wraps."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

#: PyTorch's Stateful protocol, as a type: names to tensors and plain containers (numbers, strings, lists, dicts of
#: them). The sifting loader's parts keep to that, so a saved state loads with ``torch.load(weights_only=True)``; a
#: record read by its keys elsewhere gets a typed record of its own, never this.
StateDict = dict[str, Any]


@runtime_checkable
class BatchSource(Protocol):
    """What a sifting loader wraps: batches to iterate, and how many there are in an epoch. A ``DataLoader`` is one;
    so are accelerate's prepared loaders, torchdata's ``StatefulDataLoader`` and a list of batches. Its optional
    attributes (``dataset``, ``sampler``, ``batch_sampler``, ``batch_size``) are read where it has them."""

    def __iter__(self) -> Iterator[Any]: ...

    def __len__(self) -> int: ...
