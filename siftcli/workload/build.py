"""Turn a validated recipe into objects: the workload (model, data, collate, loss), the device, the
optimizer, the engine's :class:`SiftConfig` and the training loader.

This is the one place recipe fields become engine arguments; the loop reads only run settings
(epochs, optim, eval, precision) from the recipe itself, and the engine never sees it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from siftcli import parallel
from siftcli.errors import SiftcliError, first_line
from siftcli.recipe.schema import IMAGE_AUGMENTS, Recipe
from siftcli.sift.losses import HFLoss, PerSampleLoss
from siftcli.sift.sifter import UNCERTAINTY
from siftcli.tasks import TASKS
from siftcli.workload.augment import ImageAugment, text_augment
from siftcli.workload.data import load_splits
from siftcli.workload.models import build_model, load_image_processor, load_tokenizer
from siftcli.workload.rows import ImageCollator, PadCollator, Row, flip_labels, groups_of, holdout_split, split_off, tokenize
from siftcli.workload.teachers import load_teacher


@dataclass
class Workload:
    """Everything a training run needs, free of the recipe."""

    task: str
    model: torch.nn.Module
    train_data: list[Row]
    eval_data: list[Row]
    collate: Callable[[list[Row]], dict[str, torch.Tensor]]
    loss_fn: PerSampleLoss
    metric: str
    label_names: list[str] | None = None
    pad_values: dict[str, float] = field(default_factory=dict)
    padding_side: str = "right"
    noisy: torch.Tensor | None = None  # bool per training sample: label flipped by data.label_noise
    processor: Any = None  # the tokenizer or image processor, saved beside the trained model
    teacher: torch.nn.Module | None = None  # distill.teacher, frozen
    groups: torch.Tensor | None = None  # per training sample: index into group_names (data.group_column)
    group_names: list[str] | None = None
    holdout_data: list[Row] | None = None  # sift.reference holdout rows: no arm trains on them
    unlabeled: bool = False  # training rows carry no label (-1): distillation from the teacher alone
    source_index: list[int] | None = None  # each training row's row in ``source_rows`` (what siftcli filter writes out)
    source_rows: Any = None  # the loaded training data (a datasets.Dataset), columns as in the file
    eval_source_rows: Any = None  # the loaded evaluation data, likewise (what siftcli plan writes beside a filtered file)
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # resolved once, from the recipe
    augment: Any = None  # data.augment: a seeded Text/ImageAugment applied to training samples as the loader fetches them

    def subset(self, indices: list[int]) -> Workload:
        """The same workload on a subset of its training samples (a static filter, a ceiling): per-sample marks follow."""
        pick = torch.tensor(indices, dtype=torch.long)
        return dataclasses.replace(self, train_data=[self.train_data[i] for i in indices],
                                   noisy=None if self.noisy is None else self.noisy[pick],
                                   groups=None if self.groups is None else self.groups[pick])


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
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise SiftcliError(f"loss: {spec!r} cannot be called as (model, batch); expected (model, batch) -> Tensor[n]") from None
    except ValueError:  # no signature to inspect (some builtins): find out when it runs
        pass
    return fn


def try_loss(spec: str, loss_fn: PerSampleLoss, model: torch.nn.Module, batch: Any) -> None:
    """A user's loss called once on two training samples (without gradients, the model in eval mode and put back), so a
    loss whose signature binds but which fails inside, or returns something else than one loss per sample, is one line
    before any run folder exists (``validate``, ``train``, every arm)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            out = loss_fn(model, batch)
    except Exception as exc:
        first = first_line(exc, 160, empty="")
        raise SiftcliError(f"loss: {spec} raised {exc.__class__.__name__} on a batch of 2 training samples: {first}") from None
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or out.numel() != 2:
        got = f"a tensor of {out.numel()} values" if isinstance(out, torch.Tensor) else type(out).__name__
        raise SiftcliError(f"loss: {spec} returned {got} for a batch of 2 samples; expected Tensor[n], one loss per sample")


