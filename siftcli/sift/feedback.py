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
        return (losses * weights.to(losses.device, losses.dtype)).mean()

    def record(self, losses: torch.Tensor, epoch: int) -> None:
        """The oldest yielded batch's training losses: into the memory by sample index, and while the delay lasts (with
        ``sift_delay="auto"`` or memory scoring) into the history instead of scoring."""
        losses = losses.detach().flatten()
        if not self.queue:
            raise ValueError("record() was called more often than batches were yielded: call it once per batch")
        meta = self.queue.popleft()
        if self.config.score in UNCERTAINTY:  # a training loss is not an uncertainty: nothing to remember from it
            return
        history_from_training = self.config.auto_delay or self.config.scoring == "memory"
        indices = meta.get("index")
        if history_from_training and losses.numel() == meta["delayed"].numel() and bool(meta["delayed"].any()):
            delayed = meta["delayed"].to(losses.device)
            # the history holds what is ranked, never a mix: reducible (or reference) scores where those are ranked
            part = None if indices is None else indices[meta["delayed"]]
            if self.scorer.reference_losses is None or part is not None:
                self.sifter.observe(self.scorer.scores(losses[delayed].float().cpu(), part))
        if indices is None:
            return
        if losses.numel() != indices.numel():
            raise ValueError(f"training_loss()/record() got {losses.numel()} losses for a batch of {indices.numel()} samples: "
                             f"pass the per-sample losses, a Tensor of shape [{indices.numel()}] (reduction='none')")
        self.memory.write(indices, losses, epoch)
