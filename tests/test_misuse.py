"""The library's misuse named at the call that made it: construction, ``load_state_dict``, a second live pass
(docs/errors.md, "The library")."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from siftcli.compat.smart_sifting import Loss as SiftLoss
from siftcli.compat.smart_sifting import RelativeProbabilisticSiftConfig, SiftingDataloader
from siftcli.sift import SiftConfig
from siftcli.sift.loader import SiftingDataLoader


def _rows(n: int = 64) -> TensorDataset:
    x = torch.randn(n, 4, generator=torch.Generator().manual_seed(0))
    return TensorDataset(x, (x[:, 0] > 0).long())


def _loss(model: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(model(batch[0]), batch[1], reduction="none")


def _sifting(batch_size: int = 8, **kwargs) -> SiftingDataLoader:
    config = SiftConfig(beta=1.0, loss_history_length=16, sift_delay=1, scoring="fresh")
    return SiftingDataLoader(DataLoader(_rows(), batch_size=batch_size), torch.nn.Linear(4, 2), _loss, config, **kwargs)


class _Stream(IterableDataset):
    def __iter__(self):  # noqa: ANN204
        yield from _rows()


@pytest.mark.parametrize("kwargs,error,expected", [
    ({"exact_len": "no"}, TypeError, "exact_len must be True or False, got 'no'"),
    ({"epochs": 0}, ValueError, "epochs must be the run's length in epochs, a finite number above 0"),
    ({"epochs": float("nan")}, ValueError, "got nan"),
    ({"epochs": "3"}, ValueError, "got '3'"),
    ({"padding_side": "middle"}, ValueError, "padding_side must be 'right' or 'left'"),
    ({"pad_to_multiple_of": 0}, ValueError, "pad_to_multiple_of must be a positive whole number or None, got 0"),
    ({"pad_values": 5}, TypeError, "pad_values must map field names to pad values"),
    ({"batch_transform": 5}, TypeError, "batch_transform must be a callable batch -> batch, got int"),
    ({"yield_on_device": "yes"}, TypeError, "yield_on_device must be True or False, got 'yes'"),
    ({"meta_in_batch": "no"}, TypeError, "meta_in_batch must be True or False, got 'no'"),
    ({"device": "gpu"}, ValueError, "device 'gpu': expected a torch device such as 'cpu' or 'cuda'"),
])
def test_construction_names_the_argument(kwargs: dict, error: type, expected: str) -> None:
    with pytest.raises(error, match=expected):
        _sifting(**kwargs)


def test_a_loader_without_a_length_sifts_and_what_a_stream_cannot_give_names_the_fix() -> None:
    """A stream is sifted (tests/test_shapes.py); an exact epoch length asked of it is refused, naming the route."""
    assert len(list(SiftingDataLoader(DataLoader(_Stream(), batch_size=8), torch.nn.Linear(4, 2), _loss))) > 0
    with pytest.raises(ValueError, match=r"exact_len=True: the wrapped loader streams.*max_steps.*give the dataset a __len__"):
        SiftingDataLoader(DataLoader(_Stream(), batch_size=8), torch.nn.Linear(4, 2), _loss, exact_len=True)


def test_a_second_live_pass_is_refused_where_the_first_is_resumed() -> None:
    loader = _sifting()
    first = iter(loader)
    next(first)
    second = iter(loader)
    assert next(second) is not None  # the newer pass runs (a loop that abandoned the first, as the HF Trainer does)
    with pytest.raises(RuntimeError, match="overtaken by a newer iter"):
        next(first)
    assert len(list(second)) > 0  # and the newer pass goes on undisturbed


@pytest.mark.parametrize("state,error,expected", [
    (None, TypeError, "state must be the dict SiftingDataLoader.state_dict\\(\\) returned, got NoneType"),
    ({}, ValueError, "it lacks 'config', 'sifter'"),
    ("whole", ValueError, "not a whole SiftingDataLoader.state_dict\\(\\) \\(TypeError"),
])
def test_a_malformed_state_is_named(state: object, error: type, expected: str) -> None:
    if state == "whole":
        saved = _sifting()
        next(iter(saved))
        state = {**saved.state_dict(), "sifter": 5}
    with pytest.raises(error, match=expected):
        _sifting().load_state_dict(state)


def test_a_state_of_another_batch_size_is_refused() -> None:
    saved = _sifting(batch_size=8)
    next(iter(saved))
    with pytest.raises(ValueError, match="yields batches of 8, this loader of 16.*resume with batch_size=8"):
        _sifting(batch_size=16).load_state_dict(saved.state_dict())


class _CE(SiftLoss):
    def loss(self, model, transformed_batch, original_batch=None):  # noqa: ANN001, ANN201
        return _loss(model, transformed_batch)


@pytest.mark.parametrize("change,expected", [
    ({"sift_config": "beta=1"}, "sift_config must be a RelativeProbabilisticSiftConfig .* got str 'beta=1'"),
    ({"batch_transforms": lambda b: b}, "batch_transforms must be a SiftingBatchTransform .* got function"),
    ({"loss_impl": _CE}, r"loss_impl=_CE is a class; pass an instance: loss_impl=_CE\(\)"),
    ({"seed": "abc"}, "seed must be a whole number, 0 or more .*got 'abc'"),
])
def test_the_compat_loader_names_its_argument(change: dict, expected: str) -> None:
    args = {"sift_config": RelativeProbabilisticSiftConfig(beta_value=1, loss_history_length=16),
            "orig_dataloader": DataLoader(_rows(), batch_size=8), "loss_impl": _CE(), "model": torch.nn.Linear(4, 2), **change}
    with pytest.raises((TypeError, ValueError), match=expected):  # the seed's rule is SiftConfig's own
        SiftingDataloader(**args)


def _trainer(tmp_path: Path, out: str, **kwargs):  # noqa: ANN202
    from transformers import BertConfig, BertForSequenceClassification, TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=32, max_position_embeddings=16, num_labels=2))
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(1, 50, (8,), generator=g), "labels": int(i % 2)} for i in range(32)]
    args = TrainingArguments(output_dir=str(tmp_path / out), per_device_train_batch_size=8, num_train_epochs=1, report_to=[],
                             save_strategy="steps", save_steps=2, use_cpu=True, disable_tqdm=True, seed=0,
                             **kwargs.pop("args", {}))
    return SiftingTrainer(model=model, args=args, train_dataset=rows, **kwargs)


def test_the_trainer_refuses_a_settings_dict_and_a_loss_that_is_not_callable(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"sift_config must be a SiftConfig, got dict: write sift_config=SiftConfig\(\*\*settings\)"):
        _trainer(tmp_path, "a", sift_config={"beta": 1.0})
    with pytest.raises(TypeError, match="sift_loss must be a callable"):
        _trainer(tmp_path, "b", sift_loss="cross_entropy")


def test_a_trainer_checkpoint_without_the_loaders_state_is_refused_unless_the_epoch_may_start_again(tmp_path: Path) -> None:
    whole = _trainer(tmp_path, "whole", sift_config=SiftConfig(beta=1.0, sift_delay=1))
    whole.train()
    checkpoint = tmp_path / "whole" / "checkpoint-2"
    (checkpoint / "sifting_loader_rank0.pt").unlink()  # as a plain Trainer would have written it
    with pytest.raises(ValueError, match=r"holds no sifting_loader_rank0.pt .*ignore_data_skip=True"):
        _trainer(tmp_path, "again", sift_config=SiftConfig(beta=1.0, sift_delay=1)).train(resume_from_checkpoint=str(checkpoint))
    fresh = _trainer(tmp_path, "fresh", sift_config=SiftConfig(beta=1.0, sift_delay=1), args={"ignore_data_skip": True})
    fresh.train(resume_from_checkpoint=str(checkpoint))
    assert fresh.state.global_step == whole.state.global_step and fresh.args.ignore_data_skip is True
    shutil.rmtree(tmp_path / "whole")


def test_reference_losses_and_hooks_are_checked_where_they_are_given() -> None:
    config = SiftConfig(beta=1.0, loss_history_length=16, sift_delay=1, scoring="fresh", score="reducible")
    loader = DataLoader(_rows(), batch_size=8)
    with pytest.raises(ValueError, match="reference_losses holds 10 values for a dataset of 64 samples"):
        SiftingDataLoader(loader, torch.nn.Linear(4, 2), _loss, config, reference_losses=torch.zeros(10))
    with pytest.raises(TypeError, match="reference_losses must be a 1-D Tensor.*got list"):
        SiftingDataLoader(loader, torch.nn.Linear(4, 2), _loss, config, reference_losses=[0.0] * 64)
    with pytest.raises(TypeError, match="hook must be a callable taking a BatchDecision, got int"):
        _sifting().add_batch_hook(5)


@pytest.mark.parametrize("changes,expected", [
    ({"beta": True}, "beta must be a positive number, got True"),
    ({"loss_history_length": 2.7}, "loss_history_length must be a whole number from 1 to 10,000,000"),
    ({"loss_history_length": "32"}, "loss_history_length must be a whole number"),
    ({"loss_history_length": 10**9}, "got 1000000000"),
])
def test_a_sift_config_of_the_wrong_kind_is_named(changes: dict, expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        SiftConfig(**changes)


def test_set_epoch_takes_an_epoch_number() -> None:
    loader = _sifting()
    for bad in ("x", -1, 10**30, True):
        with pytest.raises(ValueError, match=r"set_epoch\(epoch\): expected the epoch number"):
            loader.set_epoch(bad)
    loader.set_epoch(2)
    assert loader.epoch == 2


def test_a_sifting_loader_is_not_wrapped_twice() -> None:
    with pytest.raises(TypeError, match="already a SiftingDataLoader"):
        SiftingDataLoader(_sifting(), torch.nn.Linear(4, 2), _loss, SiftConfig())


def test_a_state_is_not_loaded_into_a_live_pass() -> None:
    loader = _sifting()
    state = loader.state_dict()
    it = iter(loader)
    next(it)
    with pytest.raises(RuntimeError, match=r"load_state_dict\(\) during a pass"):
        loader.load_state_dict(state)


def test_a_state_of_other_data_or_another_kind_of_loader_is_refused() -> None:
    small = SiftingDataLoader(DataLoader(_rows(16), batch_size=8), torch.nn.Linear(4, 2), _loss,
                              SiftConfig(beta=1.0, loss_history_length=16, sift_delay=1, scoring="fresh"))
    with pytest.raises(ValueError, match="wraps a dataset of 64 rows, this loader one of 16"):
        small.load_state_dict(_sifting().state_dict())
    state = _sifting().state_dict()
    with pytest.raises(ValueError, match="wraps a StatefulDataLoader, this loader a plain DataLoader"):
        _sifting().load_state_dict({**state, "wrapped": {**state["wrapped"], "stateful": True}})


def test_a_rank_saved_as_text_is_read_as_its_number() -> None:
    state = _sifting().state_dict()
    _sifting().load_state_dict({**state, "rank": "0", "world": "1"})  # an edited state: the same rank, no contradiction


def test_an_edited_epoch_in_a_state_is_named() -> None:
    state = _sifting().state_dict()
    with pytest.raises(ValueError, match="cursor epoch must be a whole number from 0, got 'x'"):
        _sifting().load_state_dict({**state, "cursor": {**state["cursor"], "epoch": "x"}})
