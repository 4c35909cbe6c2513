"""Seeded augmentation: inputs that change every epoch, the regime where a teacher's outputs cannot be cached.

Each sample's change is a pure function of (seed, epoch, sample index): two runs with the same seed see the same
inputs in the same epoch, a resumed run sees what the uninterrupted one saw, and every arm of a comparison trains on
the same augmented data. ``mask`` replaces a fraction of the tokens with the tokenizer's mask token (its unknown
token if it has none); ``delete`` drops them (span-free word dropout). Special tokens ([CLS], [SEP], padding) are
never touched, and at least one ordinary token always stays. Images (:class:`ImageAugment`) are padded and cropped
back to their size at a random offset, and with ``flip`` mirrored half the time, before the image processor sees them
(the random crop and flip of the vision-transformer distillation this project grew from).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from siftcli.workload.rows import Row

_MIX = 0x9E3779B97F4A7C15  # a 64-bit odd constant: spreads (seed, epoch, index) over the generator's seeds


def _generator(seed: int, epoch: int, index: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * _MIX + epoch * 1_000_003 + index) % (2**63 - 1))


@dataclass(frozen=True)
class TextAugment:
    """``kind`` ``mask`` or ``delete``; ``rate``: the chance each ordinary token is changed."""

    kind: str
    rate: float
    seed: int
    mask_id: int
    special_ids: frozenset[int]

    def __call__(self, sample: Row, index: int, epoch: int) -> Row:
        ids = [int(t) for t in sample["input_ids"]]
        g = _generator(self.seed, epoch, index)
        draws = torch.rand(len(ids), generator=g).tolist()
        ordinary = [i for i, t in enumerate(ids) if t not in self.special_ids]
        hit = {i for i in ordinary if draws[i] < self.rate}
        if ordinary and len(hit) == len(ordinary):  # keep one ordinary token: an input must say something
            hit.discard(ordinary[0])
        out = dict(sample)
        if self.kind == "mask":
            out["input_ids"] = [self.mask_id if i in hit else t for i, t in enumerate(ids)]
            return out
        for key, value in sample.items():  # delete: every per-token field loses the same positions
            if key != "labels" and isinstance(value, list) and len(value) == len(ids):
                out[key] = [v for i, v in enumerate(value) if i not in hit]
        return out


@dataclass(frozen=True)
class ImageAugment:
    """Pad each side by ``pad`` of its length with black, crop back to the original size at a uniform offset (the
    random crop of CIFAR and ViT recipes), and with ``flip`` mirror left-right with chance 1/2."""

    flip: bool
    pad: float
    seed: int
    column: str

    def __call__(self, sample: dict[str, Any], index: int, epoch: int) -> dict[str, Any]:
        from PIL import ImageOps

        image = sample[self.column].convert("RGB")
        g = _generator(self.seed, epoch, index)
        w, h = image.size
        px, py = round(self.pad * w), round(self.pad * h)
        dx, dy = (int(torch.randint(0, 2 * p + 1, (1,), generator=g)) for p in (px, py))
        if px or py:
            image = ImageOps.expand(image, border=(px, py, px, py), fill=0).crop((dx, dy, dx + w, dy + h))
        if self.flip and bool(torch.rand(1, generator=g) < 0.5):
            image = ImageOps.mirror(image)
        return {**sample, self.column: image}


class AugmentedDataset(torch.utils.data.Dataset):
    """The training samples as the loader fetches them: augmented for the epoch the loader set (``set_epoch``)."""

    def __init__(self, samples: list[dict[str, Any]], augment: TextAugment) -> None:
        self.samples, self.augment, self.epoch = samples, augment, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.augment(self.samples[index], index, self.epoch)


def text_augment(spec: Any, tokenizer: Any, seed: int) -> TextAugment:
    """The recipe's ``data.augment`` for this tokenizer."""
    mask = tokenizer.mask_token_id if tokenizer.mask_token_id is not None else tokenizer.unk_token_id
    special = frozenset(int(i) for i in tokenizer.all_special_ids if i != mask)
    return TextAugment(spec.kind, float(spec.rate), int(seed), int(mask if mask is not None else 0), special)
