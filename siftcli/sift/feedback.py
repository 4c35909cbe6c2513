"""The loss-feedback side of :class:`~siftcli.sift.loader.SiftingDataLoader`: what the training loop hands back.

Every yielded batch leaves its sample indices, rule weights and delay flags in a queue; the loop's training forward
hands its per-sample losses back (``training_loss`` or ``record``) for the oldest batch not yet recorded, so loops that
fetch ahead (Lightning, the HF Trainer with gradient accumulation) stay aligned. The losses become free scores: the
loss memory (by sample index) and, during the delay, the history, always in the unit that is ranked.
"""

from __future__ import annotations

from typing import Any

import torch

from siftcli.sift.sifter import UNCERTAINTY

#: Batch fields added with ``meta_in_batch=True``.
META_INDEX, META_WEIGHT = "sift_index", "sift_weight"


class FeedbackMixin:
    """Mixed into the loader; uses its ``_yielded`` queue, ``config``, ``sifter``, ``scorer``, ``memory`` and ``epoch``."""

    _yielded: Any
    config: Any
    sifter: Any
    scorer: Any
    memory: Any
    epoch: int

    def training_loss(self, losses: torch.Tensor, batch: Any = None) -> torch.Tensor:
        """The scalar to backpropagate from the training forward's per-sample ``losses`` of a yielded batch:
        records them (:meth:`record`) and averages them with the rule's weights (all ones unless
        ``mode="infobatch"``). Pass the ``batch`` when it carries ``sift_index``/``sift_weight``
        (``meta_in_batch``; they are removed from it), else the batch just yielded is meant."""
        weights = self.last_weights
        if isinstance(batch, dict) and META_WEIGHT in batch:
            batch.pop(META_INDEX, None)
            weights = batch.pop(META_WEIGHT)
        self.record(losses)
        if weights is None:
            return losses.mean()
        return (losses * weights.to(losses.device, losses.dtype)).mean()

    @property
    def last_weights(self) -> torch.Tensor | None:
        """Loss weights of the oldest yielded batch not yet recorded (the one being trained on); None: all ones."""
        if not self._yielded:
            return None
        weights = self._yielded[0]["weight"]
        return None if bool((weights == 1).all()) else weights

    @property
    def last_indices(self) -> torch.Tensor | None:
        """Dataset indices of the oldest yielded batch not yet recorded (the one being trained on), where known."""
        return self._yielded[0].get("index") if self._yielded else None

    def record(self, losses: torch.Tensor) -> None:
        """Remember the training forward's per-sample losses of a yielded batch by sample index: free scores
        for memory scoring. Call it once per yielded batch, in order (the oldest batch not yet recorded is
        meant, so loops that fetch ahead stay aligned). While the delay lasts, with ``sift_delay="auto"`` or
        memory scoring, they also fill the history (and the start rule's gain estimate) instead of scoring. Without sample indices (see
        :mod:`siftcli.sift.indices`) only the latter."""
        losses = losses.detach().flatten()
        if not self._yielded:
            raise ValueError("record() was called more often than batches were yielded: call it once per batch")
        meta = self._yielded.popleft()
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
            raise ValueError(f"record() got {losses.numel()} losses for a batch of {indices.numel()} samples")
        self.memory.write(indices, losses, self.epoch)
