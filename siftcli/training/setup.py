"""Workload and recipe in, what one run trains with out (:class:`Run`): the model's forwards, the seeded sifting loader,
the optimizer, the step's loss, the budget and state; and saving the trained model."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Sampler

from siftcli import parallel
from siftcli.recipe.schema import Recipe
from siftcli.runio import atomic_write
from siftcli.sift import transfer
from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.precision import scoring_precision
from siftcli.sift.sifter import SiftConfig
from siftcli.training import compiling
from siftcli.training.checkpoint import Stateful
from siftcli.training.distill import distill_loss
from siftcli.training.losses import LabelLoss, StepLoss
from siftcli.training.state import Budget, Reference, RunState
from siftcli.training.step import Learner
from siftcli.workload.augment import AugmentedDataset
from siftcli.workload.build import Workload


def make_optimizer(model: torch.nn.Module, lr: float, weight_decay: float, zero: bool = False) -> torch.optim.Optimizer:
    """AdamW, fused where this torch build supports it: on short-sequence fine-tunes the optimizer
    step can be 40% of training time, and the fused kernel cuts it on CPU and GPU alike.

    ``zero`` (under torchrun): ``ZeroRedundancyOptimizer``, each rank holding the AdamW state of its
    share of the parameters only (ZeRO stage 1), which frees memory for a larger batch; one process: plain AdamW.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "norm" in name.lower() or name.endswith(".bias") else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if zero and parallel.active():
        from torch.distributed.optim import ZeroRedundancyOptimizer

        groups = [g for g in groups if g["params"]]
        return ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, lr=lr)
    try:
        return torch.optim.AdamW(groups, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):  # older torch, or a device without the fused kernel
        return torch.optim.AdamW(groups, lr=lr)


SIFT_FIELDS = {f.name for f in dataclasses.fields(SiftConfig)}


