"""``enable_sifting`` (``smart_sifting.integrations.trainer``): the simple setup for a Hugging Face ``Trainer``."""

from __future__ import annotations

from typing import Any

import torch

from siftcli.compat.smart_sifting.data_model.data_model_interface import SiftingBatchTransform
from siftcli.compat.smart_sifting.dataloader.sift_dataloader import SiftingDataloader
from siftcli.compat.smart_sifting.loss.abstract_sift_loss_module import Loss
from siftcli.compat.smart_sifting.sift_config.sift_configs import RelativeProbabilisticSiftConfig
from siftcli.integrations.hf import run_epochs


def enable_sifting(trainer: Any, sift_config: RelativeProbabilisticSiftConfig | dict, loss_impl: Loss,
                   model: torch.nn.Module | None = None, log_batch_data: bool = False,
                   batch_transforms: SiftingBatchTransform | None = None) -> Any:
    """Make ``trainer`` train on a :class:`SiftingDataloader` over its own training loader; the same trainer is
    returned. The loader has a length (the expected sifted batches), so the Trainer plans its steps and schedule from
    it (the run's length is passed on, so the schedule ends exactly where it was planned); unlike the original,
    ``max_steps`` is left as it was."""
    original = trainer.get_train_dataloader

    def get_train_dataloader() -> SiftingDataloader:
        base = original()
        config = sift_config if isinstance(sift_config, RelativeProbabilisticSiftConfig) else \
            RelativeProbabilisticSiftConfig(**sift_config)
        epochs = run_epochs(trainer.args, len(base), config.to_sift_config().target_keep_fraction)
        trainer.sifting_loader = SiftingDataloader(sift_config, base, batch_transforms, loss_impl, model or trainer.model,
                                                   log_batch_data, epochs=epochs)
        return trainer.sifting_loader

    trainer.get_train_dataloader = get_train_dataloader
    return trainer
