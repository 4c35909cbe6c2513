"""Decisions at the sampler for :class:`~siftcli.sift.loader.SiftingDataLoader`: a raw batch whose samples can all be
decided without a forward (every loss remembered, or a reference table) is decided when the batch sampler asks for it,
so its dropped samples are never fetched or collated. Raw batches requested and not yet accounted wait in order
(``inflight``); on resume, finished ones are passed over (``swallow``) and requested ones handed out again with the
same decision (``replay``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from siftcli.sift import batching
from siftcli.sift.distributed import world_size
from siftcli.sift.memory import LossMemory
from siftcli.sift.scoring import ScoreJob, Scorer
from siftcli.sift.sifter import SiftConfig, Sifter
from siftcli.sift.stateful import StateDict
from siftcli.sift.transfer import Span, ToHost


@dataclass
class Entry:
    """One raw batch's decision on its way through the loader (``mask`` None: not decided yet)."""

    raw: torch.Tensor | None  # its dataset indices
    mask: torch.Tensor | None = None
    losses: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    weights: torch.Tensor | None = None


@dataclass
class Pending:
    """A fetched raw batch's losses on their way: ``known`` ones (no forward), or a scoring ``job`` queued on the device
    (over the ``todo`` positions only, where the rest are remembered)."""

    n: int
    indices: torch.Tensor | None
    known: torch.Tensor | None = None
    job: ScoreJob | None = None
    todo: torch.Tensor | None = None


@dataclass
class Arrival:
    """A fetched raw batch on its way through the loader: ``entry``, its decision at the sampler (if asked); ``dropped``,
    the raw batches the sampler dropped whole before it; ``pending``, its losses on their way."""

    raw: Any
    indices: torch.Tensor | None
    entry: Entry | None = None
    dropped: list[Entry] = field(default_factory=list)
    pending: Pending | None = None

    @property
    def raw_batches(self) -> int:
        """Raw batches of the epoch it stands for (itself and those dropped at the sampler before it)."""
        return 1 + len(self.dropped)

    def state_dict(self) -> StateDict:
        """Plain values (checkpoints load with weights_only); a queued forward's losses copied to the host now (a
        checkpoint may wait), so a resumed run decides this batch on the scores the uninterrupted one did."""
        pending = self.pending
        return {"raw": batching.saved_form(self.raw), "indices": self.indices,
                "entry": None if self.entry is None else vars(self.entry).copy(),
                "dropped": [vars(e).copy() for e in self.dropped],
                "pending": None if pending is None else {"n": pending.n, "indices": pending.indices, "known": pending.known,
                                                         "fresh": None if pending.job is None else pending.job.copy.get(),
                                                         "todo": pending.todo}}

    @classmethod
    def from_state(cls, state: StateDict) -> Arrival:
        p = state["pending"]
        pending = None if p is None else Pending(
            p["n"], p["indices"], known=p["known"], todo=p["todo"],
            job=None if p["fresh"] is None else ScoreJob(ToHost(p["fresh"]), Span(torch.device("cpu")).start().stop()))
        return cls(state["raw"], state["indices"], None if state["entry"] is None else Entry(**state["entry"]),
                   [Entry(**e) for e in state["dropped"]], pending)


class SamplerDecisions:
    """The raw batches the sampler asked for and the loader has not accounted yet, with what was decided for them; and
    for a fetched batch, what is known of its losses without a forward.

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

    def losses(self, raw: Any, indices: torch.Tensor | None, n: int, epoch: int) -> tuple[torch.Tensor, int]:
        """A fetched raw batch's losses and how many needed a scoring forward (:meth:`launch`, then :meth:`complete`)."""
        return self.complete(self.launch(raw, indices, n, epoch), epoch)

    def launch(self, raw: Any, indices: torch.Tensor | None, n: int, epoch: int) -> Pending:
        """Start finding a fetched raw batch's losses: none to compute where they are known (a reference table, or
        refreshed by training), in memory mode a scoring forward of the unknown ones only, else of all; the forward is
        queued, not waited for (:meth:`complete` reads it)."""
        if (self.config.score == "reference" or self.refresh_by_training) and indices is not None:  # no forward
            return Pending(n, indices, known=self.known_losses(indices))
        todo = None
        if self.config.scoring == "memory" and indices is not None:
            todo = (~self.memory.known(indices, epoch, self.config.memory_max_age)).nonzero().flatten()
            if todo.numel() == 0:
                return Pending(n, indices, known=self.memory.read(indices))
        whole = todo is None or todo.numel() == n
        part = raw if whole else batching.select(raw, todo)
        return Pending(n, indices, job=self.scorer.launch(part), todo=None if whole else todo)

    def complete(self, pending: Pending, epoch: int) -> tuple[torch.Tensor, int]:
        """The losses :meth:`launch` started on (fresh ones into the memory) and how many samples were scored."""
        if pending.job is None:
            return pending.known, 0
        fresh = self.scorer.complete(pending.job)
        n, indices, todo = pending.n, pending.indices, pending.todo
        expected = n if todo is None else todo.numel()
        if fresh.numel() != expected:
            raise ValueError(f"loss_fn returned {fresh.numel()} losses for a batch of {expected} samples: it must return "
                             f"one loss per sample, a Tensor of shape [{expected}] (reduction='none', not a mean)")
        if indices is None:
            return fresh, n
        self.memory.write(indices if todo is None else indices[todo], fresh, epoch)
        return (fresh, n) if todo is None else (self.memory.read(indices), expected)

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
