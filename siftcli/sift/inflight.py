"""Raw batches between their fetch and their decision: a fetched raw batch in, its kept rows packed into the outbox out.

:class:`InFlight` owns the one-batch lag. On a device that runs apart from the host (CUDA: ``depth`` 1) each fetched
raw batch waits here while the next one is fetched and its scoring forward queued, and is decided then, when its scores
have long arrived: the host never waits for the device. Elsewhere (``depth`` 0) a raw batch is decided as it comes,
scored with the newest weights. Every rank holds exactly one batch at depth 1, whatever its samples, so every rank
decides, and so joins the decision's collectives, at the same points. This is the only place the loader waits for
scores; the scoring forward is queued by the :class:`~siftcli.sift.scoring.Scorer`, its losses come back through a
:class:`~siftcli.sift.transfer.Copy`, and the decision is the :class:`~siftcli.sift.sifter.Sifter`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from siftcli.sift import batching
from siftcli.sift.batching import Outbox
from siftcli.sift.cursor import EpochCursor
from siftcli.sift.distributed import any_true, world_size
from siftcli.sift.memory import LossMemory
from siftcli.sift.prefilter import Entry, SamplerDecisions
from siftcli.sift.scoring import Scorer
from siftcli.sift.sifter import SiftConfig, Sifter
from siftcli.sift.stateful import StateDict
from siftcli.sift.stats import BatchDecision, KeptOverlap, SiftStats
from siftcli.sift.transfer import Copy, Span

BatchHook = Callable[[BatchDecision], None]


@dataclass
class Pending:
    """A fetched raw batch's losses on their way: ``known`` ones (no forward), or a scoring forward queued on the
    device, its losses' ``copy`` and its ``span`` (over the ``todo`` positions only, where the rest are remembered)."""

    n: int
    indices: torch.Tensor | None
    known: torch.Tensor | None = None
    copy: Copy | None = None
    span: Span | None = None
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
    # what the packer reads of each row on the host, on its way there: ``width`` (batching.row_widths, for trimming)
    # and, packing distinct rows, ``key`` (batching.row_keys)
    rows: dict[str, Copy] = field(default_factory=dict)

    @property
    def raw_batches(self) -> int:
        """Raw batches of the epoch it stands for (itself and those dropped at the sampler before it)."""
        return 1 + len(self.dropped)

    def state_dict(self) -> StateDict:
        """Plain values (checkpoints load with weights_only); a queued forward's losses copied to the host now (a
        checkpoint may wait), so a resumed run decides this batch on the scores the uninterrupted one did."""
        p = self.pending
        return {"raw": batching.saved_form(self.raw), "indices": self.indices,
                "rows": {name: copy.sync() for name, copy in self.rows.items()},
                "entry": None if self.entry is None else vars(self.entry).copy(),
                "dropped": [vars(e).copy() for e in self.dropped],
                "pending": None if p is None else {"n": p.n, "indices": p.indices, "known": p.known, "todo": p.todo,
                                                   "fresh": None if p.copy is None else p.copy.sync(),
                                                   "seconds": None if p.span is None else p.span.sync()}}

    @classmethod
    def from_state(cls, state: StateDict) -> Arrival:
        p = state["pending"]
        pending = None if p is None else Pending(
            p["n"], p["indices"], known=p["known"], todo=p["todo"],
            copy=None if p["fresh"] is None else Copy(p["fresh"]),
            span=None if p["fresh"] is None else Span.known(p.get("seconds") or 0.0))
        rows = state.get("rows")
        if rows is None:  # a state saved with the rows' widths alone
            rows = {} if state.get("widths") is None else {"width": state["widths"]}
        return cls(batching.from_saved_form(state["raw"]), state["indices"],
                   None if state["entry"] is None else Entry(**state["entry"]),
                   [Entry(**e) for e in state["dropped"]], pending, {name: Copy(t) for name, t in rows.items()})


