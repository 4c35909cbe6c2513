"""What the training loop hands back to :class:`~siftcli.sift.loader.SiftingDataLoader`: the feedback queue.

Every yielded batch leaves its sample indices, rule weights and delay flags in the queue; the loop's training forward
hands its per-sample losses back (``training_loss`` or ``record``) for the oldest batch not yet recorded, so loops that
fetch ahead (Lightning, the HF Trainer with gradient accumulation) stay aligned. The losses become free scores: the
loss memory (by sample index) and, during the delay, the history, always in the unit that is ranked.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import torch

from siftcli.sift.memory import LossMemory
from siftcli.sift.scoring import Scorer
from siftcli.sift.sifter import UNCERTAINTY, SiftConfig, Sifter
from siftcli.sift.stateful import StateDict
from siftcli.sift.transfer import Later, to_device

#: Batch fields added with ``meta_in_batch=True``.
META_INDEX, META_WEIGHT = "sift_index", "sift_weight"


class Feedback:
    """The queue of yielded batches not yet recorded, and what recording a batch's training losses does.

    It owns the queue; the sifter (history), scorer (the ranked unit) and memory it is given are changed only through
    their own methods.
    """

    def __init__(self, config: SiftConfig, sifter: Sifter, scorer: Scorer, memory: LossMemory) -> None:
        self.config, self.sifter, self.scorer, self.memory = config, sifter, scorer, memory
        self.queue: deque[dict[str, torch.Tensor]] = deque(maxlen=256)
        # recorded, not yet stored: (the batch's meta, its epoch) -> its training losses, copied from the device
        self.arriving: Later[tuple[dict[str, torch.Tensor], int]] = Later(self._store)
        memory.before_read = self._settle_for

    def _settle_for(self, indices: torch.Tensor) -> None:
        """Before the memory is read for ``indices``: store what is arriving if it holds any of them (a loop that fetches
        the next epoch's first batches before recording the last one's losses; never in the steady state)."""
        if any("index" in meta and bool(torch.isin(indices, meta["index"]).any()) for meta, _ in self.arriving.keys()):
            self.settle()

    def push(self, meta: dict[str, torch.Tensor]) -> None:
        """A batch was yielded: ``meta`` holds its ``weight``, ``delayed`` flags and, where known, ``index``."""
        self.queue.append(meta)

    def clear(self) -> None:
        self.queue.clear()

    @property
    def last_weights(self) -> torch.Tensor | None:
        """Loss weights of the oldest yielded batch not yet recorded (the one being trained on); None: all ones."""
        if not self.queue:
            return None
        weights = self.queue[0]["weight"]
        return None if bool((weights == 1).all()) else weights

    @property
    def last_indices(self) -> torch.Tensor | None:
        """Dataset indices of the oldest yielded batch not yet recorded (the one being trained on), where known."""
        return self.queue[0].get("index") if self.queue else None

    def training_loss(self, losses: torch.Tensor, batch: Any, epoch: int) -> torch.Tensor:
        """Record ``losses`` and average them with the rule's weights (from the batch when it carries them)."""
        weights = self.last_weights
        if isinstance(batch, dict) and META_WEIGHT in batch:
            batch.pop(META_INDEX, None)
            weights = batch.pop(META_WEIGHT)
        self.record(losses, epoch)
        if weights is None:
            return losses.mean()
        return (losses * to_device(weights, losses.device).to(losses.dtype)).mean()

    def follow_loss(self, total: torch.Tensor, losses: torch.Tensor, shares: torch.Tensor | None, epoch: int) -> torch.Tensor:
        """A library's own batch loss ``total`` kept as it is, its per-sample ``losses`` recorded; with the rule's weights
        each sample's share of ``total`` (``shares``, summing to it; ``losses / rows`` for a mean) is reweighted on top,
        so an unweighted batch trains exactly the library's loss (its normalisation, label smoothing, metrics)."""
        weights = self.last_weights
        self.record(losses, epoch)
        if weights is None:
            return total
        shares = losses / losses.numel() if shares is None else shares
        return total + ((to_device(weights, shares.device).to(shares.dtype) - 1) * shares).sum()

    def record(self, losses: torch.Tensor, epoch: int) -> None:
        """The oldest yielded batch's training losses: into the memory by sample index, and while the delay lasts (with
        ``sift_delay="auto"`` or memory scoring) into the history instead of scoring.

        They arrive one batch later: the copy to the host starts now and is stored at the next call (or at an epoch's
        start, or a checkpoint), so the training loop never waits for the device here. No decision misses them: a sample
        is not seen again in the epoch it was trained in, and every rule reads the same lag on every device and resume."""
        losses = losses.detach().flatten()
        if not self.queue:
            raise ValueError("record() was called more often than batches were yielded: call it once per batch")
        meta = self.queue.popleft()
        if self.config.score in UNCERTAINTY:  # a training loss is not an uncertainty: nothing to remember from it
            return
        indices = meta.get("index")
        if indices is not None and losses.numel() != indices.numel():
            raise ValueError(f"training_loss()/record() got {losses.numel()} losses for a batch of {indices.numel()} samples: "
                             f"pass the per-sample losses, a Tensor of shape [{indices.numel()}] (reduction='none')")
        self.settle()
        self.arriving.put((meta, epoch), losses.float())

    def settle(self) -> None:
        """Store the losses :meth:`record` started copying (waits for that copy alone, if it is still under way)."""
        self.arriving.settle()

    def _store(self, key: tuple[dict[str, torch.Tensor], int], losses: torch.Tensor) -> None:
        """One batch's training losses, arrived: into the history (the delay's) and the memory."""
        meta, epoch = key
        indices = meta.get("index")
        history_from_training = self.config.auto_delay or self.config.scoring == "memory"
        if history_from_training and losses.numel() == meta["delayed"].numel() and bool(meta["delayed"].any()):
            delayed = meta["delayed"]
            # the history holds what is ranked, never a mix: reducible (or reference) scores where those are ranked
            part = None if indices is None else indices[delayed]
            if self.scorer.reference_losses is None or part is not None:
                self.sifter.observe(self.scorer.scores(losses[delayed], part))
        if indices is not None:
            self.memory.write(indices, losses, epoch)

    def state_dict(self) -> list[StateDict]:
        """The losses still arriving (copied to the host now: a checkpoint may wait), so a resumed run stores them
        where the uninterrupted one does."""
        return self.arriving.state_dict()

    def load_state_dict(self, state: list[StateDict] | None) -> None:
        self.arriving.load_state_dict(state)
