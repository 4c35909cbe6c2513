"""One raw batch through a :class:`~siftcli.sift.loader.SiftingDataLoader`'s parts: fetched in (:func:`begin`: its
scoring forward queued), decided (:func:`finish`: scores read, the rule applied), counted and packed out
(:func:`account`). Functions over a ``SiftingDataLoader`` (typed ``Any``: this module sits below the loader that calls
it), whose parts hold every piece of state, as :mod:`.saved` reads them; the loader's iterator calls them in order."""

from __future__ import annotations

import time
from typing import Any

import torch

from siftcli.sift import batching
from siftcli.sift.distributed import any_true, world_size
from siftcli.sift.prefilter import Arrival, Entry
from siftcli.sift.stats import BatchDecision


def keeps_all(loader: Any) -> bool:
    """Whether the next raw batch is kept whole by the schedule; an ``auto`` delay may end here."""
    if loader.config.auto_delay and loader.sifter.in_delay and loader.config.needs_scores:
        s = loader.scoring_cost
        if loader.config.scoring == "memory":  # a sample is scored about once per memory_max_age + 1 epochs
            s /= 1 + (loader.config.memory_max_age if loader.config.memory_max_age is not None else 9)
        started = loader.sifter.maybe_start(s)
        if world_size() > 1 and any_true(started, device=loader.device)[0] and loader.sifter.started_at is None:
            loader.sifter.started_at = loader.sifter.steps  # every rank starts at the same raw batch
    return loader.sifter.keeps_all


def begin(loader: Any, raw: Any, indices: torch.Tensor | None) -> Arrival:
    """A fetched raw batch: its place in the sampler's order taken, its scoring forward queued where it will be
    wanted (judged one decision ahead while another batch waits), nothing read back from the device."""
    if loader.batch_transform is not None:
        raw = loader.batch_transform(raw)
    if indices is None and loader._needs_indices:
        raise RuntimeError(f"the loader lost track of sample indices, which {loader._needs_indices} needs "
                           "(was the DataLoader iterated before it was wrapped?)")
    arrival = Arrival(raw, indices)
    if loader.decisions.inflight:
        arrival.dropped = list(loader.decisions.dropped())
        arrival.entry = loader.decisions.next()
    if arrival.entry is None or arrival.entry.mask is None:
        n = batching.batch_size(raw)
        if loader.sifter.wants_scores(n, ahead=int(loader._waiting is not None)):
            arrival.pending = loader.decisions.launch(raw, indices, n, loader.epoch)
    return arrival


def finish(loader: Any, arrival: Arrival) -> None:
    """Decide, count and pack a raw batch (full batches go to the outbox), after those dropped at the sampler
    before it; its losses are read here, a batch after their forward was queued when overlapping."""
    for entry in arrival.dropped:
        account(loader, entry, None)
    raw, indices, entry = arrival.raw, arrival.indices, arrival.entry
    if entry is not None and entry.mask is not None:  # decided at the sampler; raw holds the kept samples only
        return account(loader, entry, raw)
    n = batching.batch_size(raw)
    delayed = keeps_all(loader)
    losses, scored = None, 0
    if loader.sifter.wants_scores(n):  # queued at begin, or (a start the look-ahead missed) scored now
        pending = arrival.pending or loader.decisions.launch(raw, indices, n, loader.epoch)
        losses, scored = loader.decisions.complete(pending, loader.epoch)
    elif arrival.pending is not None:  # queued for a decision that turned out not to rank: counted, not used
        scored = loader.decisions.complete(arrival.pending, loader.epoch)[1]
    scores = None if losses is None else loader.scorer.scores(losses, indices)
    mask, weights = loader.sifter.decide_weighted(scores, n, None if losses is None else loader.decisions.due(indices, loader.epoch))
    return account(loader, Entry(indices, mask, losses, scores, weights), raw, delayed, scored)


def account_dropped(loader: Any) -> None:
    """The raw batches the sampler dropped whole, counted (nothing of them is packed)."""
    for entry in loader.decisions.dropped():
        account(loader, entry, None)


def account(loader: Any, entry: Entry, raw: Any, delayed: bool = False, scored: int = 0) -> None:
    """Count a decided raw batch, tell the hooks, and pack what it kept. ``raw`` is the whole raw batch,
    or, for a batch decided at the sampler, only its kept samples (``None`` when none was)."""
    mask, n = entry.mask, entry.mask.numel()
    loader._raw_in_epoch += 1
    loader.stats.count(loader.epoch, n, int(mask.sum()), delayed, scored, 0 if entry.losses is None else n - scored)
    loader.stats.follow(loader.sifter, loader.scorer.seconds)
    if entry.raw is not None and entry.scores is not None and not delayed:  # a ranked decision
        loader.stats.count_ages(loader.memory.ages(entry.raw, loader.epoch) if loader.config.score != "reference"
                              else torch.zeros(n, dtype=torch.long))
        loader.kept_sets.add(entry.raw[mask].tolist())
    for hook in loader._on_batch:
        hook(BatchDecision(raw, mask, entry.losses, entry.scores, entry.raw, delayed, scored, entry.weights))
    if raw is None:
        return
    t1 = time.perf_counter()
    loader.outbox.add_decided(raw, mask, entry.raw, entry.weights, delayed)
    loader.stats.packing_seconds += time.perf_counter() - t1
