"""Cross-fitted reference losses: no sample is scored by a model that trained on it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import siftcli.arms.reference as reference_mod
from siftcli.arms.reference import cross_fitted_reference, reference_recipe, split_halves, within_label_percentiles
from siftcli.recipe.schema import validate_recipe
from siftcli.workload.build import build_workload
from tests.conftest import tiny_recipe_dict


def test_halves_are_disjoint_cover_everything_and_follow_the_seed() -> None:
    a, b = split_halves(11, seed=0)
    assert sorted(a.tolist() + b.tolist()) == list(range(11)) and abs(len(a) - len(b)) <= 1
    assert split_halves(11, seed=1)[0].tolist() != a.tolist()


def test_each_reference_scores_only_the_half_it_never_trained_on(text_csv: Path, monkeypatch) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reducible", "sift.reference.epochs": 0.5}))
    workload = build_workload(recipe)
    key = {id(row): i for i, row in enumerate(workload.train_data)}
    trained_on: list[set[int]] = []
    real_train = reference_mod.train

    def spy_train(part, ref_recipe, **kwargs):  # noqa: ANN001, ANN003, ANN202
        trained_on.append({key[id(r)] for r in part.train_data})
        assert ref_recipe.epochs == 0.5 and not ref_recipe.sift.enabled and ref_recipe.eval.every_steps is None
        return real_train(part, ref_recipe, **kwargs)

    monkeypatch.setattr(reference_mod, "train", spy_train)
    ref, runs = cross_fitted_reference(workload, recipe)
    assert len(trained_on) == 2 and not trained_on[0] & trained_on[1]
    assert trained_on[0] | trained_on[1] == set(range(len(workload.train_data)))
    assert ref.losses.shape == (len(workload.train_data),) and torch.isfinite(ref.losses).all()
    assert ref.seconds >= sum(r["train_seconds"] for r in runs) > 0


def test_reference_recipe_takes_its_own_epochs_and_lr(text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, max_steps=5, **{"sift.reference.lr": 0.01, "sift.reference.epochs": 2}))
    r = reference_recipe(recipe)
    assert (r.epochs, r.optim.lr, r.max_steps, r.sift.enabled, r.eval.per_epoch) == (2, 0.01, None, False, False)


def test_a_holdout_reference_is_built_once_cached_by_key_and_reused(text_csv: Path, monkeypatch) -> None:
    from siftcli.arms.reference import cache_key, reference_for

    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reference", "sift.reference.kind": "holdout",
                                                            "sift.reference.holdout_fraction": 0.2}))
    workload = build_workload(recipe)
    assert len(workload.holdout_data) == round(0.2 * 120) and len(workload.train_data) == 120 - 24  # no arm trains on it
    built, runs = reference_for(workload, recipe)
    assert not built.cached and len(runs) == 1 and built.build_seconds == built.seconds > 0
    trained: list[int] = []
    monkeypatch.setattr(reference_mod, "train", lambda *a, **k: trained.append(1))  # a cache hit trains nothing
    again, runs = reference_for(build_workload(recipe), recipe)
    assert again.cached and not trained and runs == [] and torch.equal(again.losses, built.losses)
    assert again.summary()["build_seconds"] == built.seconds and again.seconds < built.seconds
    other = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reference", "sift.reference.kind": "holdout",
                                                           "sift.reference.holdout_fraction": 0.2, "seed": 1}))
    assert cache_key(build_workload(other), other) != cache_key(workload, recipe)
    balanced = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reference", "sift.reference.kind": "holdout",
                                                              "sift.reference.holdout_fraction": 0.2,
                                                              "sift.reference.balance": "label"}))
    ranked, runs = reference_for(build_workload(balanced), balanced)  # the same losses, read, then ranked per label
    assert ranked.cached and not trained and cache_key(workload, balanced) == cache_key(workload, recipe)
    labels = [int(r["labels"]) for r in workload.train_data]
    assert torch.equal(ranked.losses, within_label_percentiles(built.losses, labels))


def test_within_label_percentiles_rank_each_class_alone_so_a_kept_fraction_is_that_fraction_of_every_class() -> None:
    from siftcli.curate.pipeline import lowest

    # class 0 is easy for the reference (losses 0.0-0.5), class 1 hard (5-10): raw, the lowest half is class 0 only
    losses = torch.tensor([0.1, 5.0, 0.3, 7.0, 0.0, 9.0, 0.5, 6.0, float("nan"), 10.0])
    labels = [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    assert [labels[i] for i in lowest(losses, 0.4)] == [0, 0, 0, 0]
    pct = within_label_percentiles(losses, labels)
    assert pct[[0, 2, 4, 6]].tolist() == [0.375, 0.625, 0.125, 0.875]  # mid-ranks of 4 finite class-0 losses
    assert torch.allclose(pct[[1, 3, 5, 7, 9]], torch.tensor([0.1, 0.5, 0.7, 0.3, 0.9]))
    assert torch.isnan(pct[8]) and torch.allclose(losses[:8], torch.tensor([0.1, 5.0, 0.3, 7.0, 0.0, 9.0, 0.5, 6.0]))  # input untouched
    kept = lowest(pct, 0.4)
    assert sorted(labels[i] for i in kept) == [0, 0, 1, 1] and 4 in kept and 1 in kept  # each class's easiest
    assert within_label_percentiles(losses, ["neg", "pos"] * 5).tolist()[:2] == pct.tolist()[:2]  # any label type


def test_reference_kinds_are_checked_in_the_recipe(text_csv: Path) -> None:
    import pytest

    from siftcli.errors import SiftcliError

    for changes, expected in (({"sift.reference.kind": "holdout"}, "exactly one of holdout_source"),
                              ({"sift.reference.holdout_fraction": 0.1}, "go with kind holdout"),
                              ({"sift.reference.kind": "model"}, "kind model needs model"),
                              ({"sift.score": "reducible", "sift.reference.balance": "label"}, "cannot subtract"),
                              ({"sift.reference.balance": "classes"}, "balance")):
        with pytest.raises(SiftcliError, match=expected):
            validate_recipe(tiny_recipe_dict(text_csv, **changes))


def test_reference_scoring_decides_every_batch_without_a_forward(text_csv: Path) -> None:
    from siftcli.training.setup import build_train_loader, sift_config

    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reference", "sift.sift_delay": 0,
                                                            "sift.mode": "calibrated", "sift.keep_fraction": 0.25}))
    workload = build_workload(recipe)
    n = len(workload.train_data)
    losses = torch.zeros(n)
    losses[: n // 4] = -5.0  # the first quarter: what the reference finds learnable (low loss), ranked highest
    calls: list[int] = []
    real = workload.loss_fn
    workload.loss_fn = lambda model, batch: calls.append(1) or real(model, batch)
    cfg = sift_config(recipe, n, beta=8.0)
    loader = build_train_loader(workload, recipe, cfg, workload.model, torch.device("cpu"), losses)
    kept: list[int] = []
    loader.add_batch_hook(lambda d: kept.extend(d.indices[d.mask].tolist()))
    for _ in loader:
        pass
    assert not calls and loader.stats.scored_samples == 0  # a table, never a scoring forward
    assert 0.2 <= len(kept) / n <= 0.3
    assert sum(i < n // 4 for i in kept) / len(kept) > 0.6  # mostly the low-reference-loss quarter


def test_a_process_that_needs_a_reference_another_is_building_waits_and_reads_it(text_csv: Path, monkeypatch) -> None:
    import fcntl
    import threading

    from siftcli.arms.reference import cache_dir, cache_key, reference_for

    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reference", "sift.reference.kind": "ngram",
                                                            "sift.reference.holdout_fraction": 0.2}))
    workload = build_workload(recipe)
    built, _ = reference_for(workload, recipe)  # what the other process will have cached
    path = cache_dir() / "references" / f"{cache_key(workload, recipe)}.pt"
    payload = path.read_bytes()
    path.unlink()
    builds: list[int] = []
    monkeypatch.setattr(reference_mod, "ngram_reference", lambda *a, **k: builds.append(1) or (built, []))
    other = open(path.with_suffix(".lock"), "a+")  # the other process, building  # noqa: SIM115
    fcntl.flock(other, fcntl.LOCK_EX)
    looked, real_cached = threading.Event(), reference_mod._cached

    def cached(*args):  # noqa: ANN002, ANN202
        found = real_cached(*args)
        looked.set()
        return found

    monkeypatch.setattr(reference_mod, "_cached", cached)
    got: list = []
    again = build_workload(recipe)
    waiter = threading.Thread(target=lambda: got.append(reference_for(again, recipe)))
    waiter.start()
    assert looked.wait(timeout=60)  # it found no cached file while the other process was still building
    path.write_bytes(payload)  # the other process finishes its build, caches it and lets go
    other.close()
    waiter.join(timeout=60)
    assert not builds and got and got[0][0].cached and torch.equal(got[0][0].losses, built.losses)


@pytest.mark.slow
def test_two_processes_building_one_reference_at_once_build_it_once_and_both_read_it(tmp_path: Path, text_csv: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    raw = tiny_recipe_dict(text_csv, **{"sift.score": "reference", "sift.reference.kind": "holdout",
                                        "sift.reference.holdout_fraction": 0.2, "sift.reference.epochs": 40})
    script = ("import hashlib, json, sys\n"
              "from siftcli.recipe.schema import validate_recipe\n"
              "from siftcli.workload.build import build_workload\n"
              "from siftcli.arms.reference import reference_for\n"
              "recipe = validate_recipe(json.loads(sys.argv[1]))\n"
              "ref, _ = reference_for(build_workload(recipe), recipe)\n"
              "print(json.dumps([ref.cached, hashlib.sha256(ref.losses.numpy().tobytes()).hexdigest()]))\n")
    env = {**os.environ, "SIFTCLI_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    procs = [subprocess.Popen([sys.executable, "-c", script, json.dumps(raw)], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    results = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert sorted(cached for cached, _ in results) == [False, True]  # one built it, the other read what it cached
    assert results[0][1] == results[1][1]
    cached = list((tmp_path / "cache" / "references").glob("*.pt"))
    assert len(cached) == 1 and torch.load(cached[0], weights_only=True)["losses"].numel() > 0
