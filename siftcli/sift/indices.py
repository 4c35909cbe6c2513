"""Which dataset indices each raw batch holds, read from the loader's own batch sampler.

Modes that remember or look up something per sample (reducible-loss scoring, label-noise accounting)
need them; users write no code for it. A map-style ``DataLoader`` draws its index lists from
``batch_sampler`` in the order it yields batches (also with worker processes, which keep order), so
recording the lists as the loader draws them and popping one per raw batch keeps them aligned.

The same hook lets memory scoring decide a raw batch *before* it is fetched: a ``prefilter`` gets each
raw index list and returns the indices to fetch (``None``: none), so a dropped sample is never loaded,
transformed or collated. With worker processes the sampler runs ahead by ``prefetch_factor *
num_workers`` batches, so those decisions are made that much earlier (still in a fixed order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch

from siftcli.sift.stateful import BatchSource

Prefilter = Callable[[list[int]], "list[int] | None"]


class _RecordingBatchSampler:
    """Wraps a batch sampler; every index list it hands out is also appended to ``record``."""

    def __init__(self, inner: Any, record: deque) -> None:
        self.inner = inner
        self.record = record
        self.prefilter: Prefilter | None = None

    def __iter__(self) -> Iterator[list[int]]:
        return _Recording(self, iter(self.inner))

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:  # sampler, batch_size, drop_last, set_epoch ...
        return getattr(self.inner, name)


class _Recording:
    """The recorder's iterator. Its state is the inner iterator's where that has one: torchdata's
    ``StatefulDataLoader`` saves the sampler iterator's state (its generator) and restores it, which it could not do
    through a plain generator."""

    def __init__(self, sampler: _RecordingBatchSampler, inner: Iterator[Any]) -> None:
        self.sampler, self.inner = sampler, inner

    def __iter__(self) -> Iterator[list[int]]:
        return self

    def __next__(self) -> list[int]:
        while True:
            batch = next(self.inner)
            if self.sampler.prefilter is not None:
                batch = self.sampler.prefilter(list(batch))
                if not batch:
                    continue
            self.sampler.record.append(list(batch))
            return batch

    def __getattr__(self, name: str) -> Any:  # state_dict, load_state_dict where the inner iterator has them
        return getattr(self.inner, name)


class IndexTracker:
    """Installs the recorder on a ``DataLoader`` (if it can) and hands out one index tensor per raw batch."""

    def __init__(self, dataloader: BatchSource) -> None:
        self._record: deque[list[int]] = deque()
        self._sampler = _install(dataloader, self._record)
        self.available = self._sampler is not None

    def start(self, prefilter: Prefilter | None = None) -> None:
        """Call before each ``iter(dataloader)``: what an earlier pass prefetched is not this pass's.
        ``prefilter`` (or ``None``) applies to this pass."""
        self._record.clear()
        if self._sampler is not None:
            self._sampler.prefilter = prefilter

    def next(self) -> torch.Tensor | None:
        if not self.available:
            return None
        if not self._record:  # drawn by a path the recorder does not see: give up on indices, never guess
            self.available = False
            return None
        return torch.tensor(self._record.popleft(), dtype=torch.long)


def inner_loader(dataloader: BatchSource) -> BatchSource:
    """The loader a wrapper iterates: accelerate's ``DataLoaderShard`` (the HF Trainer's loader) its
    ``base_dataloader``, Lightning Fabric's ``_FabricDataLoader`` (``fabric.setup_dataloaders``) its ``_dataloader``,
    timm's ``PrefetchLoader`` its ``loader``; any other loader itself."""
    for name in ("base_dataloader", "_dataloader", "loader"):
        inner = getattr(dataloader, name, None)
        if inner is not None and hasattr(inner, "__iter__"):
            return inner
    return dataloader


def _fabric(dataloader: BatchSource) -> bool:
    """Lightning Fabric's wrapper, which sets its sampler's epoch from its own count of ``iter()`` calls."""
    return type(dataloader).__name__ == "_FabricDataLoader" and hasattr(dataloader, "_num_iter_calls")


def _install(dataloader: BatchSource, record: deque) -> _RecordingBatchSampler | None:
    from torch.utils.data import DataLoader, IterableDataset

    dataloader = inner_loader(dataloader)
    if not isinstance(dataloader, DataLoader) or isinstance(dataloader.dataset, IterableDataset):
        return None
    if dataloader.batch_sampler is None:  # batch_size=None: the dataset yields whole batches
        return None
    if not isinstance(dataloader.batch_sampler, _RecordingBatchSampler):
        # DataLoader forbids setting batch_sampler after construction; its iterators read it afresh
        # each epoch, so swapping it in place is safe and keeps the user's loader object.
        object.__setattr__(dataloader, "batch_sampler", _RecordingBatchSampler(dataloader.batch_sampler, record))
    else:
        dataloader.batch_sampler.record = record
    return dataloader.batch_sampler


#: Words in a sampler's class name that say it groups rows by length (the Hugging Face Trainer's
#: ``LengthGroupedSampler``, bucketing samplers).
LENGTH_GROUPING = ("lengthgrouped", "bucket", "bylength")


#: Words in a batch sampler's class name that say no batch repeats a text (sentence-transformers'
#: ``NoDuplicatesBatchSampler`` and its hashed form, for in-batch-negative losses).
NO_DUPLICATES = ("noduplicates",)


