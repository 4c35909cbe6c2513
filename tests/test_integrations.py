"""SageMaker-compatible layer, Hugging Face Trainer, Lightning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    assert sum(b[0].shape[0] for b in batches) + loader.outbox.rows() == loader.stats.kept_samples
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
    assert [e.raw_samples for e in stats.epochs] == [96, 96]  # every row offered each epoch, though the Trainer stops at len()
    assert [e.batches for e in stats.epochs] == [len(trainer.sifting_loader)] * 2  # probabilistic, and still exactly len()
    assert out.global_step == trainer.state.max_steps  # the schedule ends where it was planned
    assert trainer.lr_scheduler.get_last_lr()[0] == 0.0  # linear decay reached its end, as the plain Trainer's does
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


def _resume_trainer(tmp_path: Path, out: str, save_steps: int = 3, mode: str = "calibrated") -> Any:
    from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=32, max_position_embeddings=16, num_labels=2,
                                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(1, 50, (8,), generator=g), "labels": int(i % 2)} for i in range(64)]
    args = TrainingArguments(output_dir=str(tmp_path / out), per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                             save_strategy="steps", save_steps=save_steps, logging_steps=1, use_cpu=True, disable_tqdm=True, seed=0)
    return SiftingTrainer(model=model, args=args, train_dataset=rows,
                          sift_config=SiftConfig(beta=1.0, sift_delay=2, mode=mode, seed=1))


@pytest.mark.parametrize("mode", ["calibrated", "probabilistic"])
def test_sifting_trainer_resumes_mid_epoch_with_the_uninterrupted_runs_decisions_and_weights(tmp_path: Path, mode: str) -> None:
    whole = _resume_trainer(tmp_path, "whole", mode=mode)
    whole.train()
    steps_per_epoch = len(whole.sifting_loader)
    assert 3 % steps_per_epoch != 0  # checkpoint-3 is inside an epoch
    checkpoint = tmp_path / "whole" / "checkpoint-3"
    assert (checkpoint / "sifting_loader_rank0.pt").exists()
    resumed = _resume_trainer(tmp_path, "resumed", mode=mode)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    a, b = whole.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)  # the same kept samples in the same order, the same weights
    assert resumed.sifting_loader.stats.kept_samples == whole.sifting_loader.stats.kept_samples
    assert resumed.state.global_step == whole.state.global_step
    assert resumed.args.ignore_data_skip is False  # the user's setting is back
    kept = [h["sift_kept_fraction"] for h in whole.state.log_history if "sift_kept_fraction" in h]
    assert kept and all(0 < k <= 1 for k in kept)


def test_an_accelerate_loader_draws_a_new_order_every_epoch_when_the_loop_stops_at_len() -> None:
    """The Hugging Face Trainer takes len() batches and stops; accelerate's loader only advances its epoch when a pass
    runs to the end, so the sifting loader tells it the epoch (else every epoch repeats the first one's order)."""
    from accelerate import Accelerator

    from siftcli.sift import SiftingDataLoader, cross_entropy_loss

    x = torch.randn(32, 4, generator=torch.Generator().manual_seed(0))
    base = Accelerator(cpu=True).prepare(DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=4, shuffle=True))
    loader = SiftingDataLoader(base, torch.nn.Linear(4, 2), cross_entropy_loss, SiftConfig(mode="all"))
    orders: list[list[int]] = []
    loader.add_batch_hook(lambda d: orders[-1].extend(d.indices.tolist()))
    for _ in range(3):
        orders.append([])
        batches = iter(loader)
        for _ in range(len(loader)):  # the Trainer's way: exactly len() batches, never the end of the pass
            next(batches)
    assert all(sorted(o) == list(range(32)) for o in orders)
    assert orders[0] != orders[1] != orders[2]