def sift_config(recipe: Recipe, n_train: int, **changes: Any) -> SiftConfig:
    """The recipe's ``sift`` section as the engine's :class:`SiftConfig` (same field names, copied by
    name); a delay fraction becomes raw batches (of one rank's shard, under torchrun); ``changes`` override
    (e.g. ``mode="random"``)."""
    n_train = -(-n_train // parallel.world())
    s = recipe.sift
    values = {k: v for k, v in s.model_dump().items() if k in SIFT_FIELDS}
    values["seed"] = recipe.seed
    if s.sift_delay_fraction is not None:
        batches_per_epoch = math.ceil(n_train / recipe.batch_size)
        span = batches_per_epoch if s.repeat_delay_per_epoch else batches_per_epoch * recipe.epochs
        values["sift_delay"] = int(round(s.sift_delay_fraction * span))
    values.update(changes)
    return SiftConfig(**values)


class SeededSampler(Sampler[int]):
    """Shuffles with ``seed + epoch`` so every arm and every resume sees the same order.

    With ``world`` > 1 it is ``DistributedSampler``'s equivalent: the same permutation on every rank,
    padded by wrapping to a multiple of ``world``, rank ``r`` taking every ``world``-th index from ``r``;
    so every rank has ``ceil(n / world)`` samples (the same number of raw batches: no rank waits), and
    with one process the order is exactly the single-process one.
    """

    def __init__(self, n: int, seed: int, rank: int = 0, world: int = 1) -> None:
        self.n, self.seed, self.epoch, self.rank, self.world = n, seed, 0, rank, world

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.n, generator=g).tolist()
        if self.world == 1:
            return iter(order)
        order += order[: len(self) * self.world - self.n]
        return iter(order[self.rank :: self.world])

    def __len__(self) -> int:
        return -(-self.n // self.world)


def build_train_loader(workload: Workload, recipe: Recipe, sift: SiftConfig | None, model: torch.nn.Module,
                       device: torch.device, reference_losses: torch.Tensor | None = None) -> SiftingDataLoader:
    """The loop's one loader type: a :class:`SiftingDataLoader`; the baseline's keeps everything (mode ``all``).
    Under torchrun each rank draws its shard (:class:`SeededSampler`); ``model`` is the one scoring runs on,
    never the DDP wrapper (a scoring forward must not take part in gradient synchronisation)."""
    sampler = SeededSampler(len(workload.train_data), recipe.seed, parallel.rank(), parallel.world())
    data: Any = workload.train_data
    if workload.augment is not None:  # inputs that change every epoch, seeded by (seed, epoch, sample)

        data = AugmentedDataset(workload.train_data, workload.augment)
    raw = DataLoader(
        data, batch_size=recipe.batch_size, sampler=sampler,
        collate_fn=workload.collate, num_workers=recipe.num_workers, pin_memory=transfer.pins(device),
        # its own generator: creating an iterator must not draw from the global RNG, or a
        # resumed run's dropout masks would differ from an uninterrupted run's
        generator=torch.Generator().manual_seed(recipe.seed),
    )
    config = sift or SiftConfig(mode="all", seed=recipe.seed)
    return SiftingDataLoader(
        raw, model, workload.loss_fn, config, batch_size=recipe.batch_size, device=device,
        precision=scoring_precision(recipe.sift.precision, device, recipe.precision), pad_values=workload.pad_values,
        padding_side=workload.padding_side, pad_to_multiple_of=recipe.pad_multiple,
        reference_losses=reference_losses if config.uses_reference else None,
        epochs=recipe.epochs, exact_len=False,  # the loop plans from its raw budget, not len(): each epoch yields what it kept
    )


def save_model(workload: Workload, folder: Any) -> None:
    """The trained model in the ecosystem's own form (``save_pretrained``, with its tokenizer or processor),
    loadable with ``from_pretrained`` and usable as ``model.source`` of another recipe; written whole or not at all.
    Under torchrun every rank holds the same weights: rank 0 writes them."""
    def write(tmp: Path) -> None:
        workload.model.save_pretrained(tmp)
        if workload.processor is not None:
            workload.processor.save_pretrained(tmp)

    atomic_write(Path(folder), write, folder=True)


def _forwards(model: torch.nn.Module, recipe: Recipe, device: torch.device) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(the training forward, the scoring and evaluation forward). The training forward is compiled where the recipe
    says (``compile``); scoring and evaluation stay eager: their shapes are not the training step's (inference mode,
    memory scoring's subsets of any size), so compiling them costs recompilations that their few forwards never repay.
    Under torchrun the training forward is the ``DistributedDataParallel`` wrapper, whose gradient all-reduce a scoring
    or evaluation forward must never join (it would wait on ranks that are not scoring), so those use the bare module."""
    forward: torch.nn.Module = model
    if parallel.active():
        from torch.nn.parallel import DistributedDataParallel

        forward = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if recipe.compile:
        forward = compiling.compile_module(forward, recipe.compile_mode)
    return forward, model


@dataclass
class Run:
    """Everything one run trains with: the model and its two forwards (training, and the bare one that scores and
    evaluates), the loaders, optimizer, scaler, the step's loss, the budget, the state, the parts a checkpoint
    holds, and what it was set up from: the sift settings, the reference and its folder."""

    device: torch.device
    model: torch.nn.Module
    forward: torch.nn.Module
    bare: torch.nn.Module
    loader: SiftingDataLoader
    eval_loader: DataLoader
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    loss: StepLoss
    budget: Budget
    state: RunState
    parts: dict[str, Stateful]
    sift: SiftConfig | None = None
    reference: Reference | None = None
    run_dir: Path | None = None

    @property
    def learner(self) -> Learner:
        """What :func:`~siftcli.training.step.train_step` trains with."""
        eager = getattr(self.forward, "_orig_mod", None)  # a compiled forward's own module (torch.compile keeps it)
        return Learner(self.forward, self.model, self.loss, self.optimizer, self.scaler, self.device, eager=eager,
                       full_rows=self.loader.batch_size)


def setup_run(workload: Workload, recipe: Recipe, sift: SiftConfig | None, reference: Reference | None,
              upfront: dict[str, float] | None, run_dir: Path | None) -> Run:
    """The run's pieces from the workload and recipe. The cost of choosing the data (a reference, near-copy removal:
    ``upfront``) starts on the run's clock, each part as its own phase."""
    device = workload.device
    model = workload.model.to(device).train()
    if recipe.compile:  # every run compiles from nothing, as its own process would: each arm's clock carries its own
        torch._dynamo.reset()
    forward, bare = _forwards(model, recipe, device)
    loader = build_train_loader(workload, recipe, sift, bare, device, reference.losses if reference else None)
    eval_data = workload.eval_data
    if parallel.active():  # each rank evaluates its share; evaluate() sums over ranks
        eval_data = torch.utils.data.Subset(eval_data, range(parallel.rank(), len(eval_data), parallel.world()))
    eval_loader = DataLoader(eval_data, batch_size=recipe.eval.batch_size, shuffle=False, collate_fn=workload.collate,
                             generator=torch.Generator())  # its own: evaluating must not move the training RNG
    optimizer = make_optimizer(model, recipe.optim.lr, recipe.optim.weight_decay, recipe.optim.zero)
    scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
    parts: dict[str, Stateful] = {"model": model, "optimizer": optimizer, "loader": loader, "scaler": scaler}
    loss: StepLoss = LabelLoss(workload.loss_fn)  # the scoring pass always uses the student's own loss
    if recipe.distill is not None:
        loss = parts["teacher"] = distill_loss(recipe.distill, workload, device, run_dir, recipe.seed)
    state = RunState()
    before = {**({"reference": reference.seconds} if reference is not None else {}), **(upfront or {})}
    if before:
        state.phases.update(before)
        state.train_clock = state.last_eval_clock = state.earlier_seconds = sum(before.values())
    budget = Budget.of(recipe, len(loader.dataloader.sampler))  # this rank's share under torchrun
    return Run(device, model, forward, bare, loader, eval_loader, optimizer, scaler, loss, budget, state, parts, sift,
               reference, run_dir)
