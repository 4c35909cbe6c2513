"""The published SageMaker smart-sifting shapes, with only the import prefix changed."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler, TensorDataset

from siftcli.compat.smart_sifting.data_model.data_model_interface import SiftingBatch, SiftingBatchTransform
from siftcli.compat.smart_sifting.data_model.list_batch import ListBatch
from siftcli.compat.smart_sifting.data_model.tensor_batch import TensorBatch
from siftcli.compat.smart_sifting.dataloader.sift_dataloader import SiftingDataloader
from siftcli.compat.smart_sifting.loss.abstract_sift_loss_module import Loss
from siftcli.compat.smart_sifting.sift_config.sift_configs import LossConfig, RelativeProbabilisticSiftConfig, SiftingBaseConfig

#: Every import line of the published examples and guides, with ``smart_sifting`` as the prefix.
PUBLISHED_IMPORTS = [
    ("dataloader.sift_dataloader", "SiftingDataloader"),
    ("loss.abstract_sift_loss_module", "Loss"),
    ("sift_config.sift_configs", "RelativeProbabilisticSiftConfig"),
    ("sift_config.sift_configs", "LossConfig"),
    ("sift_config.sift_configs", "SiftingBaseConfig"),
    ("data_model.data_model_interface", "SiftingBatch"),
    ("data_model.data_model_interface", "SiftingBatchTransform"),
    ("data_model.list_batch", "ListBatch"),
    ("data_model.tensor_batch", "TensorBatch"),
    ("integrations.trainer", "enable_sifting"),
    ("metrics.lightning", "TrainingMetricsRecorder"),
]


@pytest.mark.parametrize("module,name", PUBLISHED_IMPORTS)
def test_every_published_import_works_with_the_prefix_changed(module: str, name: str) -> None:
    assert hasattr(importlib.import_module(f"siftcli.compat.smart_sifting.{module}"), name)
    assert getattr(importlib.import_module("siftcli.compat.smart_sifting"), name) is not None  # the flat name too


def _config(delay: int = 2) -> RelativeProbabilisticSiftConfig:
    return RelativeProbabilisticSiftConfig(beta_value=1.0, loss_history_length=64,
                                           loss_based_sift_config=LossConfig(sift_config=SiftingBaseConfig(sift_delay=delay)))


class _Model(torch.nn.Module):
    """Takes the batch as the published BERT loss calls it: ``model(batch)`` with (inputs, masks, labels)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 2)

    def forward(self, batch: Any) -> torch.Tensor:
        return self.linear(batch[0].float() * batch[1].float())


def _three_tensor_loader(n: int = 96, batch_size: int = 16) -> DataLoader:
    """A TensorDataset of (inputs, masks, labels) as the BERT examples build it; the label is a function of the
    inputs, so a sample whose parts were mixed up with another's shows."""
    g = torch.Generator().manual_seed(0)
    inputs = torch.randint(1, 50, (n, 6), generator=g)
    labels = inputs[:, 0] % 2
    return DataLoader(TensorDataset(inputs, torch.ones_like(inputs), labels), batch_size=batch_size)


class OriginalBatchLoss(Loss):
    """The published BERT loss: indexes the DataLoader's own batch (``original_batch[2]``)."""

    def __init__(self) -> None:
        self.celoss = torch.nn.CrossEntropyLoss(reduction="none")
        self.seen: list[Any] = []

    def loss(self, model: torch.nn.Module, transformed_batch: SiftingBatch, original_batch: Any = None) -> torch.Tensor:
        self.seen.append((transformed_batch, original_batch))
        batch = [t for t in original_batch]
        return self.celoss(model(batch), batch[2])


class ListBatchTransform(SiftingBatchTransform):
    """The developer guide's list transform (inputs and labels as Python lists)."""

    def transform(self, batch: Any) -> ListBatch:
        return ListBatch(batch[0].tolist(), batch[-1].tolist())

    def reverse_transform(self, list_batch: ListBatch) -> list[torch.Tensor]:
        return [torch.tensor(list_batch.inputs), torch.tensor(list_batch.labels)]


class TensorBatchTransform(SiftingBatchTransform):
    """The developer guide's tensor transform."""

    def transform(self, batch: Any) -> TensorBatch:
        return TensorBatch(batch[0], batch[-1])

    def reverse_transform(self, tensor_batch: TensorBatch) -> list[torch.Tensor]:
        return [tensor_batch.inputs, tensor_batch.labels]


