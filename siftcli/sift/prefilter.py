"""Decisions at the sampler for :class:`~siftcli.sift.loader.SiftingDataLoader`: a raw batch whose samples can all be
decided without a forward (every loss remembered, or a reference table) is decided when the batch sampler asks for it,
so its dropped samples are never fetched or collated. Raw batches requested and not yet accounted wait in order
(``inflight``); on resume, finished ones are passed over (``swallow``) and requested ones handed out again with the
same decision (``replay``). A fetched raw batch's losses are found by :class:`~siftcli.sift.inflight.InFlight`, which
asks this part what is known of them without a forward (:meth:`SamplerDecisions.known_losses`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from siftcli.sift.distributed import world_size
from siftcli.sift.memory import LossMemory
from siftcli.sift.scoring import Scorer
from siftcli.sift.sifter import SiftConfig, Sifter
from siftcli.sift.stateful import StateDict


@dataclass
class Entry:
    """One raw batch's decision on its way through the loader (``mask`` None: not decided yet)."""

    raw: torch.Tensor | None  # its dataset indices
    mask: torch.Tensor | None = None
    losses: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    weights: torch.Tensor | None = None


class SamplerDecisions:
    """The raw batches the sampler asked for and the loader has not accounted yet, with what was decided for them; and
    what is known of a sample's loss without a forward.

    It owns that queue and the resume bookkeeping; the memory, scorer and sifter it is given are read and asked to
    decide, never written directly.
    """

    def __init__(self, config: SiftConfig, has_indices: bool, memory: LossMemory, scorer: Scorer, sifter: Sifter) -> None:
        self.config, self.has_indices, self.memory, self.scorer, self.sifter = config, has_indices, memory, scorer, sifter
        self.inflight: deque[Entry] = deque()
        self.replay: deque[Entry] = deque()
        self.swallow = 0

    @property
    def active(self) -> bool:
        """Decisions from memory are made at the sampler, so dropped samples are never fetched:
        memory scoring over a map-style ``DataLoader`` in a single process (across ranks every decision
        must meet the others' at the same point, which only the per-raw-batch path guarantees)."""
        by_table = self.config.scoring == "memory" or self.config.score == "reference"  # reference: a table, no forward
        return by_table and self.config.needs_scores and self.has_indices and world_size() < 2

    @property
    def refresh_by_training(self) -> bool:
        return self.config.scoring == "memory" and self.config.memory_refresh == "train" and self.config.score != "reference"

    def clear(self) -> None:
        """A new epoch: nothing requested is in flight."""
        self.inflight.clear()

    def start(self, skip: int) -> None:
        """A pass begins ``skip`` raw batches into its epoch (0 unless resumed): those finished before are passed over,
        and those requested but unfinished are handed out again with the same decision."""
        self.swallow, self.replay = skip, deque(self.inflight)
        self.inflight.clear()

    def choose(self, batch: list[int], epoch: int, keeps_all: Callable[[], bool]) -> list[int] | None:
        """Called by the batch sampler with each raw index list; returns what to fetch (``None``: nothing).

        A raw batch whose samples are all remembered is decided here, from memory, and only its kept
        samples are fetched and collated; any other is fetched whole and decided by the loader.
        """
        if self.swallow:  # resume: finished before the interruption
            self.swallow -= 1
            return None
        if self.replay:  # resume: requested but not finished before the interruption; same decision
            entry = self.replay.popleft()
            if entry.raw is None or entry.raw.tolist() != list(batch):
                raise RuntimeError("the data order on resume differs from the interrupted run's (was the sampler reseeded?)")
        else:
            entry = Entry(torch.tensor(batch, dtype=torch.long))
            if not keeps_all() and self.decidable(entry.raw, epoch):
                entry.losses = self.known_losses(entry.raw)
                entry.scores = self.scorer.scores(entry.losses, entry.raw)
                entry.mask, entry.weights = self.sifter.decide_weighted(entry.scores, entry.raw.numel(), self.due(entry.raw, epoch))
        self.inflight.append(entry)
        if entry.mask is None:
            return list(batch)
        fetch = entry.raw[entry.mask].tolist()
        return fetch or None

    def decidable(self, indices: torch.Tensor, epoch: int) -> bool:
        """Whether a raw batch can be decided without a forward: by the reference table, or all remembered."""
        if self.config.score == "reference" or self.refresh_by_training:
            return True
        return bool(self.memory.known(indices, epoch, self.config.memory_max_age).all())

    def due(self, indices: torch.Tensor | None, epoch: int) -> torch.Tensor | None:
        """Samples to keep whatever their score, so training renews their loss (``memory_refresh="train"``): those
        unknown or older than ``memory_max_age``; ``None`` in every other mode."""
        if not self.refresh_by_training or indices is None:
            return None
        return ~self.memory.known(indices, epoch, self.config.memory_max_age)

    def known_losses(self, indices: torch.Tensor) -> torch.Tensor:
        """What is known of these samples without a forward: their reference losses (score reference) or memory."""
        if self.config.score == "reference":
            return self.scorer.reference_losses[indices].clone()
        return self.memory.read(indices)

    def next(self) -> Entry | None:
        """The oldest raw batch the sampler asked for, now fetched (``None``: the sampler was not asked)."""
        return self.inflight.popleft() if self.inflight else None

    def dropped(self) -> Iterator[Entry]:
        """Raw batches decided at the sampler with nothing kept, in order, up to the next fetched one."""
        while self.inflight and self.inflight[0].mask is not None and not bool(self.inflight[0].mask.any()):
            yield self.inflight.popleft()

    def state_dict(self) -> list[StateDict]:
        return [vars(e).copy() for e in self.inflight]  # plain dicts: checkpoints load with weights_only

    def load_state_dict(self, state: list[Any]) -> None:
        self.inflight = deque(Entry(**e) if isinstance(e, dict) else e for e in state)
