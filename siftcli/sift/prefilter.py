"""Decisions at the sampler for :class:`~siftcli.sift.loader.SiftingDataLoader`: a raw batch whose samples can all be
decided without a forward (every loss remembered, or a reference table) is decided when the batch sampler asks for it,
so its dropped samples are never fetched or collated. Raw batches requested and not yet accounted wait in order
(``_inflight``); on resume, finished ones are passed over (``_swallow``) and requested ones handed out again with the
same decision (``_replay``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import torch

from siftcli.sift.distributed import world_size


@dataclass
class _Entry:
    """One raw batch's decision on its way through the loader (``mask`` None: not decided yet)."""

    raw: torch.Tensor | None  # its dataset indices
    mask: torch.Tensor | None = None
    losses: torch.Tensor | None = None
    scores: torch.Tensor | None = None
    weights: torch.Tensor | None = None


class SamplerDecisionsMixin:
    """Mixed into the loader; uses its ``config``, ``indices``, ``memory``, ``scorer``, ``sifter`` and ``epoch``."""

    config: Any
    indices: Any
    memory: Any
    scorer: Any
    sifter: Any
    epoch: int
    _inflight: deque
    _replay: deque
    _swallow: int

    @property
    def _prefiltering(self) -> bool:
        """Decisions from memory are made at the sampler, so dropped samples are never fetched:
        memory scoring over a map-style ``DataLoader`` in a single process (across ranks every decision
        must meet the others' at the same point, which only the per-raw-batch path guarantees)."""
        by_table = self.config.scoring == "memory" or self.config.score == "reference"  # reference: a table, no forward
        return by_table and self.config.needs_scores and self.indices.available and world_size() < 2

    def _prefilter(self, batch: list[int]) -> list[int] | None:
        """Called by the batch sampler with each raw index list; returns what to fetch (``None``: nothing).

        A raw batch whose samples are all remembered is decided here, from memory, and only its kept
        samples are fetched and collated; any other is fetched whole and decided in :meth:`_step`.
        """
        if self._swallow:  # resume: finished before the interruption
            self._swallow -= 1
            return None
        if self._replay:  # resume: requested but not finished before the interruption; same decision
            entry = self._replay.popleft()
            if entry.raw.tolist() != list(batch):
                raise RuntimeError("the data order on resume differs from the interrupted run's (was the sampler reseeded?)")
        else:
            entry = _Entry(torch.tensor(batch, dtype=torch.long))
            if not self._keeps_all() and self._decidable(entry.raw):
                entry.losses = self._known_losses(entry.raw)
                entry.scores = self.scorer.scores(entry.losses, entry.raw)
                entry.mask, entry.weights = self.sifter.decide_weighted(entry.scores, entry.raw.numel(), self._due(entry.raw))
        self._inflight.append(entry)
        if entry.mask is None:
            return list(batch)
        fetch = entry.raw[entry.mask].tolist()
        return fetch or None

    def _decidable(self, indices: torch.Tensor) -> bool:
        """Whether a raw batch can be decided without a forward: by the reference table, or all remembered."""
        if self.config.score == "reference" or self._refresh_by_training:
            return True
        return bool(self.memory.known(indices, self.epoch, self.config.memory_max_age).all())

    @property
    def _refresh_by_training(self) -> bool:
        return self.config.scoring == "memory" and self.config.memory_refresh == "train" and self.config.score != "reference"

    def _due(self, indices: torch.Tensor | None) -> torch.Tensor | None:
        """Samples to keep whatever their score, so training renews their loss (``memory_refresh="train"``): those
        unknown or older than ``memory_max_age``; ``None`` in every other mode."""
        if not self._refresh_by_training or indices is None:
            return None
        return ~self.memory.known(indices, self.epoch, self.config.memory_max_age)

    def _known_losses(self, indices: torch.Tensor) -> torch.Tensor:
        """What is known of these samples without a forward: their reference losses (score reference) or memory."""
        if self.config.score == "reference":
            return self.scorer.reference_losses[indices].clone()
        return self.memory.read(indices)

    def _account_dropped(self) -> None:
        """Raw batches decided at the sampler with nothing kept, in order, up to the next fetched one."""
        while self._inflight and self._inflight[0].mask is not None and not bool(self._inflight[0].mask.any()):
            self._account(self._inflight.popleft(), None)