@pytest.mark.parametrize("transform", [None, ListBatchTransform(), TensorBatchTransform()], ids=["none", "list", "tensor"])
def test_a_pytorch_loop_sifts_with_each_published_transform(transform: SiftingBatchTransform | None) -> None:
    loss = OriginalBatchLoss()
    loader = SiftingDataloader(sift_config=_config(), orig_dataloader=_three_tensor_loader(), batch_transforms=transform,
                               loss_impl=loss, model=_Model(), log_batch_data=False)
    trained = 0
    for batch in loader:  # the loop as published: the batch in the form reverse_transform gives
        assert isinstance(batch, list)
        inputs, labels = batch[0], batch[-1]
        assert torch.equal(inputs[:, 0] % 2, labels)  # every kept sample kept its own label
        trained += len(labels)
    assert trained + loader.outbox.rows() == loader.stats.kept_samples and 0 < trained < 96  # the rest waits for epoch 2
    original, transformed = loss.seen[0][1], loss.seen[0][0]
    assert isinstance(original, list) and len(original) == 3 and original[0].shape == (16, 6)  # the DataLoader's own batch
    if transform is not None:
        assert isinstance(transformed, (ListBatch, TensorBatch)) and len(transformed) == 16
    held = loader.outbox.rows() if transform is not None else 0  # rows a transform's batch type holds by id
    assert len(loader._rows.rows) == held  # every sample was yielded or dropped, or waits for epoch 2


class ImageListBatchTransform(SiftingBatchTransform):
    """The ViT example's transform: a dict batch into a ListBatch of per-sample tensors, and back by stacking."""

    def transform(self, batch: Any) -> ListBatch:
        return ListBatch([batch["pixel_values"][i] for i in range(len(batch["pixel_values"]))],
                         [batch["labels"][i] for i in range(len(batch["labels"]))])

    def reverse_transform(self, list_batch: ListBatch) -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.stack(list_batch.inputs), "labels": torch.stack(list_batch.labels)}


class ImageLoss(Loss):
    def loss(self, model: torch.nn.Module, transformed_batch: SiftingBatch, original_batch: Any = None) -> torch.Tensor:
        batch = {k: v for k, v in original_batch.items()}
        return torch.nn.functional.cross_entropy(model(batch["pixel_values"]), batch["labels"], reduction="none")


def test_the_image_example_with_a_dict_batch_and_a_batch_sampler_loader() -> None:
    """A DataLoader built from a batch sampler has ``batch_size=None`` (as accelerate's): the sampler's is used."""
    g = torch.Generator().manual_seed(1)
    pixels = torch.randn(64, 3, 4, 4, generator=g)
    labels = (pixels[:, 0, 0, 0] > 0).long()
    rows = [{"pixel_values": pixels[i], "labels": labels[i]} for i in range(64)]

    def collate(examples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.stack([e["pixel_values"] for e in examples]), "labels": torch.stack([e["labels"] for e in examples])}

    base = DataLoader(rows, batch_sampler=BatchSampler(SequentialSampler(rows), 8, drop_last=False), collate_fn=collate)
    assert base.batch_size is None
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 2))
    loader = SiftingDataloader(sift_config=_config(), orig_dataloader=base, batch_transforms=ImageListBatchTransform(),
                               loss_impl=ImageLoss(), model=model)
    kept = [b for b in loader]
    assert all(set(b) == {"pixel_values", "labels"} and b["pixel_values"].shape[1:] == (3, 4, 4) for b in kept)
    assert all(torch.equal((b["pixel_values"][:, 0, 0, 0] > 0).long(), b["labels"]) for b in kept)
    assert sum(len(b["labels"]) for b in kept) + loader.outbox.rows() == loader.stats.kept_samples
    assert SiftingDataloader(_config(), base, None, ImageLoss(), model, batch_size=4).batch_size == 4  # the override


