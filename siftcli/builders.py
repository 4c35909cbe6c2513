"""Turn a validated recipe into plain objects: model, data, collate function, loss, metric.

This is the only place that reads the recipe; everything downstream takes plain values.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from siftcli.config import Recipe
from siftcli.errors import SiftcliError
from siftcli.sift.losses import HFLoss, PerSampleLoss


@dataclass
class Workload:
    """Everything a training run needs, free of the recipe."""

    task: str
    model: torch.nn.Module
    train_data: list[dict[str, Any]]
    eval_data: list[dict[str, Any]]
    collate: Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]
    loss_fn: PerSampleLoss
    metric: str
    label_names: list[str] | None = None
    pad_values: dict[str, float] = field(default_factory=dict)
    padding_side: str = "right"

    @property
    def higher_is_better(self) -> bool:
        return self.metric == "accuracy"


class PadCollator:
    """Pads token lists to the longest in the batch: cheap, and the sifter re-pads the same way."""

    def __init__(self, pad_id: int, padding_side: str = "right", label_dtype: torch.dtype = torch.long) -> None:
        self.pad_id = pad_id
        self.padding_side = padding_side
        self.label_dtype = label_dtype

    def _pad(self, seqs: list[list[int]], value: int) -> torch.Tensor:
        width = max(len(s) for s in seqs)
        out = torch.full((len(seqs), width), value, dtype=torch.long)
        for i, s in enumerate(seqs):
            if self.padding_side == "right":
                out[i, : len(s)] = torch.tensor(s, dtype=torch.long)
            else:
                out[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        return out

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
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

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        images = [r[self.image_column].convert("RGB") for r in rows]
        pixels = self.processor(images=images, return_tensors="pt")["pixel_values"]
        return {"pixel_values": pixels, "labels": torch.tensor([r["labels"] for r in rows], dtype=torch.long)}


def import_loss(spec: str) -> PerSampleLoss:
    """Import a user's ``module:function`` loss; only ever because the recipe named it."""
    module_name, _, attr = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except ImportError as exc:
        raise SiftcliError(f"loss: cannot import module {module_name!r} ({exc})") from None
    except AttributeError:
        raise SiftcliError(f"loss: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(fn):
        raise SiftcliError(f"loss: {spec!r} is not callable; expected (model, batch) -> Tensor[n]")
    return fn


def splits_from_recipe(recipe: Recipe) -> Any:
    """The recipe's data block, loaded and checked (see :func:`siftcli.data.load_splits`)."""
    from siftcli.data import load_splits

    d = recipe.data
    return load_splits(
        d.source, task=recipe.task, fmt=d.format, config_name=d.config_name, train_split=d.train_split,
        eval_split=d.eval_split, eval_source=d.eval_source, eval_fraction=d.eval_fraction,
        text_column=d.text_column, text_pair_column=d.text_pair_column, image_column=d.image_column,
        label_column=d.label_column, label_names=d.label_names, column_names=d.column_names,
        max_train_samples=d.max_train_samples, max_eval_samples=d.max_eval_samples, seed=recipe.seed,
    )


def build_workload(recipe: Recipe) -> Workload:
    """Load data first (cheap to get wrong), then the model."""
    from siftcli.models import build_model, load_image_processor, load_tokenizer

    splits = splits_from_recipe(recipe)
    m = recipe.model
    num_labels = len(splits.label_names) if splits.label_names else None
    pad_values: dict[str, float] = {}
    padding_side = "right"
    if recipe.task == "image-classification":
        processor = load_image_processor(m.tokenizer or (None if m.source.startswith("config:") else m.source))
        col = splits.input_column
        train_rows = [{col: r[col], "labels": r["label"]} for r in splits.train]
        eval_rows = [{col: r[col], "labels": r["label"]} for r in splits.eval]
        collate: Callable = ImageCollator(processor, col)
    else:
        tok_source = m.tokenizer or m.source
        if tok_source.startswith("config:"):
            raise SiftcliError("model.tokenizer: a model built from config: needs a tokenizer source (e.g. builtin:minilm)")
        tokenizer = load_tokenizer(tok_source)
        padding_side = tokenizer.padding_side
        pad_values["input_ids"] = tokenizer.pad_token_id or 0
        train_rows = _tokenize(splits.train, tokenizer, recipe, splits.input_column)
        eval_rows = _tokenize(splits.eval, tokenizer, recipe, splits.input_column)
        if m.source.startswith("config:") and "vocab_size" not in m.config_overrides:
            m = m.model_copy(update={"config_overrides": {**m.config_overrides, "vocab_size": len(tokenizer)}})
        label_dtype = torch.float32 if recipe.task == "regression" else torch.long
        collate = PadCollator(pad_values["input_ids"], padding_side, label_dtype)
    model = build_model(
        recipe.task, m.source, num_labels=num_labels, from_scratch=m.from_scratch,
        config_overrides=m.config_overrides, revision=m.revision, label_names=splits.label_names,
    )
    if recipe.task == "causal-lm" and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = pad_values.get("input_ids", 0)
    kind = {"causal-lm": "causal_lm", "regression": "mse"}.get(recipe.task, "cross_entropy")
    loss_fn = import_loss(recipe.loss) if ":" in recipe.loss else HFLoss("bce" if recipe.loss == "bce" else kind)
    return Workload(
        task=recipe.task, model=model, train_data=train_rows, eval_data=eval_rows, collate=collate,
        loss_fn=loss_fn, metric=recipe.resolved_metric, label_names=splits.label_names,
        pad_values=pad_values, padding_side=padding_side,
    )


def _tokenize(ds: Any, tokenizer: Any, recipe: Recipe, column: str) -> list[dict[str, Any]]:
    texts = list(ds[column])
    if any(not isinstance(t, str) for t in texts):
        bad = next(t for t in texts if not isinstance(t, str))
        raise SiftcliError(f"data: column {column!r} must hold text; found {type(bad).__name__} ({bad!r})")
    pairs = list(ds[recipe.data.text_pair_column]) if recipe.data.text_pair_column else None
    enc = tokenizer(texts, pairs, truncation=True, max_length=recipe.max_length)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    rows = []
    labels = None if recipe.task == "causal-lm" else list(ds["label"])
    for i in range(len(texts)):
        row = {k: enc[k][i] for k in keys}
        row["labels"] = list(enc["input_ids"][i]) if labels is None else labels[i]
        rows.append(row)
    return rows
