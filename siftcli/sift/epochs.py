"""Where a :class:`~siftcli.sift.loader.SiftingDataLoader` stands in its epochs: an epoch opened (the wrapped loader's
iterator, a resumed one's past what was fetched), a pass left early taken up again, an epoch closed. Functions over
the loader (typed ``Any``: this module sits below the loader that calls it), as :mod:`.decide` and :mod:`.saved` are."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from siftcli.sift import decide
from siftcli.sift.distributed import check_same, gather_values, world_size
from siftcli.sift.indices import set_epoch, stateful


def take_back(loader: Any) -> None:
    """A pass left early goes on: the one batch it yielded that was never trained on (a peek) is yielded again
    first; batches fetched ahead of training and left (more than one never recorded) are forgotten."""
    if len(loader.feedback.queue) == 1 and loader._handed is not None:
        loader.outbox.pending.insert(0, loader._handed)
        loader.quota.yielded -= 1
        loader.stats.count_batch(loader.epoch, -1)
    loader.feedback.clear()
    loader._handed = None


def open_epoch(loader: Any) -> Iterator[Any]:
    """The wrapped loader's iterator for a new epoch, or for a resumed one, past what the saved pass fetched."""
    distributed = world_size() > 1
    loader.sifter.share = (lambda values: gather_values(values, loader.device)) if distributed else None
    if distributed:
        check_same(len(loader.dataloader), "raw batches per epoch", loader.device)
    if not loader._resume_mid_epoch:
        start_epoch(loader)
    skip = loader._raw_in_epoch + (loader._waiting.raw_batches if loader._waiting is not None else 0)  # fetched, saved
    loader._resume_mid_epoch = False
    set_epoch(loader.dataloader, loader.epoch)
    prefilter = loader.decisions.active
    choose = (lambda batch: loader.decisions.choose(batch, loader.epoch, lambda: decide.keeps_all(loader))) if prefilter else None
    loader.indices.start(choose)
    if prefilter:  # resume: the sampler passes over finished raw batches without fetching them
        loader.decisions.start(skip)
    if stateful(loader.dataloader) and loader._epoch_start is None:  # its order as the epoch starts: what a resume
        loader._epoch_start = loader.dataloader.state_dict()  # restores, and then replays, as for any other sampler
    source = iter(loader.dataloader)
    for _ in range(0 if prefilter else skip):  # resume: replay the order, not the decisions
        next(source)
        loader.indices.next()
    loader._source = source
    return source


def finish_waiting(loader: Any) -> None:
    """The raw batch held for its scores (on a device that overlaps) decided now."""
    if loader._waiting is not None:
        waiting, loader._waiting = loader._waiting, None
        decide.finish(loader, waiting)


def close_epoch(loader: Any) -> None:
    """The epoch is over (its pass ran out, or was left after ``len()`` batches): counted, and nothing of it held."""
    finish_waiting(loader)  # a pass stopped early: the raw batch it fetched is decided like the rest
    overlap = loader.kept_sets.close_epoch()
    if overlap is not None:
        loader.stats.kept_overlap.append(overlap)
    loader.epoch += 1
    loader._raw_in_epoch = 0
    loader._active, loader._source, loader._handed, loader._epoch_start = False, None, None, None


def start_epoch(loader: Any) -> None:
    """A new epoch (not a resumed one): the schedule's epoch counter, and nothing left over from the last."""
    loader.feedback.settle()  # the last batch's training losses, before this epoch decides anything
    if loader.quota.enabled:
        if not loader.sifter.total_steps:  # a run of unknown length promises each epoch its own count
            loader.quota.promise = None
        len(loader)  # the promise for this epoch (for the run, when its length is known)
    else:  # what the last pass left buffered is dropped; exact_len carries it over
        loader.outbox.clear()
    loader.quota.start()
    rows = loader._epoch_rows()
    loader.sifter.start_epoch(loader.quota.floor_rows(loader.batch_size, loader.outbox.rows()), rows)
    loader._raw_in_epoch = 0
    loader.decisions.clear()
    loader.feedback.clear()