def test_the_documented_metric_lines_are_logged_and_batch_data_is_bounded(caplog: pytest.LogCaptureFixture,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import siftcli.compat.smart_sifting.dataloader.sift_dataloader as module

    monkeypatch.setattr(module, "BATCH_LOG_LIMIT", 4)
    loader = SiftingDataloader(_config(), _three_tensor_loader(), None, OriginalBatchLoss(), _Model(), True)
    with caplog.at_level(logging.INFO, logger=module.__name__):
        list(loader)
    lines = [r.getMessage() for r in caplog.records if r.name == module.__name__]
    assert f"num_orig_samples_seen: {loader.stats.raw_samples}" in lines
    assert f"num_orig_samples_kept: {loader.stats.kept_samples}" in lines
    assert len(loader.batch_log) == 4  # six raw batches, the four newest kept


def test_bad_arguments_name_the_argument_and_the_fix() -> None:
    with pytest.raises(TypeError, match="loss_impl= is required"):
        SiftingDataloader(_config(), _three_tensor_loader(), model=_Model())
    with pytest.raises(ValueError, match="batch_format_index=2"):
        SiftingDataloader(_config(), _three_tensor_loader(), None, OriginalBatchLoss(), _Model(), batch_format_index=2)
    with pytest.raises(ValueError, match="one label per input"):
        ListBatch([1, 2], [0])


def test_enable_sifting_trains_a_hugging_face_trainer(tmp_path: Path) -> None:
    """The guide's simple setup: an existing Trainer, sifting enabled on it, trained as before."""
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    from siftcli.compat.smart_sifting.integrations.trainer import enable_sifting

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=32, max_position_embeddings=16, num_labels=2))
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(1, 50, (8,), generator=g), "labels": int(i % 2)} for i in range(64)]

    class HFLoss(Loss):
        def loss(self, model: torch.nn.Module, transformed_batch: Any, original_batch: Any = None) -> torch.Tensor:
            batch = {k: v.to(model.device) for k, v in original_batch.items()}
            return torch.nn.functional.cross_entropy(model(**batch).logits, batch["labels"], reduction="none")

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = enable_sifting(Trainer(model=model, args=args, train_dataset=rows), _config(delay=2), HFLoss(), model)
    out = trainer.train()
    stats = trainer.sifting_loader.stats
    assert stats.raw_samples == 128 and 0 < stats.kept_samples < 128
    assert out.global_step == trainer.state.max_steps and trainer.lr_scheduler.get_last_lr()[0] == 0.0  # ends as planned


def test_the_lightning_data_module_shape_logs_the_kept_fraction(tmp_path: Path) -> None:
    """The smart-sifting Lightning test script's shape: a DataModule returns the SiftingDataloader (its model is the
    LightningModule), and TrainingMetricsRecorder logs what was kept. The loader reads the run's length from the trainer,
    so every epoch yields the batches Lightning planned and validates, the delay's extra batches included."""
    import pytorch_lightning as pl

    from siftcli.compat.smart_sifting.metrics.lightning import TrainingMetricsRecorder

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = _Model()
            self.validated = 0

        def forward(self, batch: Any) -> torch.Tensor:
            return self.model(batch)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(self(batch), batch[2])

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", torch.nn.functional.cross_entropy(self(batch), batch[2]))

        def on_validation_epoch_end(self) -> None:
            self.validated += 0 if self.trainer.sanity_checking else 1

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(pl.LightningDataModule):
        def __init__(self, model: pl.LightningModule) -> None:
            super().__init__()
            self.model = model

        def train_dataloader(self) -> SiftingDataloader:
            return SiftingDataloader(sift_config=_config(delay=3), orig_dataloader=_three_tensor_loader(),
                                     loss_impl=OriginalBatchLoss(), model=self.model)

        def val_dataloader(self) -> DataLoader:
            return _three_tensor_loader(32)

    module = Module()
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[TrainingMetricsRecorder()],
                         default_root_dir=str(tmp_path))
    trainer.fit(module, Data(module))
    metrics = trainer.callback_metrics
    assert 0 < float(metrics["sift/kept_fraction"]) < 1 and float(metrics["sift/num_orig_samples_seen"]) == 288
    assert module.validated == 3 and trainer.global_step == trainer.estimated_stepping_batches
    assert 0 < float(metrics["sift/epoch_kept_fraction"]) <= 1


def test_the_transformers_custom_setup_wraps_the_trainers_own_loader(tmp_path: Path) -> None:
    """The guide's custom setup: a Trainer subclass returns a SiftingDataloader over ``super().get_train_dataloader()``
    (accelerate's loader, whose ``batch_size`` is None)."""
    from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

    class HFLoss(Loss):
        def loss(self, model: torch.nn.Module, transformed_batch: Any, original_batch: Any = None) -> torch.Tensor:
            return torch.nn.functional.cross_entropy(model(**original_batch).logits, original_batch["labels"], reduction="none")

    class SiftingImplementedTrainer(Trainer):
        def get_train_dataloader(self) -> SiftingDataloader:
            dl = super().get_train_dataloader()
            self.sifting = SiftingDataloader(sift_config=_config(), orig_dataloader=dl, loss_impl=HFLoss(), model=self.model)
            return self.sifting

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=32, max_position_embeddings=16, num_labels=2))
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(1, 50, (8,), generator=g), "labels": int(i % 2)} for i in range(64)]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
                             gradient_accumulation_steps=2, eval_strategy="epoch", per_device_eval_batch_size=8)
    trainer = SiftingImplementedTrainer(model=model, args=args, train_dataset=rows, eval_dataset=rows[:16])
    trainer.train()
    stats = trainer.sifting.stats
    assert stats.raw_samples == 128 and 0 < stats.kept_samples < 128 and trainer.sifting.batch_size == 8
    assert sum("eval_loss" in h for h in trainer.state.log_history) == 2  # evaluated every epoch
