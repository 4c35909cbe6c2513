"""SageMaker-compatible layer, Hugging Face Trainer, Lightning."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from siftcli.compat.smart_sifting import Loss as SiftLoss
from siftcli.compat.smart_sifting import (
    LossConfig,
    RelativeProbabilisticSiftConfig,
    SiftingBaseConfig,
    SiftingDataloader,
)
from siftcli.sift import SiftConfig


class CELoss(SiftLoss):
    def loss(self, model, transformed_batch, original_batch=None):  # noqa: ANN001, ANN201
        x, y = transformed_batch
        return torch.nn.functional.cross_entropy(model(x), y, reduction="none")


def _data(n: int = 256) -> DataLoader:
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
    return DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=16)


def test_sagemaker_code_runs_with_only_imports_changed() -> None:
    cfg = RelativeProbabilisticSiftConfig(
        beta_value=0.5, loss_history_length=100,
        loss_based_sift_config=LossConfig(sift_config=SiftingBaseConfig(sift_delay=2)),
    )
    loader = SiftingDataloader(sift_config=cfg, orig_dataloader=_data(), model=torch.nn.Linear(4, 2), loss_impl=CELoss(),
                               log_batch_data=True)
    batches = list(loader)
    assert sum(b[0].shape[0] for b in batches) == loader.stats.kept_samples
    assert loader.stats.target_keep_fraction == pytest.approx(2 / 3)
    assert len(loader.batch_log) == 16


def test_dicts_are_accepted_and_defaults_match_the_docs() -> None:
    assert SiftingBaseConfig().sift_delay == 1000 and SiftingBaseConfig().repeat_delay_per_epoch is False
    cfg = RelativeProbabilisticSiftConfig(beta_value=1, loss_history_length=50,
                                          loss_based_sift_config={"sift_config": {"sift_delay": 3}})
    assert cfg.to_sift_config().sift_delay == 3
    loader = SiftingDataloader({"beta_value": 1, "loss_history_length": 50}, _data(), None, CELoss(), torch.nn.Linear(4, 2))
    assert loader.config.sift_delay == 1000  # the documented positional order: config, loader, transforms, loss, model
    with pytest.raises(TypeError, match="documented order"):
        SiftingDataloader({"beta_value": 1, "loss_history_length": 50}, _data(), torch.nn.Linear(4, 2), CELoss())
    with pytest.raises(TypeError):
        SiftLoss()  # abstract


def _tiny_bert_and_rows(n: int) -> tuple[torch.nn.Module, list[dict]]:
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=32, max_position_embeddings=16, num_labels=2))
    g = torch.Generator().manual_seed(0)
    return model, [{"input_ids": torch.randint(1, 50, (8,), generator=g), "labels": int(i % 2)} for i in range(n)]


def test_hf_trainer_runs_sifted_epochs(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer

    model, rows = _tiny_bert_and_rows(96)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = SiftingTrainer(model=model, args=args, train_dataset=rows, sift_config=SiftConfig(beta=1.0, sift_delay=2))
    out = trainer.train()
    stats = trainer.sifting_loader.stats
    assert stats.raw_samples == 192 and 0 < stats.kept_samples < 192
    assert len(stats.epochs) == 2
    assert out.global_step <= 2 * 12
    assert trainer.sifting_loader.indices.available  # sample identity through accelerate's loader wrapper


def test_lightning_example() -> None:
    L = pytest.importorskip("lightning")
    from siftcli.integrations.lightning import sifting_dataloader
    from siftcli.sift import cross_entropy_loss

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.net(x)

        def training_step(self, batch, _):  # noqa: ANN001, ANN201
            return cross_entropy_loss(self, batch).mean()

        def configure_optimizers(self):  # noqa: ANN201
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):  # noqa: ANN201
            self.sifting = sifting_dataloader(self, _data(), SiftConfig(beta=1.0), cross_entropy_loss)
            return self.sifting

    module = Module()
    L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(module)
    assert 0 < module.sifting.stats.kept_samples < 256


def test_lightning_mixin_records_and_weights_without_user_code() -> None:
    """The mixin's training_step records each batch's training losses by sample (Lightning fetches one
    batch ahead: the FIFO keeps them aligned), so memory scoring skips scoring forwards in epoch 2."""
    L = pytest.importorskip("lightning")
    from siftcli.integrations.lightning import SiftedTrainingStep, sifting_dataloader
    from siftcli.sift import cross_entropy_loss

    class Module(SiftedTrainingStep, L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)

        def forward(self, x):  # noqa: ANN001, ANN201
            return self.net(x)

        def configure_optimizers(self):  # noqa: ANN201
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):  # noqa: ANN201
            return sifting_dataloader(self, _data(), SiftConfig(mode="infobatch", scoring="memory", memory_max_age=None),
                                      cross_entropy_loss)

    module = Module()
    L.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
              reload_dataloaders_every_n_epochs=0).fit(module)
    stats = module.sifted.stats
    assert stats.raw_samples == 512
    assert stats.memory_samples > 0  # decided from recorded training losses, no scoring forward
    assert stats.scored_samples < 512


def test_hf_trainer_records_training_losses_with_gradient_accumulation(tmp_path: Path) -> None:
    """The Trainer fetches accumulation batches ahead; each recorded loss still lands on its own samples."""
    from transformers import TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer

    model, rows = _tiny_bert_and_rows(64)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
                             gradient_accumulation_steps=2)
    from siftcli.sift import hf_loss

    def first_token(m: torch.nn.Module, batch: dict) -> torch.Tensor:  # a sample's "loss" names the sample
        return hf_loss(m, batch) * 0 + batch["input_ids"][:, 0].float()

    trainer = SiftingTrainer(model=model, args=args, train_dataset=rows, sift_loss=first_token,
                             sift_config=SiftConfig(beta=1.0, scoring="memory", memory_max_age=None, sift_delay=8))
    trainer.train()
    loader = trainer.sifting_loader
    assert loader.stats.scored_samples == 0  # epoch 1 (the delay) filled the memory from the training forward
    assert loader.stats.memory_samples == 64
    assert torch.equal(loader.memory.loss, torch.stack([r["input_ids"][0] for r in rows]).float())  # each on its own sample
