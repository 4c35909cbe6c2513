"""Where a sifting loader stands in its epochs: the wrapped loader in, the epoch's raw batches out, from where it stood.

:class:`EpochCursor` owns the epoch count, the raw batches of the epoch offered to the decision so far, the pass under way
(and whether it was left early), a mid-epoch resume, the wrapped loader's iterator for the epoch, the last batch handed
to the training loop, and a ``StatefulDataLoader``'s state as the epoch began. Its :meth:`~EpochCursor.state_dict` is
the epoch position of the loader's saved state.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterator
from typing import Any

import torch

from siftcli.sift.indices import IndexTracker, Prefilter, order_generators, set_epoch, stateful
from siftcli.sift.stateful import BatchSource, StateDict


class EpochCursor:
    """The epoch position of one sifting loader over ``dataloader`` (whose raw index lists ``indices`` records)."""

    def __init__(self, dataloader: BatchSource, indices: IndexTracker) -> None:
        self.dataloader, self.indices = dataloader, indices
        self.epoch = 0
        self.offered = 0  # raw batches of this epoch decided and counted
        self.active = False  # a pass is under way (set when one starts, cleared when its epoch closes)
        self.resumed = False  # a state was loaded mid-epoch: the next pass continues that epoch
        self.passes = 0  # passes started: an older one resumed after a newer started is refused
        self.source: Iterator[Any] | None = None  # the wrapped loader's iterator of the epoch under way
        self.handed: tuple[Any, dict[str, torch.Tensor]] | None = None  # the last batch yielded, with its meta
        self.start_state: StateDict | None = None  # a StatefulDataLoader's state as this epoch began
        # what any other loader's order for this epoch is drawn from, as it began: its generators' states and the
        # global RNG's (a shuffling sampler without a generator of its own draws its seed there)
        self.order: StateDict | None = None

    @property
    def left_early(self) -> bool:
        """The last pass stopped before its epoch's end (a peek, a loop that broke, a trainer that stops at ``len()``)."""
        return self.active and not self.resumed

    def set_epoch(self, epoch: int) -> None:
        """A count ahead of the cursor's own, given before a pass (a loader made afresh for a run resumed at a later
        epoch), moves it there; during a pass, or before a resumed one, the cursor keeps its own."""
        if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral) or not 0 <= epoch < 2**31:
            raise ValueError(f"set_epoch(epoch): expected the epoch number, a whole number from 0, got {epoch!r}")
        if not self.active and not self.resumed and epoch > self.epoch:
            self.epoch = int(epoch)

    def open(self, skip: int, prefilter: Prefilter | None) -> Iterator[Any]:
        """The wrapped loader's iterator for this epoch, ``skip`` raw batches in (a resume: those fetched before the
        save). With a ``prefilter`` the sampler itself passes over them (the caller tells it how many); otherwise
        the order is replayed and the batches thrown away."""
        resuming, self.resumed = self.resumed, False
        set_epoch(self.dataloader, self.epoch)
        self.indices.start(prefilter)
        if stateful(self.dataloader):
            if self.start_state is None:  # its order as the epoch starts: what a resume restores, and then replays,
                self.start_state = self.dataloader.state_dict()  # as for any other sampler
            source = iter(self.dataloader)
        elif resuming and self.order is not None:
            source = self._drawn_again()
        else:
            self.order = {"generators": [g.get_state() for g in order_generators(self.dataloader)],
                          "global": torch.get_rng_state()}
            source = iter(self.dataloader)
        for _ in range(0 if prefilter else skip):  # resume: replay the order, not the decisions
            next(source)
            self.indices.next()
        self.source = source
        return source

    def _drawn_again(self) -> Iterator[Any]:
        """A resumed epoch's iterator, its order drawn as the interrupted epoch's was: the generators put back as that
        epoch began, and the global RNG too while the iterator draws (its first batch is fetched then: a shuffling
        sampler draws its seed at the first batch), then handed back as it was, so the caller's own RNG moves on
        undisturbed."""
        _put_back(order_generators(self.dataloader), self.order["generators"])
        now = torch.get_rng_state()
        torch.set_rng_state(self.order["global"])
        try:
            source = iter(self.dataloader)
            first = next(source, None)
        finally:
            torch.set_rng_state(now)
        return source if first is None else itertools.chain([first], source)

    def close(self) -> None:
        """The epoch is over: the next pass opens the next one, and nothing of this one is held."""
        self.epoch += 1
        self.offered = 0
        self.active, self.source, self.handed, self.start_state = False, None, None, None

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StateDict:
        """The epoch, the raw batches offered in it, and a ``StatefulDataLoader``'s state as it began (between epochs:
        as the next begins), so its order comes back."""
        start = self.start_state if self.active or not stateful(self.dataloader) else self.dataloader.state_dict()
        return {"epoch": self.epoch, "offered": self.offered, "wrapped_epoch_start": start,
                "under_way": self.active,  # also an epoch that has yielded only rows carried from the last (none offered)
                "order": self.order if self.active else None,  # what the epoch under way drew its order from
                "generators": [g.get_state() for g in order_generators(self.dataloader)]}  # and where they stand now

    def load_state_dict(self, state: StateDict, epoch_done: bool) -> None:
        """Restore :meth:`state_dict`; ``epoch_done``: the saved epoch had yielded all it promised, so it ends at the
        next pass instead of being continued."""
        self.epoch, self.offered = _whole(state, "epoch"), _whole(state, "offered")
        self.start_state = state.get("wrapped_epoch_start")
        self.order = state.get("order")
        if state.get("generators") is not None and not stateful(self.dataloader):  # the next epoch draws from them
            _put_back(order_generators(self.dataloader), state["generators"])
        if self.start_state is not None and stateful(self.dataloader):
            self.dataloader.load_state_dict(self.start_state)
        under_way = bool(state.get("under_way", self.offered > 0))
        self.resumed = under_way and not epoch_done
        self.active = under_way  # an epoch saved after its promised batches ends at the next pass
        self.source, self.handed = None, None


def _put_back(generators: list[torch.Generator], saved: list[Any]) -> None:
    """The order's generators as they were saved. Where the count differs, the wrapped loader makes its generators
    as it iterates and seeds them from its epoch (accelerate's ``SeedableRandomSampler``, which the Hugging Face
    ``Trainer`` hands out): its order follows ``set_epoch``, and there is nothing to put back."""
    if len(generators) == len(saved):
        for g, state in zip(generators, saved):
            g.set_state(state)


def _whole(state: StateDict, key: str) -> int:
    """A count of the saved position, or a ``ValueError`` naming it (an edited state: ``epoch='x'``)."""
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, (int, torch.Tensor)) or int(value) < 0:
        raise ValueError(f"the saved loader state's cursor {key} must be a whole number from 0, got {value!r}: not what "
                         "state_dict() wrote")
    return int(value)

