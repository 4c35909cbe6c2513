"""Scoring precision: bf16 only where the hardware runs it natively and (on a CPU) measured faster; explicit choices win."""

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
    assert loader_mod.scoring_precision("auto", cpu, "fp32") == "fp32"  # reproducible: never timed
    assert loader_mod.scoring_precision(None, cpu, "fp32") == "fp32"
    assert loader_mod.scoring_precision("fastest", cpu, "fp32") == "fastest"  # a CPU with bf16 instructions: timed
    assert loader_mod.scoring_precision("auto", torch.device("cuda"), "fp32") == "bf16"  # a GPU with bf16: always
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


@pytest.mark.parametrize("slow", ["bf16", "fp32"])
def test_fastest_times_both_precisions_on_the_first_batch_keeps_the_faster_and_resumes_with_it(
        slow: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from siftcli.sift import SiftConfig, scoring

    clock = {"t": 0.0}

    def fake_clock() -> float:  # time moves 10x faster while the slow precision's autocast is on
        in_bf16 = torch.is_autocast_enabled("cpu")
        clock["t"] += 1.0 if (in_bf16 and slow == "bf16") or (not in_bf16 and slow == "fp32") else 0.1
        return clock["t"]

    monkeypatch.setattr(scoring.time, "perf_counter", fake_clock)
    model = torch.nn.Linear(4, 2)
    data = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
    loader = SiftingDataLoader(data, model, cross_entropy_loss, SiftConfig(sift_delay=0), precision="fastest")
    loader.scorer.candidates = ("fp32", "bf16")  # what fastest means on a CPU with bf16 instructions
    assert loader.precision == "fastest"
    it = iter(loader)
    next(it)
    fast = "fp32" if slow == "bf16" else "bf16"
    assert loader.precision == fast and loader.scorer.timings[slow] > loader.scorer.timings[fast]
    state = loader.state_dict()
    resumed = SiftingDataLoader(data, model, cross_entropy_loss, SiftConfig(sift_delay=0), precision="fastest")
    resumed.scorer.candidates = ("fp32", "bf16")
    resumed.load_state_dict(state)
    assert resumed.precision == fast and not resumed.scorer.candidates  # a resumed run scores as the first did
