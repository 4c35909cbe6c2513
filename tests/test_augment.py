"""Seeded augmentation of text and images: the same inputs for the same (seed, epoch, sample), new ones each epoch; and
the teacher cache that cannot be exact under it is off by default and refused when asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image, ImageOps

from siftcli.errors import SiftcliError
from siftcli.recipe.schema import recipe_to_yaml, validate_recipe
from siftcli.training.setup import build_train_loader
from siftcli.workload.augment import AugmentedDataset, ImageAugment, TextAugment
from siftcli.workload.build import build_workload
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
    assert validate_recipe(yaml.safe_load(recipe_to_yaml(recipe))).data.augment == recipe.data.augment  # saved, loads
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


def _image(seed: int = 0, size: int = 8) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    return Image.fromarray((torch.rand(size, size, 3, generator=g) * 200 + 40).byte().numpy())


def _offsets(out: Image.Image, image: Image.Image, pad: int) -> list[tuple[int, int]]:
    """Every (dx, dy) for which ``out`` is ``image`` padded with black by ``pad`` and cropped at (dx, dy)."""
    padded = ImageOps.expand(image, border=pad, fill=0)
    w, h = image.size
    return [(dx, dy) for dx in range(2 * pad + 1) for dy in range(2 * pad + 1)
            if list(padded.crop((dx, dy, dx + w, dy + h)).getdata()) == list(out.getdata())]


def test_an_image_is_cropped_and_flipped_as_a_function_of_seed_epoch_and_sample() -> None:
    image = _image()
    crop = ImageAugment(flip=False, pad=0.25, seed=0, column="image")
    outs = [crop({"image": image, "labels": 3}, i, 0) for i in range(30)]
    assert all(o["labels"] == 3 and o["image"].size == image.size for o in outs)
    found = [_offsets(o["image"], image, 2) for o in outs]
    assert all(len(f) == 1 for f in found)  # each is a crop of the padded image at one offset
    assert len({f[0] for f in found}) >= 10  # over the 25 offsets, not one
    again = crop({"image": image, "labels": 3}, 7, 0)["image"]
    assert list(again.getdata()) == list(outs[7]["image"].getdata())  # same (seed, epoch, sample): same image
    later = [crop({"image": image, "labels": 3}, i, 1)["image"] for i in range(30)]
    assert sum(list(a.getdata()) != list(b["image"].getdata()) for a, b in zip(later, outs)) >= 20  # another epoch
    other_seed = [ImageAugment(False, 0.25, 1, "image")({"image": image}, i, 0)["image"] for i in range(30)]
    assert sum(list(a.getdata()) != list(b["image"].getdata()) for a, b in zip(other_seed, outs)) >= 20
    flip = ImageAugment(flip=True, pad=0.0, seed=0, column="image")
    got = [list(flip({"image": image}, i, 0)["image"].getdata()) for i in range(40)]
    plain, mirrored = list(image.getdata()), list(ImageOps.mirror(image).getdata())
    assert all(g in (plain, mirrored) for g in got)  # no padding: the image itself, or mirrored
    assert 8 <= sum(g == mirrored for g in got) <= 32


def test_an_image_loader_sees_each_epochs_augmentation_and_text_kinds_stay_with_text(tmp_path: Path, text_csv: Path) -> None:
    import datasets
    from transformers import ViTImageProcessor

    images = [_image(i) for i in range(24)]
    datasets.Dataset.from_dict({"image": images, "label": [i % 2 for i in range(24)]}).save_to_disk(str(tmp_path / "imgs"))
    ViTImageProcessor(size={"height": 8, "width": 8}).save_pretrained(tmp_path / "proc")
    vit = {"model.source": "config:vit", "model.tokenizer": str(tmp_path / "proc"),
           "model.config_overrides": {"image_size": 8, "patch_size": 4, "hidden_size": 16, "num_hidden_layers": 1,
                                      "num_attention_heads": 2, "intermediate_size": 32}}
    recipe = validate_recipe(tiny_recipe_dict(tmp_path / "imgs", task="image-classification", loss="auto",
                                              **vit, **{"data.augment": {"kind": "crop-flip", "pad": 0.25}}))
    workload = build_workload(recipe)
    loader = build_train_loader(workload, recipe, None, workload.model, workload.device)
    first = [b["pixel_values"].clone() for b in loader]
    second = [b["pixel_values"].clone() for b in loader]
    again = build_train_loader(workload, recipe, None, workload.model, workload.device)
    assert all(torch.equal(a["pixel_values"], b) for a, b in zip(again, first))  # same seed: same epoch 0
    assert any(not torch.equal(x, y) for x, y in zip(first, second))  # epoch 1 differs
    with pytest.raises(SiftcliError, match="data.augment.rate does nothing for kind 'crop'; images take pad"):
        validate_recipe(tiny_recipe_dict(tmp_path / "imgs", task="image-classification", loss="auto", **vit,
                                         **{"data.augment": {"kind": "crop", "rate": 0.2}}))
    # a saved recipe (every default written out) loads again
    assert validate_recipe(yaml.safe_load(recipe_to_yaml(recipe))).data.augment == recipe.data.augment
    plain = validate_recipe(tiny_recipe_dict(tmp_path / "imgs", task="image-classification", loss="auto", **vit))
    unchanged = build_workload(plain)
    base = [b["pixel_values"] for b in build_train_loader(unchanged, plain, None, unchanged.model, unchanged.device)]
    assert any(not torch.equal(x, y) for x, y in zip(first, base))  # the augmentation changed what the model sees
    with pytest.raises(SiftcliError, match="'crop' changes images; task 'text-classification' has text inputs"):
        validate_recipe(tiny_recipe_dict(text_csv, **{"data.augment": {"kind": "crop"}}))
    with pytest.raises(SiftcliError, match="data.augment.pad does nothing for kind 'mask'; text takes rate"):
        validate_recipe(tiny_recipe_dict(text_csv, **{"data.augment": {"kind": "mask", "pad": 0.1}}))
    with pytest.raises(SiftcliError, match="for task 'image-classification' expected crop or crop-flip"):
        validate_recipe(tiny_recipe_dict(tmp_path / "imgs", task="image-classification", loss="auto", **vit,
                                         **{"data.augment": {"kind": "mask"}}))