class InFlight:
    """Fetched raw batches until each is decided, counted and packed (:meth:`admit`, :meth:`end_pass`).

    It owns the batch waiting for its scores (``depth`` 1) and the batch hooks; the sifter, scorer, memory, sampler
    decisions, outbox, counters and the epoch cursor it is given change only through their own methods.
    """

    def __init__(self, config: SiftConfig, sifter: Sifter, scorer: Scorer, memory: LossMemory, decisions: SamplerDecisions,
                 outbox: Outbox, stats: SiftStats, kept_sets: KeptOverlap, cursor: EpochCursor, depth: int,
                 batch_transform: Callable[[Any], Any] | None = None, needs_indices: str | None = None) -> None:
        self.config, self.sifter, self.scorer, self.memory, self.decisions = config, sifter, scorer, memory, decisions
        self.outbox, self.stats, self.kept_sets, self.cursor = outbox, stats, kept_sets, cursor
        self.depth, self.batch_transform, self.needs_indices = depth, batch_transform, needs_indices
        self.waiting: Arrival | None = None
        self.hooks: list[BatchHook] = []
        self.unbatched = False  # the wrapped loader has batch_size=None: it hands over what its dataset yields

    @property
    def held_batches(self) -> int:
        """Raw batches fetched and not yet decided (a resume passes over them too: they are in the saved state)."""
        return 0 if self.waiting is None else self.waiting.raw_batches

    # -- the pass ------------------------------------------------------------------------
    def admit(self, raw: Any, indices: torch.Tensor | None) -> None:
        """A fetched raw batch: its scoring forward queued; at depth 1 the batch before it decided (its scores arrived
        while this one's forward was queued) and this one held, at depth 0 this one decided now."""
        arrival = self._arrive(raw, indices)
        before, self.waiting = self.waiting, (arrival if self.depth else None)
        if before is not None:
            self._decide(before)
        if self.waiting is None:
            self._decide(arrival)

    def decide_waiting(self) -> None:
        """The held raw batch decided now (its epoch's fetching is over, or its pass was left)."""
        if self.waiting is not None:
            waiting, self.waiting = self.waiting, None
            self._decide(waiting)

    def end_pass(self) -> None:
        """The epoch's raw batches are all fetched: the held one decided, those the sampler dropped whole counted."""
        self.decide_waiting()
        for entry in self.decisions.dropped():
            self._account(entry, None)

    # -- one raw batch -------------------------------------------------------------------
    def keeps_all(self) -> bool:
        """Whether the next raw batch is kept whole by the schedule; an ``auto`` delay may end here."""
        config, sifter = self.config, self.sifter
        if config.auto_delay and sifter.in_delay and config.needs_scores:
            s = self.scorer.cost(self.stats.scored_samples)
            if config.scoring == "memory":  # a sample is scored about once per memory_max_age + 1 epochs
                s /= 1 + (config.memory_max_age if config.memory_max_age is not None else 9)
            started = sifter.maybe_start(s)
            if world_size() > 1 and any_true(started, device=self.scorer.device)[0] and sifter.started_at is None:
                sifter.started_at = sifter.steps  # every rank starts at the same raw batch
        return sifter.keeps_all

    def _arrive(self, raw: Any, indices: torch.Tensor | None) -> Arrival:
        """A fetched raw batch: its place in the sampler's order taken, its scoring forward queued where it will be
        wanted (judged one decision ahead while another batch waits), nothing read back from the device."""
        if self.batch_transform is not None:
            raw = self.batch_transform(raw)
        if indices is None and self.needs_indices:
            raise RuntimeError(f"the loader lost track of sample indices, which {self.needs_indices} needs "
                               "(was the DataLoader iterated before it was wrapped?)")
        rows = {"width": batching.row_widths(raw, self.outbox.packer.padding_side),
                "key": batching.row_keys(raw) if self.outbox.distinct else None}
        arrival = Arrival(raw, indices, rows={name: Copy(t) for name, t in rows.items() if t is not None})
        if self.decisions.inflight:
            arrival.dropped = list(self.decisions.dropped())
            arrival.entry = self.decisions.next()
        if arrival.entry is None or arrival.entry.mask is None:
            n = batching.batch_size(raw)
            if self.sifter.wants_scores(n, self.sifter.steps + (self.waiting is not None)):
                arrival.pending = self._launch(raw, indices, n)
        return arrival

    def _launch(self, raw: Any, indices: torch.Tensor | None, n: int) -> Pending:
        """Start finding a fetched raw batch's losses: none to compute where they are known (a reference table, or
        refreshed by training), in memory mode a scoring forward of the unknown ones only, else of all; the forward is
        queued, not waited for (:meth:`_losses` reads it)."""
        config, epoch = self.config, self.cursor.epoch
        if (config.score == "reference" or self.decisions.refresh_by_training) and indices is not None:  # no forward
            return Pending(n, indices, known=self.decisions.known_losses(indices))
        todo = None
        if config.scoring == "memory" and indices is not None:
            todo = (~self.memory.known(indices, epoch, config.memory_max_age)).nonzero().flatten()
            if todo.numel() == 0:
                return Pending(n, indices, known=self.memory.read(indices))
        whole = todo is None or todo.numel() == n
        copy, span = self.scorer.forward(raw if whole else batching.select(raw, todo))
        return Pending(n, indices, copy=copy, span=span, todo=None if whole else todo)

    def _losses(self, pending: Pending) -> tuple[torch.Tensor, int]:
        """The losses :meth:`_launch` started on (fresh ones into the memory) and how many samples were scored."""
        if pending.copy is None:
            return pending.known, 0
        fresh = pending.copy.sync()
        self.scorer.seconds += pending.span.sync()
        n, indices, todo = pending.n, pending.indices, pending.todo
        expected = n if todo is None else todo.numel()
        if fresh.numel() != expected:
            hint = ("; the wrapped DataLoader has batch_size=None, so it hands over single samples unless its dataset "
                    "yields whole batches: give it a batch_size") if self.unbatched and fresh.numel() == 1 else ""
            raise ValueError(f"loss_fn returned {fresh.numel()} losses for a batch of {expected} samples: it must return "
                             f"one loss per sample, a Tensor of shape [{expected}] (reduction='none', not a mean){hint}")
        if indices is None:
            return fresh, n
        self.memory.write(indices if todo is None else indices[todo], fresh, self.cursor.epoch)
        return (fresh, n) if todo is None else (self.memory.read(indices), expected)

    def _decide(self, arrival: Arrival) -> None:
        """Decide, count and pack a raw batch (full batches go to the outbox), after those dropped at the sampler
        before it; its losses are read here, a batch after their forward was queued when overlapping."""
        for entry in arrival.dropped:
            self._account(entry, None)
        raw, indices, entry = arrival.raw, arrival.indices, arrival.entry
        if entry is not None and entry.mask is not None:  # decided at the sampler; raw holds the kept samples only
            return self._account(entry, raw, rows=self._rows(arrival))
        n = batching.batch_size(raw)
        delayed = self.keeps_all()
        losses, scored = None, 0
        if self.sifter.wants_scores(n):  # queued on arrival, or (a start the look-ahead missed) scored now
            losses, scored = self._losses(arrival.pending or self._launch(raw, indices, n))
        elif arrival.pending is not None:  # queued for a decision that turned out not to rank: counted, not used
            scored = self._losses(arrival.pending)[1]
        scores = None if losses is None else self.scorer.scores(losses, indices)
        due = None if losses is None else self.decisions.due(indices, self.cursor.epoch)
        mask, weights = self.sifter.decide_weighted(scores, n, due)
        self._account(Entry(indices, mask, losses, scores, weights), raw, delayed, scored, self._rows(arrival))

    @staticmethod
    def _rows(arrival: Arrival) -> dict[str, torch.Tensor]:
        """The raw batch's per-row facts on the host (widths, keys). Read after its losses: their copies were queued
        later on the same stream, so once the losses are in, these are too and reading them waits for nothing more."""
        return {name: copy.sync() for name, copy in arrival.rows.items()}

    def _account(self, entry: Entry, raw: Any, delayed: bool = False, scored: int = 0,
                 rows: dict[str, torch.Tensor] | None = None) -> None:
        """Count a decided raw batch, tell the hooks, and pack what it kept. ``raw`` is the whole raw batch,
        or, for a batch decided at the sampler, only its kept samples (``None`` when none was)."""
        mask, n, epoch = entry.mask, entry.mask.numel(), self.cursor.epoch
        self.cursor.offered += 1
        self.stats.count(epoch, n, int(mask.sum()), delayed, scored, 0 if entry.losses is None else n - scored)
        self.stats.follow(self.sifter, self.scorer.seconds)
        if entry.raw is not None and entry.scores is not None and not delayed:  # a ranked decision
            self.stats.count_ages(self.memory.ages(entry.raw, epoch) if self.config.score != "reference"
                                  else torch.zeros(n, dtype=torch.long))
            self.kept_sets.add(entry.raw[mask].tolist())
        for hook in self.hooks:
            hook(BatchDecision(raw, mask, entry.losses, entry.scores, entry.raw, delayed, scored, entry.weights))
        if raw is None:
            return
        t1 = time.perf_counter()
        self.outbox.add_decided(raw, mask, entry.raw, entry.weights, delayed, rows)
        self.stats.packing_seconds += time.perf_counter() - t1

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StateDict:
        return {"waiting": None if self.waiting is None else self.waiting.state_dict()}

    def load_state_dict(self, state: StateDict) -> None:
        self.waiting = Arrival.from_state(state["waiting"]) if state.get("waiting") else None
