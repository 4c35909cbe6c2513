"""Seeded text augmentation: the same inputs for the same (seed, epoch, sample), new ones each epoch; and the teacher
cache that cannot be exact under it is off by default and refused when asked for."""

from __future__ import annotations

from pathlib import Path

import pytest

from siftcli.augment import AugmentedDataset, TextAugment
from siftcli.builders import build_train_loader, build_workload
from siftcli.config import validate_recipe
from siftcli.errors import SiftcliError
from tests.conftest import tiny_recipe_dict

SPECIAL = frozenset({101, 102, 0})


def _sample(n: int = 30) -> dict:
    ids = [101, *range(1000, 1000 + n), 102]
    return {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": 1}


def test_the_change_is_a_function_of_seed_epoch_and_sample() -> None:
    mask = TextAugment("mask", 0.3, seed=0, mask_id=103, special_ids=SPECIAL)
    a, b = mask(_sample(), 5, 0), mask(_sample(), 5, 0)
    assert a == b and a["input_ids"][0] == 101 and a["input_ids"][-1] == 102  # special tokens stay
    masked = sum(t == 103 for t in a["input_ids"])
    assert 3 <= masked <= 18 and len(a["input_ids"]) == len(_sample()["input_ids"])
    assert mask(_sample(), 5, 1) != a and mask(_sample(), 6, 0) != a  # another epoch, another sample
    assert TextAugment("mask", 0.3, 1, 103, SPECIAL)(_sample(), 5, 0) != a  # another seed
    drop = TextAugment("delete", 0.3, 0, 103, SPECIAL)(_sample(), 5, 0)
    assert len(drop["input_ids"]) == len(drop["attention_mask"]) < len(_sample()["input_ids"])
    assert drop["labels"] == 1 and drop["input_ids"][0] == 101
    everything = TextAugment("delete", 1.0, 0, 103, SPECIAL)({"input_ids": [101, 7, 8, 102], "labels": 0}, 0, 3)
    assert everything["input_ids"] == [101, 7, 102]  # one ordinary token always stays


def test_the_loader_sees_the_epochs_augmentation_and_the_teacher_cache_follows(text_csv: Path) -> None:
    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"data.augment": {"kind": "mask", "rate": 0.5}}))
    workload = build_workload(recipe)
    loader = build_train_loader(workload, recipe, None, workload.model, workload.device)
    assert isinstance(loader.dataloader.dataset, AugmentedDataset)
    first = [b["input_ids"].clone() for b in loader]
    second = [b["input_ids"].clone() for b in loader]
    again = build_train_loader(workload, recipe, None, workload.model, workload.device)
    assert [b["input_ids"].tolist() for b in again] == [b.tolist() for b in first]  # same seed: same epoch 0
    assert any(x.shape != y.shape or (x != y).any() for x, y in zip(first, second))  # epoch 1 differs
    teacher = tiny_recipe_dict(text_csv, **{"data.augment": {"rate": 0.1}, "distill.teacher": "builtin:minilm"})
    assert validate_recipe(teacher).distill.cache is False  # off where it would not be exact
    assert validate_recipe(tiny_recipe_dict(text_csv, **{"distill.teacher": "builtin:minilm"})).distill.cache is True
    with pytest.raises(SiftcliError, match="distill.cache true with data.augment"):
        validate_recipe({**teacher, "distill": {"teacher": "builtin:minilm", "cache": True}})
