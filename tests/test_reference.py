"""Cross-fitted reference losses: no sample is scored by a model that trained on it."""

from __future__ import annotations

from pathlib import Path

import torch

import siftcli.reference as reference_mod
from siftcli.builders import build_workload
from siftcli.config import validate_recipe
from siftcli.reference import cross_fitted_reference, reference_recipe, split_halves
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