def splits_from_recipe(recipe: Recipe) -> Any:
    """The recipe's data block, loaded and checked (see :func:`siftcli.workload.data.load_splits`)."""
    return load_splits(recipe.data, task=recipe.task, seed=recipe.seed,
                       unlabeled_train=recipe.distill is not None and recipe.distill.alpha == 1.0)


def check_sift_fits(recipe: Recipe, unlabeled: bool) -> None:
    """The one sift setting the data can refuse: a loss ranking needs labels (checked again for every sweep trial
    that reuses a workload built for another trial)."""
    if unlabeled and recipe.sift.enabled and recipe.sift.score not in UNCERTAINTY and recipe.sift.mode != "random":
        raise SiftcliError(f"data: the training data has no {recipe.data.label_column!r} column, so its loss cannot rank samples; "
                           "use sift.score entropy or margin (the student's own uncertainty), or sift.enabled false")


def workload_key(recipe: Recipe) -> str:
    """What :func:`build_workload` depends on, as text: the recipe without its sift section, except the reference's
    holdout (which rows train). Two recipes with one key build identical workloads, so a warm sweep worker builds it
    once and every trial that differs only in sift settings reuses it (from the initial weights, like compare's arms)."""
    import json

    raw = recipe.model_dump(mode="json")
    reference = raw.pop("sift")["reference"]
    raw["holdout"] = [reference["holdout_source"], reference["holdout_fraction"]]
    return json.dumps(raw, sort_keys=True, default=str)


def build_workload(recipe: Recipe) -> Workload:
    """Load data first (cheap to get wrong), then the model."""
    splits = splits_from_recipe(recipe)
    check_sift_fits(recipe, splits.unlabeled)
    if splits.unlabeled and recipe.data.label_noise:
        raise SiftcliError("data.label_noise: the training data has no labels to flip; leave data.label_noise out")
    m = recipe.model
    num_labels = len(splits.label_names) if splits.label_names else None
    pad_values: dict[str, float] = {}
    padding_side = "right"
    holdout_rows: list[Row] | None = None
    if TASKS[recipe.task].inputs == "image":
        if recipe.sift.reference.holdout_source:
            raise SiftcliError("sift.reference.holdout_source: image data takes holdout_fraction (a file of images is not read)")
        processor = load_image_processor(m.tokenizer or (None if m.source.startswith("config:") else m.source))
        col = splits.input_column
        train_rows = [{col: r[col], "labels": r["label"]} for r in splits.train]
        eval_rows = [{col: r[col], "labels": r["label"]} for r in splits.eval]
        collate: Callable = ImageCollator(processor, col)
    else:
        tok_source = m.tokenizer or m.source
        if tok_source.startswith("config:"):
            raise SiftcliError("model.tokenizer: a model built from config: needs a tokenizer source (e.g. builtin:minilm)")
        tokenizer = processor = load_tokenizer(tok_source)
        padding_side = tokenizer.padding_side
        pad_values["input_ids"] = tokenizer.pad_token_id or 0
        train_rows = tokenize(splits.train, tokenizer, recipe, splits.input_column)
        eval_rows = tokenize(splits.eval, tokenizer, recipe, splits.input_column)
        if recipe.sift.reference.holdout_source:
            holdout = holdout_split(recipe, splits.label_names)
            holdout_rows = tokenize(holdout, tokenizer, recipe, splits.input_column)
        if m.source.startswith("config:") and "vocab_size" not in m.config_overrides:
            m = m.model_copy(update={"config_overrides": {**m.config_overrides, "vocab_size": len(tokenizer)}})
        label_dtype = torch.float32 if TASKS[recipe.task].labels == "float" else torch.long
        collate = PadCollator(pad_values["input_ids"], padding_side, label_dtype, recipe.pad_multiple, recipe.max_length)
    groups, group_names = groups_of(splits.train, recipe)
    source_index = list(range(len(train_rows)))  # each training row's row in the loaded training data
    if recipe.sift.reference.holdout_fraction:  # held out before any label is flipped: a clean sample of the data
        keep, held = split_off(len(train_rows), recipe.sift.reference.holdout_fraction, recipe.seed)
        holdout_rows = [train_rows[i] for i in held]
        train_rows = [train_rows[i] for i in keep]
        source_index = keep
        groups = None if groups is None else groups[torch.tensor(keep, dtype=torch.long)]
    noisy = flip_labels(train_rows, len(splits.label_names or []), recipe.data.label_noise, recipe.seed)
    torch.manual_seed(recipe.seed)  # random-init weights (config: models, new heads) follow the recipe's seed
    model = build_model(
        recipe.task, m.source, num_labels=num_labels, from_scratch=m.from_scratch,
        config_overrides=m.config_overrides, revision=m.revision, label_names=splits.label_names,
    )
    if TASKS[recipe.task].inputs == "text":
        _check_fits(model, recipe, len(tokenizer))
    if TASKS[recipe.task].labels == "tokens" and getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = pad_values.get("input_ids", 0)
    loss_fn = import_loss(recipe.loss) if ":" in recipe.loss else HFLoss(TASKS[recipe.task].loss_kind(recipe.loss))
    if ":" in recipe.loss:
        try_loss(recipe.loss, loss_fn, model, collate(train_rows[:2]))
    teacher = None
    if recipe.distill is not None:

        teacher = load_teacher(recipe.task, recipe.distill.teacher, splits.label_names,
                               processor if TASKS[recipe.task].inputs == "text" else None)
    return Workload(
        task=recipe.task, model=model, train_data=train_rows, eval_data=eval_rows, collate=collate,
        loss_fn=loss_fn, metric=recipe.resolved_metric, label_names=splits.label_names,
        pad_values=pad_values, padding_side=padding_side, noisy=noisy, processor=processor, teacher=teacher,
        groups=groups, group_names=group_names, holdout_data=holdout_rows, unlabeled=splits.unlabeled,
        source_index=source_index, source_rows=splits.train, eval_source_rows=splits.eval,
        device=resolve_device(recipe.device, recipe.precision),
        augment=_augment(recipe, processor, splits.input_column),
    )


