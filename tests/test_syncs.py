"""No host-device synchronisation in the steady-state training step (counted on the CPU by :mod:`tests.syncs`; on a GPU
under ``torch.cuda.set_sync_debug_mode("error")``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from siftcli.recipe.schema import validate_recipe
from siftcli.sift import loader as loader_module
from siftcli.training import checkpoint, loop
from siftcli.training.loop import train
from siftcli.training.setup import sift_config
from siftcli.workload.build import build_workload
from tests.conftest import tiny_recipe_dict
from tests.syncs import SyncCounter, on_device, pinned

#: The paths of item 1: the baseline, online sifting (memory, fresh, every mode; reducible needs a reference and is
#: counted in test_reference_scoring_makes_no_sync), and distillation with the teacher cache.
CASES = {
    "baseline": {"sift.enabled": False},
    "memory": {"sift.scoring": "memory"},
    "memory-train-refresh": {"sift.scoring": "memory", "sift.memory_refresh": "train"},
    "fresh-probabilistic": {"sift.scoring": "fresh"},
    "fresh-calibrated": {"sift.scoring": "fresh", "sift.mode": "calibrated"},
    "fresh-infobatch": {"sift.scoring": "fresh", "sift.mode": "infobatch"},
    "random": {"sift.mode": "random", "sift.keep_fraction": 0.5},
    "auto-delay": {"sift.sift_delay": "auto", "sift.scoring": "fresh"},
}


def count_syncs(recipe_dict: dict, teacher_dir: Path | None = None, batches_on_device: bool = False,
                as_gpu: bool = False, **train_kwargs) -> tuple[Counter, int, SyncCounter]:
    """(host reads of device values by step, steps run, the counter) for one training run; evaluation and checkpoints
    (where a sync is allowed) are not counted. ``batches_on_device``: the loader's input batches count as sitting on the
    device (as accelerate's do), so a host read of one counts too. ``as_gpu``: the counter's GPU mode (event waits,
    pageable copies), the raw batches pinned as the run's ``DataLoader(pin_memory=True)`` pins them on a GPU."""
    recipe = validate_recipe(recipe_dict)
    torch.manual_seed(0)
    workload = build_workload(recipe)
    if batches_on_device:
        collate = workload.collate
        workload.collate = lambda rows: on_device(collate(rows))
    elif as_gpu:
        collate = workload.collate
        workload.collate = lambda rows: pinned(collate(rows))
    cfg = sift_config(recipe, len(workload.train_data)) if recipe.sift.enabled else None
    modules = [workload.model] + ([workload.teacher] if getattr(workload, "teacher", None) is not None else [])
    counter = SyncCounter(*modules, as_gpu=as_gpu)
    evaluate, save = loop.evaluate, checkpoint.save

    def paused(fn):
        def run(*args, **kwargs):
            with counter.paused():
                return fn(*args, **kwargs)
        return run

    def on_event(kind: str, data: dict) -> None:
        if kind in ("step", "tick"):
            counter.step = data["step"] + 1  # what follows belongs to the next step
        elif kind == "epoch":
            counter.epoch_ends.append(data["step"])

    loop.evaluate, checkpoint.save = paused(evaluate), paused(save)
    devices, loader_module.OVERLAP_DEVICES = loader_module.OVERLAP_DEVICES, ("cuda", "cpu")  # the GPU's order
    try:
        with counter:
            out = train(workload, recipe, cfg, on_event=on_event, **train_kwargs)
    finally:
        loop.evaluate, checkpoint.save, loader_module.OVERLAP_DEVICES = evaluate, save, devices
    return Counter(step for step, _, _ in counter.events), out["optimizer_steps"], counter


def steady(recipe_dict: dict) -> dict:
    """No periodic evaluation, one log line (step 1), no checkpoint: every step after the first is steady-state."""
    return {**recipe_dict, "log_every_steps": 10_000, "eval": {"every_steps": None, "batch_size": 32, "per_epoch": False}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_steady_state_step_reads_nothing_back_from_the_device(text_csv: Path, case: str) -> None:
    by_step, steps, counter = count_syncs(steady(tiny_recipe_dict(text_csv, epochs=3, **CASES[case])))
    assert steps > 15
    late = {s: n for s, n in by_step.items() if 2 <= s <= steps}
    where = sorted({(op, at) for s, op, at in counter.events if 2 <= s <= steps})
    assert not late, f"{case}: host reads of device values in steady-state steps {late}: {where}"


@pytest.mark.parametrize("case", ["baseline", "memory", "fresh-probabilistic"])
def test_batches_already_on_the_device_are_packed_without_a_host_read(text_csv: Path, case: str) -> None:
    """Raw batches that arrive on the GPU (accelerate put them there): packing kept rows (the index reaches the device
    without blocking, contiguous rows are a view) and trimming padding (each row's width copied to the host when the
    batch arrived) read nothing back."""
    by_step, steps, counter = count_syncs(steady(tiny_recipe_dict(text_csv, epochs=3, **CASES[case])), batches_on_device=True)
    late = sorted({(op, at) for s, op, at in counter.own() if 2 <= s <= steps})
    assert steps > 15 and not late, f"{case}: host reads of device values in steady-state steps: {late}"


def gpu_counts(counter: SyncCounter, steps: int) -> dict[str, int]:
    """Per-path counts in steady-state steps (2 on) under the counter's GPU mode; a stall where an epoch's raw batches
    run out or a new epoch starts (once an epoch: nothing is queued to wait behind) is counted apart."""
    inside = lambda events: [e for e in events if 2 <= e[0] <= steps]  # noqa: E731
    waits = inside(counter.waits)
    edge = [w for w in waits if w[1].endswith("edge")]
    waits = [w for w in waits if not w[1].endswith("edge")]
    loss_waits = Counter(s for s, _, at in waits if at.startswith(("sift/feedback.py", "training/")))
    return {"syncs": len(inside(counter.own())), "pageable": len(inside(counter.pageable)),
            "stalls": sum(kind == "stall" for _, kind, _ in waits), "waits": len(waits),
            "stalls at an epoch's edge": sum(kind.startswith("stall") for _, kind, _ in edge),
            "loss-copy waits, most in a step": max(loss_waits.values(), default=0),
            "other waits": sum(1 for _, _, at in waits if not at.startswith(
                ("sift/feedback.py", "training/", "sift/scoring.py", "sift/inflight.py")))}


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")  # the run asks a DataLoader to pin, as on a GPU
@pytest.mark.parametrize("case", ["baseline", "memory", "fresh-probabilistic"])
def test_as_a_gpu_would_run_it_no_pageable_copy_no_stall_one_loss_wait(text_csv: Path, case: str) -> None:
    """Item 4 of the GPU path, per path: in steady-state steps no stream synchronisation, no host-to-device copy from
    pageable memory (packed batches are pinned, raw ones by the DataLoader), no wait that leaves the device idle, and at
    most one wait per step for the previous step's loss copy; sifting adds one bounded wait per raw batch decided (its
    losses, or its rows' widths where nothing was scored, read while the next raw batch's work is queued). Waits at an
    epoch's edge are counted apart: at most two an epoch."""
    _, steps, counter = count_syncs(steady(tiny_recipe_dict(text_csv, epochs=3, **CASES[case])), as_gpu=True)
    counts = gpu_counts(counter, steps)
    assert steps > 15 and len(counter.epoch_ends) == 3
    assert counts["waits"] > 0  # the counter sees the copies it is asked about
    assert counts == {**counts, "syncs": 0, "pageable": 0, "stalls": 0, "loss-copy waits, most in a step": 1,
                      "other waits": 0}, counts
    assert counts["stalls at an epoch's edge"] <= 2 * len(counter.epoch_ends), counts
    if case == "baseline":
        assert counts["waits"] <= steps


@pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")
def test_the_gpu_mode_sees_a_pageable_copy_and_a_stall(text_csv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not blind: packed batches left pageable (the pin before yielding removed) are one pageable copy per packed step,
    and storing each step's losses at once (no lag) is a stall per step."""
    from siftcli.sift import batching, feedback

    monkeypatch.setattr(batching, "pinned", lambda batch: batch)
    record = feedback.Feedback.record

    def at_once(self, losses, epoch):  # noqa: ANN001, ANN202
        record(self, losses, epoch)
        self.settle()

    monkeypatch.setattr(feedback.Feedback, "record", at_once)
    _, steps, counter = count_syncs(steady(tiny_recipe_dict(text_csv, epochs=3, **CASES["fresh-probabilistic"])), as_gpu=True)
    counts = gpu_counts(counter, steps)
    assert counts["pageable"] >= steps // 2 and counts["stalls"] >= steps // 2, counts


def test_the_counter_sees_a_read_of_a_batch_on_the_device(text_csv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not blind to batches: trimming by reading the packed batch's mask (as before the widths were copied early) is a
    read in every step that packs."""
    from siftcli.sift import batching

    trim = batching.trim_padding
    monkeypatch.setattr(batching, "trim_padding", lambda batch, *a, needed=None, **k: trim(batch, *a, **k))
    _, steps, counter = count_syncs(steady(tiny_recipe_dict(text_csv, epochs=2, **CASES["fresh-probabilistic"])),
                                    batches_on_device=True)
    assert sum(1 for s, _, at in counter.own() if 2 <= s <= steps and "batching.py" in at) >= steps // 2


def _trainer_rows(n: int) -> tuple[torch.nn.Module, list[dict], Callable[[list[dict]], dict]]:
    """A tiny BERT, ``n`` rows of 3-15 tokens, and a collate that pads each batch to its longest row with a mask."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                     intermediate_size=32, max_position_embeddings=32, num_labels=2))
    g = torch.Generator().manual_seed(0)
    rows = [{"input_ids": torch.randint(1, 50, (int(torch.randint(3, 16, (1,), generator=g)),), generator=g),
             "labels": i % 2} for i in range(n)]

    def collate(batch: list[dict]) -> dict:
        width = max(len(r["input_ids"]) for r in batch)
        ids, mask = torch.zeros(len(batch), width, dtype=torch.long), torch.zeros(len(batch), width, dtype=torch.long)
        for i, r in enumerate(batch):
            ids[i, :len(r["input_ids"])], mask[i, :len(r["input_ids"])] = r["input_ids"], 1
        return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor([r["labels"] for r in batch])}

    return model, rows, collate


def test_sifting_trainer_packs_batches_on_the_device_without_a_host_read(tmp_path: Path) -> None:
    """``SiftingTrainer``'s raw batches sit where accelerate put them; its steady-state steps make no host read of a
    device value in siftcli's code (the Trainer's own checks, which the plain Trainer makes too, are left out), no
    pageable copy and no wait that leaves the device idle, and at most one wait per step for the last step's losses;
    its scoring runs in the Trainer's precision."""
    from transformers import TrainerCallback, TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer
    from siftcli.sift import SiftConfig

    model, rows, padded = _trainer_rows(96)

    def collate(batch: list[dict]) -> dict:
        return on_device(padded(batch))

    counter = SyncCounter(model, as_gpu=True)

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            counter.step = state.global_step + 1

        def on_epoch_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            counter.epoch_ends.append(state.global_step)

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=3, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True)
    trainer = SiftingTrainer(model=model, args=args, train_dataset=rows, data_collator=collate, callbacks=[Steps()],
                             sift_config=SiftConfig(beta=1.0, sift_delay=2, scoring="memory"))
    devices, loader_module.OVERLAP_DEVICES = loader_module.OVERLAP_DEVICES, ("cuda", "cpu")  # the GPU's order
    try:
        with counter:
            out = trainer.train()
    finally:
        loader_module.OVERLAP_DEVICES = devices
    late = sorted({(op, at) for s, op, at in counter.own() if s >= 2})
    assert out.global_step > 15 and not late, late
    counts = gpu_counts(counter, out.global_step)
    assert counts["waits"] > 0 and counts == {**counts, "pageable": 0, "stalls": 0, "loss-copy waits, most in a step": 1,
                                              "other waits": 0}, counts
    assert counts["stalls at an epoch's edge"] <= 2 * len(counter.epoch_ends), counts
    assert trainer.sifting_loader.precision == "fp32"  # the Trainer's (bf16=True would make it bf16)


def test_the_counter_sees_a_per_step_item(text_csv: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The counter is not blind: one ``.item()`` per step (what the loop once did to log the loss) is one per step."""
    step = loop.train_step

    def with_item(*args, **kwargs):
        out = step(*args, **kwargs)
        out.losses.mean().item()
        return out

    monkeypatch.setattr(loop, "train_step", with_item)
    by_step, steps, _ = count_syncs(steady(tiny_recipe_dict(text_csv, epochs=1, **{"sift.enabled": False})))
    assert [by_step.get(s, 0) for s in range(2, steps)] == [1] * (steps - 2)


def test_a_non_finite_loss_still_stops_the_run_naming_its_step(text_csv: Path, tmp_path: Path) -> None:
    """The finiteness check is read at log steps only, yet the run stops with the step where the loss first went bad."""
    from siftcli.errors import SiftcliError

    recipe = validate_recipe(steady(tiny_recipe_dict(text_csv, epochs=2, **{"sift.enabled": False, "optim.lr": 1e30})))
    workload = build_workload(recipe)
    (tmp_path / "run").mkdir()
    with pytest.raises(SiftcliError, match=r"training loss became (nan|inf) at step \d+") as err:
        train(workload, recipe, None, run_dir=tmp_path / "run")
    step = int(str(err.value).split(" at step ")[1].split()[0])
    assert step <= 3  # a learning rate of 1e30 breaks the loss at once: the step named is the first bad one
    assert (tmp_path / "run" / "metrics.json").exists()  # nothing lost


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("case", ["baseline", "memory", "fresh-probabilistic"])
def test_no_sync_on_a_gpu(text_csv: Path, case: str) -> None:
    """On a GPU the steady-state steps run under ``set_sync_debug_mode``: a synchronising CUDA call from siftcli's own
    code fails the test. It runs in "warn" mode, each warning carrying the Python line that made the call, so a
    synchronisation inside the model (transformers' attention-mask checks, say), which a plain loop pays too, is told
    apart from siftcli's; with "error" the first of those would end the run before siftcli's steps were seen."""
    import warnings

    recipe = validate_recipe(steady(tiny_recipe_dict(text_csv, epochs=2, device="cuda", **CASES[case])))
    workload = build_workload(recipe)
    cfg = sift_config(recipe, len(workload.train_data)) if recipe.sift.enabled else None
    evaluate = loop.evaluate
    state = {"step": 0}

    def on_event(kind: str, data: dict) -> None:
        if kind in ("step", "tick"):
            state["step"] = data["step"]
            torch.cuda.set_sync_debug_mode("warn" if data["step"] >= 2 else "default")

    def unguarded(*args, **kwargs):
        torch.cuda.set_sync_debug_mode("default")
        return evaluate(*args, **kwargs)

    loop.evaluate = unguarded
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            train(workload, recipe, cfg, on_event=on_event)
    finally:
        loop.evaluate = evaluate
        torch.cuda.set_sync_debug_mode("default")
    assert state["step"] > 20
    ours = [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message) and "/siftcli/" in w.filename]
    assert not ours, ours


@pytest.mark.parametrize("score,scoring", [("reducible", "fresh"), ("reducible", "memory"), ("reference", "fresh")])
def test_reference_scoring_makes_no_sync(text_csv: Path, score: str, scoring: str) -> None:
    from siftcli.training.state import Reference

    raw = steady(tiny_recipe_dict(text_csv, epochs=3, **{"sift.score": score, "sift.scoring": scoring}))
    reference = Reference(losses=torch.rand(200, generator=torch.Generator().manual_seed(0)), seconds=0.0)
    by_step, steps, counter = count_syncs(raw, reference=reference)
    assert steps > 15
    assert not {s: n for s, n in by_step.items() if 2 <= s <= steps}, sorted({(op, at) for _, op, at in counter.events})


def test_distillation_with_the_teacher_cache_makes_no_sync(text_csv: Path, tmp_path: Path) -> None:
    from siftcli.training.setup import save_model

    teacher = tmp_path / "teacher"
    save_model(build_workload(validate_recipe(tiny_recipe_dict(text_csv, seed=7))), teacher)
    for sift in (False, True):
        raw = steady(tiny_recipe_dict(text_csv, epochs=3, distill={"teacher": str(teacher)}, **{"sift.enabled": sift}))
        by_step, steps, counter = count_syncs(raw)
        assert steps > 15
        late = {s: n for s, n in by_step.items() if 2 <= s <= steps}
        assert not late, (sift, late, sorted({(op, at) for _, op, at in counter.events}))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sifting_trainer_no_sync_on_a_gpu(tmp_path: Path) -> None:
    """``SiftingTrainer`` on a GPU (its raw batches put there by accelerate), steady-state steps under
    ``set_sync_debug_mode("warn")``: no synchronising CUDA call from siftcli's own code; its scoring in bf16 as the
    Trainer trains."""
    import warnings

    from transformers import TrainerCallback, TrainingArguments

    from siftcli.integrations.hf import SiftingTrainer
    from siftcli.sift import SiftConfig

    model, rows, collate = _trainer_rows(192)

    class Guard(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            torch.cuda.set_sync_debug_mode("warn" if state.global_step >= 2 else "default")

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=8, num_train_epochs=2, report_to=[],
                             save_strategy="no", logging_strategy="no", disable_tqdm=True, bf16=True)
    trainer = SiftingTrainer(model=model, args=args, train_dataset=rows, data_collator=collate, callbacks=[Guard()],
                             sift_config=SiftConfig(beta=1.0, sift_delay=2, scoring="memory"))
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = trainer.train()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.global_step > 20 and trainer.sifting_loader.precision == "bf16"
    ours = [f"{w.filename}:{w.lineno}" for w in caught if "synchroniz" in str(w.message) and "/siftcli/" in w.filename]
    assert not ours, ours
