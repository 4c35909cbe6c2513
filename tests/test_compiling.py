"""compile: true on CPU: lengths padded to buckets bound the graphs; the counters see recompilations and eager fallbacks."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from siftcli.recipe.schema import validate_recipe
from siftcli.sift.batching import Packer, bucket, trim_padding
from siftcli.training import compiling
from siftcli.training.loop import train
from siftcli.workload.build import build_workload
from siftcli.workload.rows import PadCollator
from tests.conftest import tiny_recipe_dict


def test_bucket_rounds_up_to_the_multiple() -> None:
    assert [bucket(w, 16) for w in (1, 16, 17, 33)] == [16, 16, 32, 48]
    assert bucket(7, None) == 7 and bucket(7, 1) == 7


def test_collator_and_packer_keep_every_width_on_a_bucket() -> None:
    collate = PadCollator(pad_id=0, pad_multiple=8, max_width=20)
    rows = [{"input_ids": [1] * n, "attention_mask": [1] * n, "labels": 0} for n in (3, 5)]
    assert collate(rows)["input_ids"].shape == (2, 8)
    long = [{"input_ids": [1] * 19, "attention_mask": [1] * 19, "labels": 0}]
    assert collate(long)["input_ids"].shape == (1, 20)  # capped at max_length, never past it
    packer = Packer(batch_size=4, pad_multiple=8)
    widths = []
    for n in (2, 11, 4, 6, 9, 3):
        batch = collate([{"input_ids": [1] * n, "attention_mask": [1] * n, "labels": 0}] * 3)
        for out in packer.add(batch, torch.tensor([True, False, True])):
            widths.append(out["input_ids"].shape[1])
    assert widths and all(w % 8 == 0 for w in widths)
    short = {"input_ids": torch.ones(2, 16, dtype=torch.long), "attention_mask": torch.cat([torch.ones(2, 3), torch.zeros(2, 13)], 1)}
    assert trim_padding(short, multiple=8)["input_ids"].shape[1] == 8 and trim_padding(short)["input_ids"].shape[1] == 3


@pytest.fixture
def eager_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._dynamo

    monkeypatch.setattr(compiling, "BACKEND", "eager")  # dynamo traces and guards as usual, without generating code
    torch._dynamo.reset()


def test_padding_to_buckets_stops_recompilation(eager_backend: None) -> None:
    net = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 2))

    def graphs_for(multiple: int | None) -> dict[str, int]:
        torch._dynamo.reset()
        before = compiling.counts()
        fn = compiling.compile_module(net)
        for length in (5, 9, 12, 7, 14, 3):
            fn(torch.zeros(4, bucket(length, multiple), dtype=torch.long))
        return compiling.since(before)

    ragged, bucketed = graphs_for(None), graphs_for(16)
    assert ragged["compilations"] >= 2 and ragged["graphs"] >= 2  # a new length: compiled again
    assert bucketed["graphs"] == 1 and bucketed["compilations"] == 1


def test_a_frame_that_cannot_compile_runs_eagerly_and_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._dynamo

    def broken(gm, example_inputs):  # noqa: ANN001, ANN202  (a backend whose compiler is missing)
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(compiling, "BACKEND", broken)
    torch._dynamo.reset()
    before = compiling.counts()
    net = torch.nn.Linear(3, 2)
    x = torch.randn(2, 3)
    assert torch.equal(compiling.compile_module(net)(x), net(x))
    assert compiling.since(before)["eager_fallbacks"] >= 1


def test_compiled_training_reports_what_it_compiled(eager_backend: None, tmp_path: Path, text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, compile=True, **{"sift.enabled": False}))
    assert recipe.pad_multiple == 16
    out = train(build_workload(recipe), recipe, run_dir=None)
    assert out["compile"]["graphs"] >= 1 and out["compile"]["pad_to_multiple_of"] == 16
    assert out["compile"]["eager_fallbacks"] == 0


def test_every_bucket_is_compiled_at_the_start_on_the_clock_and_nothing_after(eager_backend: None, text_csv: Path) -> None:
    """The buckets (multiples of 16 up to max_length 16 here: one; 32: two) compile before the first step, in their own
    phase on the run's clock; the steady state compiles nothing; scoring and evaluation stay eager."""
    recipe = validate_recipe(tiny_recipe_dict(text_csv, compile=True, max_length=32, epochs=2, **{"sift.enabled": False}))
    out = train(build_workload(recipe), recipe, run_dir=None)
    assert out["compile"]["compilations"] >= 2 and out["compile"]["steady_compilations"] == 0
    assert out["phases"]["compile"] > 0 and out["compile"]["seconds"] > 0
    assert out["train_seconds"] >= out["phases"]["compile"]


def test_compile_mode_reaches_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(compiling, "BACKEND", "inductor")
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: seen.update(kwargs) or module)
    compiling.compile_module(torch.nn.Linear(2, 2), "reduce-overhead")
    assert seen == {"backend": "inductor", "dynamic": False, "mode": "reduce-overhead"}


@pytest.mark.parametrize("sift", [{"sift.enabled": False}, {"sift.scoring": "memory"}, {"sift.scoring": "fresh"}],
                         ids=["baseline", "memory", "fresh"])
def test_nothing_compiles_after_the_start_over_every_epoch_whatever_the_row_count(
        eager_backend: None, tmp_path: Path, sift: dict) -> None:
    """Training rows that do not divide the batch: every epoch ends on a shorter batch (sifted runs: a remainder of
    kept rows), which goes through the uncompiled forward instead of compiling a graph of its shape."""
    from tests.conftest import make_text_rows

    path = tmp_path / "odd.csv"
    path.write_text("\n".join(["text,label"] + [f"{t},{y}" for t, y in make_text_rows(170)]) + "\n")
    recipe = validate_recipe(tiny_recipe_dict(path, compile=True, epochs=3, **sift))
    workload = build_workload(recipe)
    assert len(workload.train_data) % recipe.batch_size, len(workload.train_data)
    out = train(workload, recipe, run_dir=None)
    assert out["compile"]["compilations"] >= 1 and out["compile"]["steady_compilations"] == 0, out["compile"]
    assert out["compile"]["eager_fallbacks"] == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graphs_hand_the_loader_the_losses_eager_training_gives(text_csv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``compile_mode: reduce-overhead`` replays CUDA graphs whose outputs live in buffers the next replay overwrites:
    the per-sample losses the sifting loader records (its copy to the host starts before the next step is queued) must
    be the losses eager training gives, step by step, never a later step's."""
    from siftcli.sift.feedback import Feedback

    def recorded(mode: str | None) -> list[torch.Tensor]:
        got: list[torch.Tensor] = []
        record = Feedback.record
        monkeypatch.setattr(Feedback, "record", lambda self, losses, epoch: (got.append(losses.detach().float().cpu().clone()),
                                                                            record(self, losses, epoch))[1])
        # kept at random: both runs train the same batches, whatever the compiled numerics do to the scores
        changes = {"device": "cuda", "precision": "fp32", "epochs": 1, "sift.mode": "random", "sift.keep_fraction": 0.5}
        if mode is not None:
            changes.update(compile=True, compile_mode=mode)
        recipe = validate_recipe(tiny_recipe_dict(text_csv, **changes))
        torch._dynamo.reset()
        train(build_workload(recipe), recipe, run_dir=None)
        return got

    eager, graphs = recorded(None), recorded("reduce-overhead")
    assert len(eager) == len(graphs) > 5
    for step, (a, b) in enumerate(zip(eager, graphs)):
        assert torch.allclose(a, b, rtol=1e-3, atol=1e-4), (step, a, b)
