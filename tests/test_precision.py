"""Scoring precision: bf16 only where the hardware runs it natively, explicit choices win."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from siftcli.sift import SiftingDataLoader, cross_entropy_loss
from siftcli.sift.precision import autocast


def test_auto_scoring_precision_picks_bf16_only_where_it_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    from siftcli.sift import precision as loader_mod

    cpu = torch.device("cpu")
    monkeypatch.setattr(loader_mod, "fast_bf16", lambda device: True)
    assert loader_mod.scoring_precision("auto", cpu, "fp32") == "bf16"
    assert loader_mod.scoring_precision(None, cpu, "fp32") == "bf16"
    monkeypatch.setattr(loader_mod, "fast_bf16", lambda device: False)
    assert loader_mod.scoring_precision("auto", cpu, "fp32") == "fp32"  # emulated bf16 would be slower
    assert loader_mod.scoring_precision("auto", cpu, "bf16") == "bf16"  # follows training precision
    assert loader_mod.scoring_precision("fp32", cpu, "bf16") == "fp32"  # an explicit choice wins
    assert loader_mod.fast_bf16(torch.device("meta")) is False
    model = torch.nn.Linear(4, 2)
    data = DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)
    assert SiftingDataLoader(data, model, cross_entropy_loss, precision="auto").precision == "fp32"
    with pytest.raises(ValueError, match="precision must be"):
        SiftingDataLoader(data, model, cross_entropy_loss, precision="int8")


def test_autocast_is_a_no_op_in_fp32_and_casts_in_bf16() -> None:
    a = torch.randn(4, 4)
    with autocast(torch.device("cpu"), "fp32"):
        assert (a @ a).dtype == torch.float32
    with autocast(torch.device("cpu"), "bf16"):
        assert (a @ a).dtype == torch.bfloat16