@pytest.mark.parametrize("mode", ["calibrated", "probabilistic"])
def test_lightning_tutorial_shape_a_data_module_validates_every_epoch(tmp_path: Path, mode: str) -> None:
    """Lightning's tutorial shape: the DataModule owns train_dataloader and passes itself; the helper finds the module
    through the trainer. Every epoch yields the len() batches Lightning planned (probabilistic draws too), so it
    validates every epoch and ModelCheckpoint(monitor=...) sees each."""
    import lightning.pytorch as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from siftcli.integrations.lightning import SiftedTrainingStep, sifting_dataloader
    from siftcli.sift.losses import cross_entropy_loss

    class Module(SiftedTrainingStep, L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)
            self.validated: list[int] = []
            self.yielded: list[tuple[int, int]] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def on_train_epoch_end(self) -> None:
            self.yielded.append((self.trainer.fit_loop.epoch_loop.batch_idx + 1, len(self.sifted)))

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))

        def on_validation_epoch_end(self) -> None:
            if not self.trainer.sanity_checking:
                self.validated.append(self.current_epoch)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.5)

    class Data(L.LightningDataModule):
        def train_dataloader(self) -> Any:
            return sifting_dataloader(self, _data(256), SiftConfig(beta=3.0, sift_delay=0, seed=3, mode=mode), cross_entropy_loss)

        def val_dataloader(self) -> DataLoader:
            return _data(64)

    L.seed_everything(0)
    module = Module()
    best = ModelCheckpoint(dirpath=str(tmp_path / "ckpt"), monitor="val_loss", save_top_k=1)
    trainer = L.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, callbacks=[best], enable_progress_bar=False,
                        enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(module, Data())
    assert module.validated == [0, 1, 2], (module.validated, module.yielded)
    assert [e.raw_samples for e in module.sifted.stats.epochs] == [256] * 3  # every row offered every epoch
    assert all(done == planned for done, planned in module.yielded), module.yielded
    assert best.best_model_path and Path(best.best_model_path).exists()


def test_under_ddp_each_rank_reads_its_own_shard() -> None:
    """Lightning gives a plain DataLoader a DistributedSampler; it cannot see inside the sifting loader, so the helper
    does it (a trainer of two processes, rank 1, as Lightning's own object would say)."""
    from types import SimpleNamespace

    from siftcli.integrations.lightning import sifting_dataloader
    from siftcli.sift.losses import cross_entropy_loss

    module = torch.nn.Linear(4, 2)
    module.trainer = SimpleNamespace(world_size=2, global_rank=1, max_epochs=1)
    x = torch.randn(40, 4)
    base = DataLoader(TensorDataset(x, torch.zeros(40, dtype=torch.long)), batch_size=4, shuffle=True, drop_last=False)
    loader = sifting_dataloader(module, base, SiftConfig(mode="all"), cross_entropy_loss)
    sampler = loader.dataloader.sampler
    assert isinstance(sampler, torch.utils.data.DistributedSampler) and sampler.rank == 1 and sampler.num_replicas == 2
    assert sampler.shuffle and loader.dataloader.batch_size == 4
    assert len(loader) == len(list(loader)) == 5  # 20 rows of 40, in batches of 4


@pytest.mark.parametrize("mode", ["calibrated", "probabilistic"])
def test_sifting_trainer_resumes_at_an_epoch_boundary_with_its_history_and_no_second_delay(tmp_path: Path, mode: str) -> None:
    """A checkpoint at the end of an epoch: the resumed run keeps the loss history and the delay already served, so it
    ends as the uninterrupted run does (a Trainer without the sifting state would start empty and delay again)."""
    whole = _resume_trainer(tmp_path, "whole", save_steps=1, mode=mode)
    whole.train()
    steps = len(whole.sifting_loader)
    assert whole.sifting_loader.stats.epochs[0].batches == steps  # checkpoint-{steps} is the first epoch's end
    checkpoint = tmp_path / "whole" / f"checkpoint-{steps}"
    resumed = _resume_trainer(tmp_path, "resumed", save_steps=1, mode=mode)
    resumed.train(resume_from_checkpoint=str(checkpoint))
    a, b = whole.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert resumed.sifting_loader.stats.sift_started_at == whole.sifting_loader.stats.sift_started_at


