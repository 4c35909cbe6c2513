"""``SiftingDataLoader``: wraps a ``DataLoader`` and yields full batches of kept samples.

The iterator is the only thing here; it calls the engine's pieces in order for each raw batch:
indices (:mod:`.indices`), scoring (:mod:`.scoring`), the decision (:mod:`.sifter`), agreement
across ranks (:mod:`.distributed`), counting (:mod:`.stats`) and packing (:class:`.batching.Packer`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from siftcli.sift import batching
from siftcli.sift.distributed import agree_across_ranks
from siftcli.sift.indices import IndexTracker
from siftcli.sift.losses import PerSampleLoss
from siftcli.sift.memory import LossMemory
from siftcli.sift.precision import fast_bf16, scoring_precision  # noqa: F401  (re-exported: public since 0.1)
from siftcli.sift.scoring import Scorer
from siftcli.sift.sifter import SiftConfig, Sifter
from siftcli.sift.stats import EpochStats, SiftStats  # noqa: F401  (re-exported: public since 0.1)


@dataclass
class BatchDecision:
    """What happened to one raw batch, as batch hooks see it."""

    raw: Any
    mask: torch.Tensor  # kept samples
    losses: torch.Tensor | None  # scoring-forward losses (None when the batch was not scored)
    scores: torch.Tensor | None  # what was ranked: the losses, or the reducible losses
    indices: torch.Tensor | None  # dataset indices, where the loader could tell them
    delayed: bool  # decided inside the sift delay (everything kept)
    scored: int = 0  # samples that went through a scoring forward (the rest, if losses is set, came from memory)


BatchHook = Callable[[BatchDecision], None]


class SiftingDataLoader:
    """Drop-in loader: score each raw batch without gradients, keep the informative samples,
    and yield batches of the original size.

    Args:
        dataloader: the original loader (any iterable of batches with a length).
        model: the model being trained; it is put in eval mode for scoring and restored exactly.
        loss_fn: ``(model, batch) -> Tensor[n]`` per-sample losses (see :mod:`siftcli.sift.losses`).
        config: a :class:`SiftConfig`.
        batch_size: size of the yielded batches; defaults to the loader's ``batch_size``.
        device: where scoring runs; defaults to the model's device. Yielded batches stay where
            the original loader put them unless ``yield_on_device`` is set.
        precision: ``fp32``, ``bf16``, ``fp16`` or ``auto``: autocast for the scoring forward.
            ``auto`` scores in bf16 where the hardware runs it natively (see :func:`fast_bf16`), else fp32;
            ranking losses needs far less precision than training on them.
        batch_transform: applied to each raw batch before anything else, for batch types
            that are not tensors, mappings or tuples of them.
        pad_values: per-field values used when re-padding; ``input_ids`` should be the pad token id.
        padding_side: ``right`` or ``left``, as the tokenizer padded.
        reference_losses: ``Tensor[len(dataset)]``, a reference model's loss per training sample, for
            ``SiftConfig(score="reducible")`` (``siftcli.reference`` computes them cross-fitted).

    Call :meth:`record` with the training forward's per-sample losses of each yielded batch to feed
    the loss memory for free (siftcli's own loop does); ``SiftConfig(scoring="memory")`` then skips
    the scoring forward for every sample it remembers.
    """

    def __init__(
        self,
        dataloader: Any,
        model: torch.nn.Module,
        loss_fn: PerSampleLoss,
        config: SiftConfig | None = None,
        *,
        batch_size: int | None = None,
        device: torch.device | str | None = None,
        precision: str = "fp32",
        batch_transform: Callable[[Any], Any] | None = None,
        pad_values: Mapping[str, float] | None = None,
        padding_side: str = "right",
        yield_on_device: bool = False,
        reference_losses: torch.Tensor | None = None,
    ) -> None:
        self.dataloader = dataloader
        self.config = config or SiftConfig()
        self.batch_size = int(batch_size or getattr(dataloader, "batch_size", None) or 0)
        if self.batch_size < 1:
            raise ValueError("batch_size is unknown: pass batch_size= or wrap a DataLoader that has one")
        if precision not in ("fp32", "bf16", "fp16", "auto"):
            raise ValueError(f"precision must be fp32, bf16, fp16 or auto, got {precision!r}")
        if (self.config.score == "reducible") != (reference_losses is not None):
            raise ValueError("score='reducible' and reference_losses go together: pass both or neither")
        self.device = torch.device(device) if device is not None else _model_device(model)
        self.scorer = Scorer(model, loss_fn, self.device, scoring_precision(precision, self.device, "fp32"), reference_losses)
        self.indices = IndexTracker(dataloader)
        if self._needs_indices and not self.indices.available:
            raise ValueError(f"{self._needs_indices} needs sample indices: wrap a DataLoader over a map-style dataset")
        self.memory = LossMemory(_dataset_len(dataloader) or 0)
        self.index_packer = batching.Packer(self.batch_size)
        self._last_indices: torch.Tensor | None = None
        self.batch_transform = batch_transform
        self.yield_on_device = yield_on_device
        self.packer = batching.Packer(self.batch_size, pad_values, padding_side)
        self.sifter = Sifter(self.config)
        self.stats = SiftStats(target_keep_fraction=self.config.target_keep_fraction)
        self.epoch = 0
        self._raw_in_epoch = 0
        self._pending: list[tuple[Any, torch.Tensor | None]] = []  # (batch, its indices) packed, not yet yielded
        self._resume_mid_epoch = False
        self._active = False  # a pass is under way (set by __iter__, cleared when it runs to the end)
        self._on_batch: list[BatchHook] = []

    @property
    def _needs_indices(self) -> str | None:
        """The mode that needs each sample's dataset index, if any (named in errors)."""
        if self.scorer.reference_losses is not None:
            return "reducible-loss scoring"
        return "scoring='memory'" if self.config.scoring == "memory" else None

    @property
    def model(self) -> torch.nn.Module:
        return self.scorer.model

    @property
    def precision(self) -> str:
        """The precision the scoring forward runs in (``auto`` resolved)."""
        return self.scorer.precision

    # -- contract ------------------------------------------------------------------------
    def __len__(self) -> int:
        """Expected sifted batches in the next epoch (exact in calibrated mode, up to rounding)."""
        raw_batches = len(self.dataloader)
        n_samples = _dataset_len(self.dataloader) or raw_batches * self.batch_size
        if self.config.repeat_delay_per_epoch:
            delay_left = self.config.sift_delay
        else:  # raw batches decided before the current (or next) epoch began
            delay_left = max(0, self.config.sift_delay - (self.sifter.steps - self.sifter.epoch_steps))
        delayed_batches = min(raw_batches, delay_left)
        delayed_samples = min(n_samples, delayed_batches * self.batch_size)
        kept = delayed_samples + (n_samples - delayed_samples) * self.config.target_keep_fraction
        return max(1, math.ceil(kept / self.batch_size)) if n_samples else 0

    def record(self, losses: torch.Tensor) -> None:
        """Remember the training forward's per-sample losses of the batch just yielded (free scores).

        A no-op where the loader cannot tell sample indices (see :mod:`siftcli.sift.indices`).
        """
        if self._last_indices is None:
            return
        losses = losses.detach().flatten()
        if losses.numel() != self._last_indices.numel():
            raise ValueError(f"record() got {losses.numel()} losses for a batch of {self._last_indices.numel()} samples")
        self.memory.write(self._last_indices, losses, self.epoch)

    def add_batch_hook(self, hook: BatchHook) -> None:
        """Call ``hook(decision)`` with a :class:`BatchDecision` for every raw batch (logging, plots, accounting)."""
        self._on_batch.append(hook)

    def __iter__(self) -> Iterator[Any]:
        if self._active and not self._resume_mid_epoch:
            # The caller stopped the previous pass early (the HF Trainer stops after len()
            # batches): that epoch is over, and what it left buffered is dropped.
            self.epoch += 1
        self._active = True
        if not self._resume_mid_epoch:
            self.sifter.start_epoch()
            self._raw_in_epoch = 0
            self.packer.clear()
            self.index_packer.clear()
            self._pending = []
        skip = self._raw_in_epoch
        self._resume_mid_epoch = False
        _set_epoch(self.dataloader, self.epoch)
        self.indices.start()
        source = iter(self.dataloader)
        for _ in range(skip):  # resume: replay the order, not the decisions
            next(source)
            self.indices.next()
        yield from self._flush()  # batches packed but not yet yielded when the state was saved
        while True:
            t0 = time.perf_counter()
            try:
                raw = next(source)
            except StopIteration:
                break
            self.stats.data_wait_seconds += time.perf_counter() - t0
            self._pending = self._step(raw, self.indices.next())
            yield from self._flush()
        self._pending = self._pair(self.packer.drain(full_only=False),
                                   self.index_packer.drain(full_only=False) if self.indices.available else None)
        yield from self._flush()
        self.epoch += 1
        self.sifter.start_epoch()
        self._raw_in_epoch = 0
        self._active = False

    # -- one raw batch ----------------------------------------------------------------------
    def _step(self, raw: Any, indices: torch.Tensor | None) -> list[tuple[Any, torch.Tensor | None]]:
        """Score, decide, agree, count and pack one raw batch; return the full batches it completes."""
        if self.batch_transform is not None:
            raw = self.batch_transform(raw)
        if indices is None and self._needs_indices:
            raise RuntimeError(f"the loader lost track of sample indices, which {self._needs_indices} needs "
                               "(was the DataLoader iterated before it was wrapped?)")
        n = batching.batch_size(raw)
        delayed = self.sifter.in_delay
        losses, scored = self._losses(raw, indices, n) if self.sifter.wants_scores(n) else (None, 0)
        scores = None if losses is None else self.scorer.scores(losses, indices)
        mask = self.sifter.decide(scores, n)
        if not delayed:
            mask = agree_across_ranks(mask, self.sifter.generator, self.device)
        self._raw_in_epoch += 1
        self.stats.count(self.epoch, n, int(mask.sum()), delayed, scored, 0 if losses is None else n - scored)
        self.stats.nonfinite = self.sifter.nonfinite
        self.stats.scoring_seconds = self.scorer.seconds
        for hook in self._on_batch:
            hook(BatchDecision(raw, mask, losses, scores, indices, delayed, scored))
        t1 = time.perf_counter()
        out = self._pair(self.packer.add(raw, mask), None if indices is None else self.index_packer.add(indices, mask))
        self.stats.packing_seconds += time.perf_counter() - t1
        return out

    def _losses(self, raw: Any, indices: torch.Tensor | None, n: int) -> tuple[torch.Tensor, int]:
        """The batch's losses and how many needed a scoring forward (all, or in memory mode the unknown ones)."""
        todo = None
        if self.config.scoring == "memory" and indices is not None:
            todo = (~self.memory.known(indices, self.epoch, self.config.memory_max_age)).nonzero().flatten()
            if todo.numel() == 0:
                return self.memory.read(indices), 0
        part = raw if todo is None or todo.numel() == n else batching.select(raw, todo)
        fresh = self.scorer.losses(part)
        expected = n if part is raw else todo.numel()
        if fresh.numel() != expected:
            raise ValueError(f"the loss function returned {fresh.numel()} losses for a batch of {expected} samples")
        if indices is None:
            return fresh, n
        self.memory.write(indices if part is raw else indices[todo], fresh, self.epoch)
        return (fresh, n) if part is raw else (self.memory.read(indices), expected)

    @staticmethod
    def _pair(batches: list[Any], index_batches: list[Any] | None) -> list[tuple[Any, torch.Tensor | None]]:
        """Packed batches with their indices (packed by the same masks, so they line up one to one)."""
        return list(zip(batches, index_batches if index_batches is not None else [None] * len(batches)))

    def _flush(self) -> Iterator[Any]:
        while self._pending:  # popped before yielding, so a checkpoint between yields loses nothing
            batch, self._last_indices = self._pending.pop(0)
            self.stats.count_batch(self.epoch)
            yield batching.to_device(batch, self.device) if self.yield_on_device else batch

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue mid-epoch with the same decisions."""
        return {
            "config": self.config.to_dict(),
            "sifter": self.sifter.state_dict(),
            "epoch": self.epoch,
            "raw_in_epoch": self._raw_in_epoch,
            "packer": self.packer.state_dict(),
            "index_packer": self.index_packer.state_dict(),
            "pending": [(batching.to_device(b, "cpu"), i) for b, i in self._pending],
            "last_indices": self._last_indices,
            "memory": self.memory.state_dict(),
            "stats": self.stats.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`; a saved state of a different sifting config is refused, naming the key."""
        mine = self.config.to_dict()
        for key, value in state["config"].items():
            if key in mine and mine[key] != value:
                raise ValueError(f"the saved loader state has sift {key}={value!r}, this loader {key}={mine[key]!r}")
        self.sifter.load_state_dict(state["sifter"])
        self.epoch = int(state["epoch"])
        self._raw_in_epoch = int(state["raw_in_epoch"])
        self.packer.load_state_dict(state["packer"])
        self.index_packer.load_state_dict(state["index_packer"])
        self._pending = [tuple(p) for p in state["pending"]]
        self._last_indices = state["last_indices"]
        self.memory.load_state_dict(state["memory"])
        self._resume_mid_epoch = self._raw_in_epoch > 0
        self.stats = SiftStats.from_dict(state["stats"])
        self.scorer.seconds = self.stats.scoring_seconds


def _model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _dataset_len(dataloader: Any) -> int | None:
    dataset = getattr(dataloader, "dataset", None)
    try:
        return len(dataset) if dataset is not None and getattr(dataloader, "drop_last", False) is False else None
    except TypeError:
        return None


def _set_epoch(dataloader: Any, epoch: int) -> None:
    """Tell a seeded or distributed sampler which epoch starts, so its order is reproducible."""
    for holder in (getattr(dataloader, "sampler", None), getattr(dataloader, "batch_sampler", None)):
        if holder is not None and hasattr(holder, "set_epoch"):
            holder.set_epoch(epoch)
            return
