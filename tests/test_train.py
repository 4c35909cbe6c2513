"""The training loop: resume equals uninterrupted, every task on a tiny model, interruption keeps results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

from siftcli.commands import run_train
from siftcli.errors import RunInterrupted
from siftcli.recipe.schema import validate_recipe
from siftcli.training.loop import fork_step, lr_factor, train
from siftcli.training.setup import sift_config
from siftcli.workload.build import build_workload
from tests.conftest import TINY_BERT, tiny_recipe_dict


def test_lr_schedule_warms_up_and_fully_decays() -> None:
    assert lr_factor(0.0, 0.1, "linear") == 0.0
    assert lr_factor(0.1, 0.1, "linear") == pytest.approx(1.0)
    assert lr_factor(1.0, 0.1, "linear") == 0.0
    assert lr_factor(1.0, 0.1, "cosine") == pytest.approx(0.0)
    assert lr_factor(0.5, 0.0, "constant") == 1.0


def test_wsd_warms_up_on_the_full_schedule_holds_and_decays_over_the_runs_end() -> None:
    # a run capped at half the full schedule: at its 40% it has seen 20% of the full run's samples
    assert lr_factor(0.05, 0.1, "wsd", full_progress=0.05) == pytest.approx(0.5)  # warm-up by the full schedule
    assert lr_factor(0.4, 0.1, "wsd", full_progress=0.2) == 1.0  # linear would be decaying here already
    assert lr_factor(0.9, 0.1, "wsd", full_progress=0.45, decay=0.2) == pytest.approx(0.5)  # half-way down its decay
    assert lr_factor(1.0, 0.1, "wsd", full_progress=0.5) == 0.0
    assert lr_factor(0.02, 0.1, "wsd", full_progress=0.01, decay=1.0) == pytest.approx(0.1)  # both: the lower
    for m, d in ((10, 0.2), (7, 0.3), (100, 0.2), (33, 0.15), (1, 0.2)):
        k = fork_step(m, d)
        assert all(lr_factor(j / m, 0.0, "wsd", decay=d) == 1.0 for j in range(k))
        assert (k - 1) / m < 1 - d <= k / m  # the first step whose rate decays


@pytest.mark.parametrize("sift", [False, True])
def test_a_wsd_run_capped_at_m_steps_is_the_full_runs_fork_at_fork_step(tmp_path: Path, text_csv: Path, sift: bool) -> None:
    """Training less read from one run: the full ``wsd`` run leaves a checkpoint at the fork point, and a run started
    from it with the cap ends with the weights of the capped run trained from scratch (data order, sifting state and
    random state included), on the full run's clock up to the fork plus its own decay."""
    raw = tiny_recipe_dict(text_csv, **{"optim.schedule": "wsd", "optim.warmup_fraction": 0.1, "sift.enabled": sift})
    full_recipe = validate_recipe(raw)
    capped = full_recipe.model_copy(update={"max_steps": 11})

    def fresh():
        torch.manual_seed(0)
        return build_workload(full_recipe)

    def cfg(w):
        return sift_config(full_recipe, len(w.train_data)) if sift else None

    k = fork_step(11, full_recipe.optim.decay_fraction)
    for name in ("full", "apart", "fork"):
        (tmp_path / name).mkdir()
    w_full = fresh()
    full = train(w_full, full_recipe, cfg(w_full), run_dir=tmp_path / "full", arm="baseline",
                 forks={k: tmp_path / "trunk"})
    assert full["optimizer_steps"] > 11 and (tmp_path / "trunk" / "checkpoint.pt").exists()
    w_apart = fresh()
    apart = train(w_apart, capped, cfg(w_apart), run_dir=tmp_path / "apart", arm="train-less")
    w_fork = fresh()
    fork = train(w_fork, capped, cfg(w_fork), run_dir=tmp_path / "fork", arm="train-less",
                 start_from=tmp_path / "trunk")
    assert fork["optimizer_steps"] == apart["optimizer_steps"] == 11
    for (name, a), b in zip(w_apart.model.state_dict().items(), w_fork.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert fork["samples_trained"] == apart["samples_trained"]
    assert fork["curve"][-1]["loss"] == apart["curve"][-1]["loss"]
    logged = [json.loads(line) for line in (tmp_path / "fork" / "log.jsonl").read_text().splitlines()]
    assert 0 < k < min(r["step"] for r in logged if r["event"] == "step")  # it trained from the fork on, not from step 1


@pytest.mark.parametrize("sift,scoring,overlap", [(True, "fresh", False), (True, "memory", False), (False, "fresh", False),
                                                  (True, "fresh", True), (True, "memory", True)])
def test_resumed_run_ends_with_the_same_weights(tmp_path: Path, text_csv: Path, sift: bool, scoring: str, overlap: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``overlap``: the GPU's order (each scored raw batch decided when the next one's forward is queued), where a
    checkpoint can fall while a fetched batch waits for its scores: it is saved with them and decided the same way."""
    from siftcli.sift import loader as loader_module

    if overlap:
        monkeypatch.setattr(loader_module, "OVERLAP_DEVICES", ("cuda", "cpu"))
    raw = tiny_recipe_dict(text_csv, checkpoint_every_steps=3, **{"sift.enabled": sift, "sift.scoring": scoring})
    recipe = validate_recipe(raw)

    def fresh():
        torch.manual_seed(0)
        return build_workload(recipe)

    full_dir = tmp_path / "full"
    full_dir.mkdir()
    w_full = fresh()
    cfg = sift_config(recipe, len(w_full.train_data)) if sift else None
    train(w_full, recipe, cfg, run_dir=full_dir, arm="x")

    part_dir = tmp_path / "part"
    part_dir.mkdir()
    w_part = fresh()
    steps = {"n": 0}

    def interrupt(kind: str, data: dict) -> None:
        if kind in ("step", "tick"):
            steps["n"] += 1
            if steps["n"] == 11:  # mid-epoch, two steps after the checkpoint at step 9
                raise KeyboardInterrupt

    with pytest.raises(RunInterrupted):
        train(w_part, recipe, cfg, run_dir=part_dir, arm="x", on_event=interrupt)
    assert json.loads((part_dir / "metrics.json").read_text())["status"] == "interrupted"

    w_resumed = fresh()
    out = train(w_resumed, recipe, cfg, run_dir=part_dir, arm="x", resume=True)
    assert out["status"] == "completed"
    for (name, a), b in zip(w_full.model.state_dict().items(), w_resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    full = json.loads((full_dir / "metrics.json").read_text())
    assert out["optimizer_steps"] == full["optimizer_steps"] and out["samples_trained"] == full["samples_trained"]
    # the resumed run's clocks include the interrupted process, and its loss sample is whole
    assert out["total_seconds"] > out["train_seconds"] > 0
    assert out["total_seconds"] > json.loads((part_dir / "metrics.json").read_text())["train_seconds"]
    if sift:
        assert json.loads((part_dir / "sift_losses.json").read_text()) == json.loads((full_dir / "sift_losses.json").read_text())
        assert out["keep"]["trace"] == full["keep"]["trace"]


def test_regression_task(tmp_path: Path) -> None:
    data = tmp_path / "reg.jsonl"
    data.write_text("".join(json.dumps({"text": f"{'good ' * (i % 4)}x", "score": float(i % 4)}) + "\n" for i in range(64)))
    recipe = validate_recipe(tiny_recipe_dict(data, task="regression", loss="mse", **{"data.label_column": "score"}))
    _, metrics = run_train(recipe, output=str(tmp_path / "run"))
    assert metrics["metric"] == "mse" and metrics["final"]["mse"] >= 0 and not metrics["higher_is_better"]


def test_causal_lm_task(tmp_path: Path) -> None:
    data = tmp_path / "lm.csv"
    data.write_text("text\n" + "".join(f"the cat sat on mat {i}\n" for i in range(48)))
    recipe = validate_recipe(tiny_recipe_dict(
        data, task="causal-lm", loss="auto",
        **{"model.source": "config:gpt2", "model.config_overrides": {"n_embd": 16, "n_layer": 1, "n_head": 2, "n_positions": 32}},
    ))
    _, metrics = run_train(recipe, output=str(tmp_path / "run"))
    assert metrics["metric"] == "perplexity" and metrics["final"]["perplexity"] > 1
    assert 0 < metrics["keep"]["achieved"] <= 1


def test_image_classification_task(tmp_path: Path) -> None:
    import datasets

    g = torch.Generator().manual_seed(0)
    images, labels = [], []
    for i in range(40):
        label = i % 2
        arr = (torch.rand(8, 8, 3, generator=g) * 80 + 150 * label).byte().numpy()
        images.append(Image.fromarray(arr))
        labels.append(label)
    folder = tmp_path / "imgs"
    datasets.Dataset.from_dict({"image": images, "label": labels}).save_to_disk(str(folder))
    processor_dir = tmp_path / "proc"
    from transformers import ViTImageProcessor

    ViTImageProcessor(size={"height": 8, "width": 8}).save_pretrained(processor_dir)
    recipe = validate_recipe(tiny_recipe_dict(
        folder, task="image-classification", loss="auto",
        **{"model.source": "config:vit", "model.tokenizer": str(processor_dir),
           "model.config_overrides": {"image_size": 8, "patch_size": 4, "hidden_size": 16, "num_hidden_layers": 1,
                                      "num_attention_heads": 2, "intermediate_size": 32}},
    ))
    _, metrics = run_train(recipe, output=str(tmp_path / "run"))
    assert metrics["metric"] == "accuracy" and 0 <= metrics["final"]["accuracy"] <= 1


def test_phases_and_scoring_cost_are_reported(tmp_path: Path, text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv))
    _, m = run_train(recipe, output=str(tmp_path / "run"))
    assert set(m["phases"]) == {"data", "scoring", "forward_backward", "optimizer", "evaluation", "checkpoint"}
    assert m["phases"]["scoring"] > 0 and m["scoring_cost"] > 0
    assert m["predicted_ratio"] == pytest.approx(m["samples_scored"] / m["raw_samples"] * m["scoring_cost"] + m["keep"]["achieved"])
    assert [e["epoch"] for e in m["keep"]["per_epoch"]] == [0, 1]
    assert m["train_seconds"] < m["total_seconds"]


def test_reducible_run_charges_its_reference_and_counts_noisy_labels(tmp_path: Path, text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{
        "data.label_noise": 0.3, "sift.score": "reducible", "sift.mode": "calibrated", "sift.beta": 3.0, "sift.sift_delay": 0,
        "sift.reference.epochs": 1}))
    _, m = run_train(recipe, output=str(tmp_path / "run"))
    ref = json.loads((tmp_path / "run" / "reference.json").read_text())
    assert m["phases"]["reference"] == pytest.approx(ref["paid_seconds"]) == pytest.approx(ref["build_seconds"])
    assert ref["paid_seconds"] > 0 and len(ref["runs"]) == 2 and not ref["cached"] and m["reference"]["kind"] == "cross-fit"
    assert m["train_seconds"] > m["phases"]["reference"]  # on the clock
    assert m["curve"][0]["train_seconds"] > m["phases"]["reference"]
    assert m["sift"]["score"] == "reducible"
    noise = m["label_noise"]
    assert noise["rate"] == pytest.approx(0.3, abs=0.01) and 0 <= noise["kept_share_after_delay"] <= 1
    recorded = json.loads((tmp_path / "run" / "label_noise.json").read_text())
    assert len(recorded["flipped"]) == noise["flipped"] == round(0.3 * 120)
    assert m["keep"]["achieved"] == pytest.approx(0.25, abs=0.05)


def test_memory_scoring_skips_the_forward_for_remembered_samples(tmp_path: Path, text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=3, **{"sift.scoring": "memory", "sift.sift_delay": 0,
                                                                     "sift.memory_max_age": None}))
    _, m = run_train(recipe, output=str(tmp_path / "run"))
    n = 120  # training rows of the tiny data
    assert m["raw_samples"] == 3 * n
    assert m["samples_scored"] == n  # the first epoch only: after it every loss is remembered (no age limit)
    assert m["samples_from_memory"] == 2 * n
    aged = run_train(validate_recipe(tiny_recipe_dict(text_csv, epochs=3, **{"sift.scoring": "memory", "sift.sift_delay": 0})),
                     output=str(tmp_path / "aged"))[1]  # default age limit 1: epoch 2 rescores what epoch 1 did not train
    assert n < aged["samples_scored"] < 2 * n and aged["samples_scored"] + aged["samples_from_memory"] == 3 * n
    fresh = run_train(validate_recipe(tiny_recipe_dict(text_csv, epochs=3, **{"sift.sift_delay": 0, "sift.scoring": "fresh"})),
                      output=str(tmp_path / "fresh"))[1]
    assert fresh["samples_scored"] == 3 * n and fresh["samples_from_memory"] == 0


@pytest.mark.parametrize("signals", [["SIGINT"], ["SIGTERM"], ["SIGINT", "SIGINT"]])
def test_a_signal_inside_a_step_finishes_it_and_the_resume_is_exact(tmp_path: Path, text_csv: Path, signals: list[str]) -> None:
    """A real signal delivered inside the training forward (not between steps): nothing in flight is lost."""
    import os
    import signal as signal_mod

    recipe = validate_recipe(tiny_recipe_dict(text_csv))  # no periodic checkpoints: the interrupt writes the only one
    full = build_workload(recipe)
    train(full, recipe, sift_config(recipe, len(full.train_data)), run_dir=_mkdir(tmp_path / "full"), arm="x")

    part = build_workload(recipe)
    real_loss, calls = part.loss_fn, {"n": 0}

    def loss_that_gets_interrupted(model, batch):  # noqa: ANN001, ANN202
        if model.training:
            calls["n"] += 1
            if calls["n"] == 11 + recipe.warmup_steps("cpu"):  # mid-run, inside a step, before its backward and optimizer step
                for name in signals:
                    os.kill(os.getpid(), getattr(signal_mod, name))
        return real_loss(model, batch)

    part.loss_fn = loss_that_gets_interrupted
    out_dir = _mkdir(tmp_path / "part")
    with pytest.raises(RunInterrupted) as info:
        train(part, recipe, sift_config(recipe, len(part.train_data)), run_dir=out_dir, arm="x")
    assert info.value.signal == signals[0] and info.value.exit_code == (143 if signals[0] == "SIGTERM" else 130)
    partial = json.loads((out_dir / "metrics.json").read_text())
    assert partial["status"] == "interrupted" and partial["optimizer_steps"] == 11  # the step in flight was finished

    resumed = build_workload(recipe)
    out = train(resumed, recipe, sift_config(recipe, len(resumed.train_data)), run_dir=out_dir, arm="x", resume=True)
    for (name, a), b in zip(full.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert out["samples_trained"] == json.loads((tmp_path / "full" / "metrics.json").read_text())["samples_trained"]


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def test_the_same_recipe_starts_from_the_same_weights_in_separate_processes(text_csv: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    recipe = tmp_path / "r.json"
    recipe.write_text(json.dumps(tiny_recipe_dict(text_csv)))
    code = ("import json, sys, torch; from siftcli.workload.build import build_workload; "
            "from siftcli.recipe.schema import validate_recipe; "
            "w = build_workload(validate_recipe(json.load(open(sys.argv[1])))); "
            "print(sum(float(v.double().abs().sum()) * (i + 1) for i, v in enumerate(w.model.state_dict().values())))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(recipe)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]  # at once: two processes, each its own interpreter
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    sums = [out for out, _ in outs]
    assert sums[0] == sums[1] and float(sums[0]) > 0


def test_a_finished_run_leaves_a_model_another_recipe_can_start_from(tmp_path: Path, text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=1))
    run_dir, _ = run_train(recipe, output=str(tmp_path / "run"))
    folder = run_dir / "model"
    assert (folder / "config.json").exists() and (folder / "tokenizer_config.json").exists()
    again = build_workload(validate_recipe(tiny_recipe_dict(
        text_csv, **{"model.source": str(folder), "model.tokenizer": None, "model.config_overrides": {}})))
    trained = torch.load(run_dir / "checkpoint.pt", weights_only=True)["model"]  # loads safely: tensors and plain values
    for name, value in again.model.state_dict().items():
        assert torch.equal(value, trained[name]), name
    assert again.label_names == ["0", "1"] and again.model.config.num_labels == 2


def test_the_evaluation_schedule_does_not_change_training(tmp_path: Path, text_csv: Path) -> None:
    """Evaluating creates DataLoader iterators; they must not draw from the RNG that dropout uses."""
    runs = []
    for every in (3, 7):
        overrides = {**TINY_BERT, "hidden_dropout_prob": 0.5}
        recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=1, **{"eval.every_steps": every, "sift.enabled": False,
                                                                         "model.config_overrides": overrides}))
        w = build_workload(recipe)
        train(w, recipe)
        runs.append(w.model.state_dict())
    for name, value in runs[0].items():
        assert torch.equal(value, runs[1][name]), name


def test_rule_weights_scale_the_training_loss() -> None:
    """InfoBatch's weights reach the gradient: weight 2 on every sample doubles an SGD step."""
    from siftcli.sift.losses import cross_entropy_loss
    from siftcli.training.losses import LabelLoss
    from siftcli.training.step import Learner, train_step

    recipe = validate_recipe({"optim": {"grad_clip": None}})
    batch_x, batch_y = torch.randn(6, 4, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1, 0, 1, 1, 0])

    def step(weights: torch.Tensor | None) -> torch.Tensor:
        model = torch.nn.Linear(4, 2)
        model.load_state_dict({"weight": torch.zeros(2, 4), "bias": torch.zeros(2)})
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        loss = LabelLoss(lambda m, b: cross_entropy_loss(m, (b["x"], b["labels"])))
        learner = Learner(model, model, loss, opt, scaler, torch.device("cpu"))
        train_step(learner, {"x": batch_x, "labels": batch_y}, recipe, weights)
        return model.weight.detach().clone()

    plain, doubled = step(None), step(torch.full((6,), 2.0))
    assert torch.allclose(doubled, 2 * plain) and not torch.allclose(plain, torch.zeros_like(plain))
    half = step(torch.tensor([2.0, 2.0, 2.0, 0.0, 0.0, 0.0]))
    assert not torch.allclose(half, plain)