def length_grouped(dataloader: BatchSource) -> bool:
    """Whether the wrapped loader's sampler or batch sampler groups rows by length (read through accelerate's and
    Fabric's wrappers), so packing should keep rows with rows of their width."""
    return _sampler_says(dataloader, LENGTH_GROUPING)


def distinct_rows(dataloader: BatchSource) -> bool:
    """Whether the wrapped loader's batch sampler promises batches without a repeated text, so packing must keep it."""
    return _sampler_says(dataloader, NO_DUPLICATES)


def _sampler_says(dataloader: BatchSource, words: tuple[str, ...]) -> bool:
    """Whether a class name of the wrapped loader's samplers holds one of ``words`` (lower case, no underscores)."""
    loader = inner_loader(dataloader)
    batch_sampler = getattr(loader, "batch_sampler", None)
    batch_sampler = getattr(batch_sampler, "inner", batch_sampler)  # the index recorder's wrapper, seen through
    holders = [getattr(loader, "sampler", None), batch_sampler, getattr(batch_sampler, "sampler", None),
               getattr(batch_sampler, "batch_sampler", None)]
    names = [type(h).__name__.lower().replace("_", "") for h in holders if h is not None]
    return any(word in name for name in names for word in words)


def stateful(dataloader: BatchSource) -> bool:
    """Whether ``dataloader`` saves and restores its own position (torchdata's ``StatefulDataLoader``, or a subclass)."""
    import sys

    module = sys.modules.get("torchdata.stateful_dataloader")
    return module is not None and isinstance(dataloader, module.StatefulDataLoader)


def model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def dataset_len(dataloader: BatchSource) -> int | None:
    dataset = getattr(dataloader, "dataset", None)
    try:
        return len(dataset) if dataset is not None and getattr(dataloader, "drop_last", False) is False else None
    except TypeError:
        return None


def sampled_len(dataloader: BatchSource) -> int | None:
    """Samples one epoch of ``dataloader`` draws, where its sampler says (a ``DistributedSampler``'s share of the data,
    a subset, a weighted sampler's ``num_samples``); ``None`` where it cannot tell or drops the last partial batch."""
    if getattr(dataloader, "drop_last", False):
        return None
    sampler = getattr(getattr(dataloader, "batch_sampler", None), "sampler", None) or getattr(dataloader, "sampler", None)
    try:
        return len(sampler) if sampler is not None else dataset_len(dataloader)
    except TypeError:
        return dataset_len(dataloader)


def set_epoch(dataloader: BatchSource, epoch: int) -> None:
    """Tell a seeded or distributed sampler which epoch starts, so its order is reproducible; and a dataset that
    changes its samples by epoch (seeded augmentation), so a resumed run sees what the uninterrupted one saw.

    A loader with its own ``set_epoch`` (accelerate's, which the Hugging Face Trainer hands out) is told directly: it
    sets its sampler's epoch from its own counter at every pass, and that counter only advances when a pass runs to
    the end, which a loop that stops after ``len()`` batches never lets it do (every epoch would repeat the first
    one's order). Lightning Fabric's wrapper sets its sampler's epoch from its count of ``iter()`` calls, which starts
    at 0 in a resumed process: the count is set to the epoch, so the pass about to start draws that epoch's order."""
    if callable(getattr(dataloader, "set_epoch", None)):
        dataloader.set_epoch(epoch)
        return
    if _fabric(dataloader):
        dataloader._num_iter_calls = epoch
        dataloader = inner_loader(dataloader)
    dataset = getattr(dataloader, "dataset", None)
    if dataset is not None and hasattr(dataset, "set_epoch"):
        dataset.set_epoch(epoch)
    for holder in (getattr(dataloader, "sampler", None), getattr(dataloader, "batch_sampler", None)):
        if holder is not None and hasattr(holder, "set_epoch"):
            holder.set_epoch(epoch)
            return


def loader_batch_size(dataloader: BatchSource) -> int | None:
    """The per-step batch size of a DataLoader, also one built from a batch sampler or wrapped by accelerate (whose
    ``batch_size`` is ``None``: the sampler knows it)."""
    for holder in (dataloader, getattr(dataloader, "batch_sampler", None), getattr(dataloader, "base_dataloader", None)):
        size = getattr(holder, "batch_size", None)
        if isinstance(size, int) and size > 0:
            return size
    inner = getattr(getattr(dataloader, "batch_sampler", None), "batch_sampler", None)  # accelerate's BatchSamplerShard
    size = getattr(inner, "batch_size", None)
    return size if isinstance(size, int) and size > 0 else None


def order_generators(dataloader: BatchSource) -> list[torch.Generator]:
    """The generators an epoch's order is drawn from: a shuffling sampler's own (``DataLoader(shuffle=True,
    generator=g)`` puts ``g`` on its ``RandomSampler``) and the loader's (its iterator draws a base seed from it), each
    once. A sampler without one draws from the global RNG instead."""
    found: list[torch.Generator] = []
    for loader in (dataloader, inner_loader(dataloader)):
        batch_sampler = getattr(loader, "batch_sampler", None)
        for holder in (loader, getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)):
            g = getattr(holder, "generator", None)
            if isinstance(g, torch.Generator) and all(g is not f for f in found):
                found.append(g)
    return found
