"""Hugging Face ``Trainer`` with sifting: the training loop stays the Trainer's own."""

from __future__ import annotations

from typing import Any

import torch
from transformers import Trainer

from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.losses import PerSampleLoss, hf_loss
from siftcli.sift.sifter import SiftConfig


class SiftingTrainer(Trainer):
    """A ``Trainer`` whose training loader is a :class:`SiftingDataLoader`.

    ``len()`` of the sifting loader is the expected number of sifted batches, so the
    Trainer's step count and learning-rate schedule follow the data really trained on.
    The training loss is ``sift_loss`` per sample, recorded by sample (free scores for
    ``scoring="memory"`` and the ``auto`` delay) and weighted by the rule (``infobatch``);
    losses are recorded in the order batches were yielded, so gradient accumulation, which
    fetches batches ahead, records each against the right samples.
    """

    def __init__(self, *args: Any, sift_config: SiftConfig | None = None, sift_loss: PerSampleLoss | None = None,
                 pad_token_id: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sift_config = sift_config or SiftConfig()
        self.sift_loss = sift_loss or hf_loss
        self.pad_token_id = pad_token_id
        self.sifting_loader: SiftingDataLoader | None = None
        self.loss_is_scaled_for_ga = False  # compute_loss returns a per-micro-batch mean: the Trainer divides by GA

    def get_train_dataloader(self) -> SiftingDataLoader:
        base = super().get_train_dataloader()
        pad = {"input_ids": self.pad_token_id} if self.pad_token_id is not None else None
        self.sifting_loader = SiftingDataLoader(base, self.model, self.sift_loss, self.sift_config,
                                                batch_size=self._train_batch_size, pad_values=pad,
                                                epochs=self.args.num_train_epochs)
        return self.sifting_loader

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if self.sifting_loader is None or return_outputs or not model.training:  # evaluation batches
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return self.sifting_loader.training_loss(self.sift_loss(model, inputs))