def test_the_lightning_helper_without_a_module_to_score_names_the_fix() -> None:
    from siftcli.integrations.lightning import sifting_dataloader
    from siftcli.sift.losses import cross_entropy_loss

    class DataModule:  # a DataModule outside a running Trainer: no parameters, no trainer
        trainer = None

    with pytest.raises(ValueError, match="pass the LightningModule"):
        sifting_dataloader(DataModule(), _data(), SiftConfig(), cross_entropy_loss)


def test_lightning_val_check_interval_and_early_stopping_work_on_a_probabilistic_sifting_loader(tmp_path: Path) -> None:
    """Validation twice an epoch (val_check_interval=0.5) at the batch indices Lightning planned from len(), and
    EarlyStopping on the monitored value stops the run: both need every epoch to yield the len() it promised."""
    import lightning.pytorch as L
    from lightning.pytorch.callbacks import EarlyStopping

    from siftcli.integrations.lightning import SiftedTrainingStep, sifting_dataloader
    from siftcli.sift.losses import cross_entropy_loss

    class Module(SiftedTrainingStep, L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 2)
            self.checks: list[tuple[int, int]] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def train_dataloader(self) -> Any:
            return sifting_dataloader(self, _data(256), SiftConfig(beta=1.0, seed=5), cross_entropy_loss)

        def val_dataloader(self) -> DataLoader:
            return _data(64)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", 1.0 + 0 * self(batch[0]).sum())  # never improves: EarlyStopping must end the run

        def on_validation_epoch_end(self) -> None:
            if not self.trainer.sanity_checking:
                self.checks.append((self.current_epoch, self.trainer.fit_loop.epoch_loop.batch_idx + 1))

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    L.seed_everything(0)
    module = Module()
    stop = EarlyStopping(monitor="val_loss", patience=2, mode="min")
    trainer = L.Trainer(max_epochs=10, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        callbacks=[stop], val_check_interval=0.5, enable_progress_bar=False, enable_model_summary=False,
                        default_root_dir=str(tmp_path))
    trainer.fit(module)
    per_epoch = len(module.sifted)
    assert trainer.current_epoch < 9 and stop.stopped_epoch > 0  # stopped early, on the validations it saw
    epochs = sorted({e for e, _ in module.checks})
    assert all(sum(1 for e, _ in module.checks if e == epoch) == 2 for epoch in epochs[:-1])  # twice in every full epoch
    assert all(idx in (per_epoch // 2, per_epoch) for _, idx in module.checks)


def test_sifting_trainer_trains_the_label_smoothed_loss_the_trainer_would(tmp_path: Path) -> None:
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_pt_utils import LabelSmoother

    from siftcli.integrations.hf import SiftingTrainer, smoothed_losses

    logits, labels = torch.randn(6, 3), torch.tensor([0, 2, 1, 1, 0, 2])
    assert torch.allclose(smoothed_losses(logits, labels, 0.1).mean(), LabelSmoother(0.1)({"logits": logits}, labels))
    model, rows = _tiny_bert_and_rows(32)
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=1, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
                             label_smoothing_factor=0.1)
    sifted = SiftingTrainer(model=model, args=args, train_dataset=rows, sift_config=SiftConfig(mode="all"))
    plain_trainer = Trainer(model=model, args=args, train_dataset=rows)  # it seeds the RNG as it is made
    batch = next(iter(sifted.get_train_dataloader()))
    model.train()
    torch.manual_seed(0)  # the same dropout in both forwards
    ours = sifted.compute_loss(model, dict(batch))
    torch.manual_seed(0)
    plain = plain_trainer.compute_loss(model, dict(batch))
    assert torch.allclose(ours, plain, atol=1e-6), (ours, plain)


def test_a_sifting_trainer_subclass_that_overrides_compute_loss_is_told_how_to_feed_it(tmp_path: Path) -> None:
    from transformers import TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer

    class Mine(SiftingTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):  # noqa: ANN001, ANN201
            return model(**inputs).loss

    model, rows = _tiny_bert_and_rows(16)
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, disable_tqdm=True)
    with pytest.warns(UserWarning, match=r"Mine overrides compute_loss: return self.sifting_loader.training_loss"):
        Mine(model=model, args=args, train_dataset=rows)
