"""Hugging Face ``Trainer`` with sifting: the training loop stays the Trainer's own."""

from __future__ import annotations

from typing import Any

from transformers import Trainer

from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.losses import PerSampleLoss, hf_loss
from siftcli.sift.sifter import SiftConfig


class SiftingTrainer(Trainer):
    """A ``Trainer`` whose training loader is a :class:`SiftingDataLoader`.

    ``len()`` of the sifting loader is the expected number of sifted batches, so the
    Trainer's step count and learning-rate schedule follow the data really trained on.
    """

    def __init__(self, *args: Any, sift_config: SiftConfig | None = None, sift_loss: PerSampleLoss | None = None,
                 pad_token_id: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sift_config = sift_config or SiftConfig()
        self.sift_loss = sift_loss or hf_loss
        self.pad_token_id = pad_token_id
        self.sifting_loader: SiftingDataLoader | None = None

    def get_train_dataloader(self) -> SiftingDataLoader:
        base = super().get_train_dataloader()
        pad = {"input_ids": self.pad_token_id} if self.pad_token_id is not None else None
        self.sifting_loader = SiftingDataLoader(base, self.model, self.sift_loss, self.sift_config,
                                                batch_size=self._train_batch_size, pad_values=pad)
        return self.sifting_loader
