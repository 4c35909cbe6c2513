"""Training rows from loaded data: tokenizing, collating into batches, and the per-row marks a benchmark or report
needs (flipped labels, groups, a held-out part for a reference). The workload builder calls these; the engine never does."""

from __future__ import annotations

from typing import Any, cast

import torch
from typing_extensions import TypedDict

from siftcli.errors import SiftcliError
from siftcli.recipe.schema import DataSpec, Recipe
from siftcli.sift.batching import bucket
from siftcli.tasks import TASKS
from siftcli.workload.data import column_values, load_splits


class Row(TypedDict, total=False):
    """One tokenized row as the collators, the n-gram scores and the hashes read it (an image task's rows are its
    data set's own, with the image column and ``labels``)."""

    input_ids: list[int]
    attention_mask: list[int]
    token_type_ids: list[int]
    labels: Any  # a class id, a regression target, or token labels (causal LM)


class PadCollator:
    """Pads token lists to the longest in the batch (rounded up to a multiple of ``pad_multiple``, for a compiled
    model: see :func:`~siftcli.sift.batching.bucket`): cheap, and the sifter re-pads the same way."""

    def __init__(self, pad_id: int, padding_side: str = "right", label_dtype: torch.dtype = torch.long,
                 pad_multiple: int | None = None, max_width: int | None = None) -> None:
        self.pad_id = pad_id
        self.pad_multiple = pad_multiple
        self.max_width = max_width  # buckets stop at the tokenizer's max_length
        self.padding_side = padding_side
        self.label_dtype = label_dtype

    def _pad(self, seqs: list[list[int]], value: int) -> torch.Tensor:
        longest = max(len(s) for s in seqs)
        width = bucket(longest, self.pad_multiple)
        if self.max_width is not None:
            width = max(longest, min(width, self.max_width))
        out = torch.full((len(seqs), width), value, dtype=torch.long)
        for i, s in enumerate(seqs):
            if self.padding_side == "right":
                out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            else:
                out[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        return out

    def __call__(self, rows: list[Row]) -> dict[str, torch.Tensor]:
        batch = {"input_ids": self._pad([r["input_ids"] for r in rows], self.pad_id)}
        batch["attention_mask"] = self._pad([r["attention_mask"] for r in rows], 0)
        if "token_type_ids" in rows[0]:
            batch["token_type_ids"] = self._pad([r["token_type_ids"] for r in rows], 0)
        first = rows[0]["labels"]
        if isinstance(first, list):  # causal LM: token labels, padded with -100
            batch["labels"] = self._pad([r["labels"] for r in rows], -100)
        else:
            batch["labels"] = torch.tensor([r["labels"] for r in rows], dtype=self.label_dtype)
        return batch


class ImageCollator:
    """Runs the image processor per batch, so images are decoded only when used."""

    def __init__(self, processor: Any, image_column: str) -> None:
        self.processor = processor
        self.image_column = image_column

    def __call__(self, rows: list[Row]) -> dict[str, torch.Tensor]:
        images = [r[self.image_column].convert("RGB") for r in rows]
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        return {"pixel_values": pixels, "labels": torch.tensor([r["labels"] for r in rows], dtype=torch.long)}


def flip_labels(rows: list[Row], n_classes: int, fraction: float, seed: int) -> torch.Tensor | None:
    """Flip ``fraction`` of the training labels to another class, seeded; returns which were flipped.

    For benchmarks of the label-noise regime: evaluation data is never touched.
    """
    if not fraction or n_classes < 2:
        return None
    g = torch.Generator().manual_seed(10_007 + seed)
    n = len(rows)
    chosen = torch.randperm(n, generator=g)[: int(round(fraction * n))]
    shift = torch.randint(1, n_classes, (chosen.numel(),), generator=g)
    for i, k in zip(chosen.tolist(), shift.tolist()):
        rows[i]["labels"] = (rows[i]["labels"] + k) % n_classes
    noisy = torch.zeros(n, dtype=torch.bool)
    noisy[chosen] = True
    return noisy


def tokenize(ds: Any, tokenizer: Any, recipe: Recipe, column: str) -> list[Row]:
    texts = column_values(ds, column)
    if any(not isinstance(t, str) for t in texts):
        bad = next(t for t in texts if not isinstance(t, str))
        raise SiftcliError(f"data: column {column!r} must hold text; found {type(bad).__name__} ({bad!r})")
    pairs = column_values(ds, recipe.data.text_pair_column) if recipe.data.text_pair_column else None
    enc = tokenizer(texts, pairs, truncation=True, max_length=recipe.max_length)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    rows = []
    labels = None if TASKS[recipe.task].labels == "tokens" else column_values(ds, "label")
    for i in range(len(texts)):
        row = cast(Row, {k: enc[k][i] for k in keys})
        row["labels"] = list(enc["input_ids"][i]) if labels is None else labels[i]
        rows.append(row)
    return rows


def hash_rows(h: Any, rows: list[Row]) -> None:
    """Feed training rows (tokens, labels: their plain values) into the hash ``h``: what a reference's cache key and a
    resumed run's data check both depend on."""
    import json

    h.update(str(len(rows)).encode())
    for row in rows:
        h.update(json.dumps({k: v for k, v in row.items() if isinstance(v, (int, float, str, list))}, sort_keys=True).encode())


#: The fewest rows a holdout split leaves on either side (training, the reference's holdout).
MIN_SIDE_ROWS = 2


def split_off(n: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Seeded ``(kept, held out)`` index lists: ``fraction`` of ``range(n)`` held out, both in their original order."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(4_241 + seed))
    cut = max(1, int(round(fraction * n)))
    if cut >= n:
        raise SiftcliError(f"sift.reference.holdout_fraction {fraction}: holding out {cut} of {n} rows leaves nothing to train on")
    if n - cut < MIN_SIDE_ROWS or cut < MIN_SIDE_ROWS:
        side, rows = ("to train on", n - cut) if n - cut < MIN_SIDE_ROWS else ("for the reference", cut)
        raise SiftcliError(f"sift.reference.holdout_fraction {fraction}: of {n} rows it leaves {rows} {side}, fewer than "
                           f"{MIN_SIDE_ROWS}: a run or a reference on so few rows measures nothing; give a fraction that "
                           "leaves both sides rows, or a holdout_source file")
    return sorted(perm[cut:].tolist()), sorted(perm[:cut].tolist())


def holdout_split(recipe: Recipe, label_names: list[str] | None) -> Any:
    """``sift.reference.holdout_source``: rows with the training data's columns and labels."""
    d, src = recipe.data, recipe.sift.reference.holdout_source
    try:
        spec = DataSpec(source=src, format=d.format, eval_source=src, text_column=d.text_column,
                        text_pair_column=d.text_pair_column, label_column=d.label_column, label_names=label_names,
                        column_names=d.column_names)
        split = load_splits(spec, task=recipe.task, seed=recipe.seed)
    except SiftcliError as exc:
        raise SiftcliError(f"sift.reference.holdout_source: {exc}") from None
    return split.train


def groups_of(train: Any, recipe: Recipe) -> tuple[torch.Tensor | None, list[str] | None]:
    """``data.group_column``: each training row's group as an index into the sorted group names."""
    column = recipe.data.group_column
    if column is None:
        return None, None
    if column not in train.column_names:
        raise SiftcliError(f"data.group_column: column {column!r} not found in the training data; "
                           f"available columns: {', '.join(train.column_names)}")
    values = [str(v) for v in train[column]]
    names = sorted(set(values))
    target = recipe.data.target_group
    if target is not None and target not in names:
        raise SiftcliError(f"data.target_group: {target!r} is not a value of column {column!r} (values: {', '.join(names[:10])})")
    lookup = {name: i for i, name in enumerate(names)}
    return torch.tensor([lookup[v] for v in values], dtype=torch.long), names