def _augment(recipe: Recipe, processor: Any, column: str) -> Any:
    if recipe.data.augment is None:
        return None

    spec = recipe.data.augment
    if spec.kind in IMAGE_AUGMENTS:
        return ImageAugment(spec.kind == "crop-flip", float(spec.pad), int(recipe.seed), column)
    return text_augment(spec, processor, recipe.seed)


def _check_fits(model: torch.nn.Module, recipe: Recipe, vocab: int) -> None:
    """Refuse a model that would index past its embeddings at the first batch (a traceback mid-run otherwise)."""
    config = model.config
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if positions and recipe.max_length > positions:
        raise SiftcliError(f"max_length {recipe.max_length} is longer than the model's {positions} position embeddings; "
                           "lower max_length or raise max_position_embeddings")
    size = getattr(config, "vocab_size", None)
    if size and vocab > size:
        raise SiftcliError(f"model: the tokenizer has {vocab} tokens but the model's vocab_size is {size}; "
                           "use the model's own tokenizer or a larger vocab_size")


# -- run objects: device, optimizer, sifting config, training loader ----------------------------

def resolve_device(device: str, precision: str) -> torch.device:
    """``auto`` picks CUDA when present; asking for what is missing is a user error."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise SiftcliError("device: cuda was asked for but no CUDA GPU is available; use device: auto or cpu")
    if precision == "bf16" and device == "cuda" and not torch.cuda.is_bf16_supported():
        raise SiftcliError("precision: bf16 is not supported on this GPU; use fp16 or fp32")
    if precision == "fp16" and device == "cpu":
        raise SiftcliError("precision: fp16 needs a CUDA GPU; use bf16 or fp32 on a CPU")
    if device == "cuda":

        return torch.device("cuda", parallel.local_rank())  # one GPU per process under torchrun
    return torch.device(device)