def test_infobatch_with_anneal_and_auto_delay_through_the_loop(tmp_path: Path, text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, epochs=4, **{
        "sift.mode": "infobatch", "sift.scoring": "memory", "sift.memory_max_age": None, "sift.sift_delay": 15,
        "sift.anneal_fraction": 0.25}))
    _, m = run_train(recipe, output=str(tmp_path / "ib"))
    n, per_epoch = 120, 15  # training rows and raw batches per epoch of the tiny data
    epochs = m["keep"]["per_epoch"]
    assert m["raw_samples"] == 4 * n and epochs[-1]["kept"] == n  # the anneal: the last epoch keeps everything
    assert m["keep"]["sift_started_at"] == per_epoch and m["keep"]["anneal_started_at"] == 3 * per_epoch
    assert m["samples_scored"] == 0  # memory filled by the first epoch's training forward: no scoring forward at all
    assert m["keep"]["scored_after_first_epoch"] == 0 and m["samples_trained"] < 4 * n
    auto = validate_recipe(tiny_recipe_dict(text_csv, epochs=2, **{"sift.sift_delay": "auto"}))
    _, a = run_train(auto, output=str(tmp_path / "auto"))
    started = a["keep"]["sift_started_at"]
    assert started is None or 0 < started < 30  # reported either way (a tiny model may never earn it)
    assert a["sift"]["sift_delay"] == "auto" and 0 < a["samples_scored"] < a["raw_samples"]  # only the probes were scored
