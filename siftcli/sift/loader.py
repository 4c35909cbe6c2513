"""``SiftingDataLoader``: wraps a ``DataLoader`` and yields full batches of kept samples."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from siftcli.sift import batching
from siftcli.sift.losses import PerSampleLoss
from siftcli.sift.sifter import SiftConfig, Sifter


class _KeepFractions:
    """Kept fractions from the counters both stats classes carry."""

    kept_samples: int
    raw_samples: int
    sifted_kept_samples: int
    sifted_raw_samples: int

    @property
    def kept_fraction(self) -> float:
        """Kept over raw, delay included."""
        return _fraction(self.kept_samples, self.raw_samples)

    @property
    def sifted_kept_fraction(self) -> float:
        """Kept over raw after the delay: the number to hold against the target."""
        return _fraction(self.sifted_kept_samples, self.sifted_raw_samples)


def _fraction(part: int, whole: int) -> float:
    return part / whole if whole else float("nan")


@dataclass
class EpochStats(_KeepFractions):
    epoch: int
    raw_samples: int = 0
    kept_samples: int = 0
    sifted_raw_samples: int = 0  # raw samples seen after the delay, where the target applies
    sifted_kept_samples: int = 0
    batches: int = 0


@dataclass
class SiftStats(_KeepFractions):
    """What the loader did, so the achieved keep rate is never hidden."""

    target_keep_fraction: float
    raw_samples: int = 0
    scored_samples: int = 0
    kept_samples: int = 0
    sifted_raw_samples: int = 0
    sifted_kept_samples: int = 0
    batches: int = 0
    nonfinite: int = 0
    scoring_seconds: float = 0.0
    data_wait_seconds: float = 0.0
    packing_seconds: float = 0.0
    epochs: list[EpochStats] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kept_fraction"] = self.kept_fraction
        out["sifted_kept_fraction"] = self.sifted_kept_fraction
        for e, es in zip(out["epochs"], self.epochs):
            e["kept_fraction"] = es.kept_fraction
            e["sifted_kept_fraction"] = es.sifted_kept_fraction
        return out


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
    ) -> None:
        self.dataloader = dataloader
        self.model = model
        self.loss_fn = loss_fn
        self.config = config or SiftConfig()
        self.batch_size = int(batch_size or getattr(dataloader, "batch_size", None) or 0)
        if self.batch_size < 1:
            raise ValueError("batch_size is unknown: pass batch_size= or wrap a DataLoader that has one")
        self.device = torch.device(device) if device is not None else _model_device(model)
        if precision not in ("fp32", "bf16", "fp16", "auto"):
            raise ValueError(f"precision must be fp32, bf16, fp16 or auto, got {precision!r}")
        self.precision = scoring_precision(precision, self.device, "fp32")
        self.batch_transform = batch_transform
        self.pad_values = {**batching.DEFAULT_PAD_VALUES, **(pad_values or {})}
        self.padding_side = padding_side
        self.yield_on_device = yield_on_device
        self.sifter = Sifter(self.config)
        self.stats = SiftStats(target_keep_fraction=self.config.target_keep_fraction)
        self.epoch = 0
        self._raw_in_epoch = 0
        self._buffer: list[Any] = []
        self._buffered = 0
        self._pending: list[Any] = []  # full batches packed from one raw batch, not yet yielded
        self._resume_mid_epoch = False
        self._active = False  # a pass is under way (set by __iter__, cleared when it runs to the end)
        self._on_batch: list[Callable[[Any, torch.Tensor, torch.Tensor | None], None]] = []

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

    def add_batch_hook(self, hook: Callable[[Any, torch.Tensor, torch.Tensor | None], None]) -> None:
        """Call ``hook(raw_batch, keep_mask, losses)`` for every raw batch (for logging or plots)."""
        self._on_batch.append(hook)

    def __iter__(self) -> Iterator[Any]:
        if self._active and not self._resume_mid_epoch:
            # The caller stopped the previous pass early (the HF Trainer stops after len()
            # batches): that epoch is over, and what it left buffered is dropped.
            self.epoch += 1
            self.sifter.start_epoch()
        self._active = True
        if not self._resume_mid_epoch:
            self.sifter.start_epoch()
            self._raw_in_epoch = 0
            self._buffer, self._buffered, self._pending = [], 0, []
        skip = self._raw_in_epoch
        self._resume_mid_epoch = False
        _set_epoch(self.dataloader, self.epoch)
        epoch_stats = self._epoch_stats()
        source = iter(self.dataloader)
        for _ in range(skip):  # resume: replay the order, not the decisions
            next(source)
        while self._pending:  # batches packed but not yet yielded when the state was saved
            yield self._emit(self._pending.pop(0), epoch_stats)
        while True:
            t0 = time.perf_counter()
            try:
                raw = next(source)
            except StopIteration:
                break
            self.stats.data_wait_seconds += time.perf_counter() - t0
            if self.batch_transform is not None:
                raw = self.batch_transform(raw)
            n = batching.batch_size(raw)
            delayed = self.sifter.in_delay
            losses = self._score(raw) if self.sifter.wants_scores(n) else None
            mask = self.sifter.decide(losses, n)
            if not delayed:
                mask = self._agree_across_ranks(mask)
            kept = int(mask.sum())
            self._raw_in_epoch += 1
            self._count(epoch_stats, n, kept, delayed, losses is not None)
            for hook in self._on_batch:
                hook(raw, mask, losses)
            t1 = time.perf_counter()
            if kept == n and not self._buffer and n == self.batch_size:
                out: list[Any] = [raw]  # fast path: nothing dropped, nothing pending
            else:
                if kept:
                    part = raw if kept == n else batching.select(raw, mask.nonzero().flatten())
                    self._buffer.append(part)
                    self._buffered += kept
                out = self._drain(full_only=True)
            self.stats.packing_seconds += time.perf_counter() - t1
            self._pending = out
            while self._pending:  # popped before yielding, so a checkpoint between yields loses nothing
                yield self._emit(self._pending.pop(0), epoch_stats)
        self._pending = self._drain(full_only=False)
        while self._pending:
            yield self._emit(self._pending.pop(0), epoch_stats)
        self.epoch += 1
        self.sifter.start_epoch()
        self._raw_in_epoch = 0
        self._active = False

    # -- internals -----------------------------------------------------------------------
    def _epoch_stats(self) -> EpochStats:
        if not self.stats.epochs or self.stats.epochs[-1].epoch != self.epoch:
            self.stats.epochs.append(EpochStats(epoch=self.epoch))
        return self.stats.epochs[-1]

    def _count(self, es: EpochStats, n: int, kept: int, delayed: bool, scored: bool) -> None:
        s = self.stats
        s.raw_samples += n
        s.kept_samples += kept
        s.scored_samples += n if scored else 0
        s.nonfinite = self.sifter.nonfinite
        es.raw_samples += n
        es.kept_samples += kept
        if not delayed:
            s.sifted_raw_samples += n
            s.sifted_kept_samples += kept
            es.sifted_raw_samples += n
            es.sifted_kept_samples += kept

    def _emit(self, batch: Any, es: EpochStats) -> Any:
        self.stats.batches += 1
        es.batches += 1
        return batching.to_device(batch, self.device) if self.yield_on_device else batch

    def _drain(self, full_only: bool) -> list[Any]:
        """Pop full batches from the buffer (and, at epoch end, the remainder)."""
        if not self._buffer or (full_only and self._buffered < self.batch_size):
            return []
        packed = batching.concat(self._buffer, self.pad_values, self.padding_side)
        out = []
        while packed is not None and self._buffered >= self.batch_size:
            head, packed = batching.split(packed, self.batch_size)
            out.append(batching.trim_padding(head, self.padding_side))
            self._buffered -= self.batch_size
        if packed is not None and not full_only:
            out.append(batching.trim_padding(packed, self.padding_side))
            packed, self._buffered = None, 0
        self._buffer = [packed] if packed is not None else []
        return out

    def _score(self, raw: Any) -> torch.Tensor:
        """Per-sample losses from a gradient-free forward; the model's train/eval flags are restored exactly."""
        t0 = time.perf_counter()
        model = self.model
        flags = [(m, m.training) for m in model.modules()]
        model.eval()
        try:
            batch = batching.to_device(raw, self.device)
            with torch.inference_mode(), _autocast(self.device, self.precision):
                losses = self.loss_fn(model, batch)
            if not isinstance(losses, torch.Tensor):
                raise TypeError(f"the loss function must return a Tensor of per-sample losses, got {type(losses).__name__}")
            losses = losses.detach().float().flatten().cpu()
        finally:
            for module, flag in flags:
                module.training = flag
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.stats.scoring_seconds += time.perf_counter() - t0
        return losses

    def _agree_across_ranks(self, mask: torch.Tensor) -> torch.Tensor:
        """Under ``torch.distributed`` every rank keeps the smallest count any rank chose.

        Ranks sift different data, so left alone they would yield different numbers of
        batches and DDP's gradient all-reduce would wait forever on the rank that ran dry.
        Equal counts per raw batch keep buffers, and so batch counts, equal on every rank
        (given equal raw batches per rank, as ``DistributedSampler`` provides).
        """
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return mask
        if torch.distributed.get_world_size() < 2:
            return mask
        dist = torch.distributed
        device = self.device if dist.get_backend() == "nccl" else torch.device("cpu")
        count = torch.tensor([int(mask.sum())], device=device)
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        k = int(count.item())
        kept = mask.nonzero().flatten()
        if kept.numel() > k:
            drop = kept[torch.randperm(kept.numel(), generator=self.sifter.generator)[: kept.numel() - k]]
            mask = mask.clone()
            mask[drop] = False
        return mask

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue mid-epoch with the same decisions."""
        return {
            "config": self.config.to_dict(),
            "sifter": self.sifter.state_dict(),
            "epoch": self.epoch,
            "raw_in_epoch": self._raw_in_epoch,
            "buffer": [batching.to_device(b, "cpu") for b in self._buffer],
            "buffered": self._buffered,
            "pending": [batching.to_device(b, "cpu") for b in self._pending],
            "stats": self.stats.to_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sifter.load_state_dict(state["sifter"])
        self.epoch = int(state["epoch"])
        self._raw_in_epoch = int(state["raw_in_epoch"])
        self._buffer = list(state["buffer"])
        self._buffered = int(state["buffered"])
        self._pending = list(state.get("pending", []))
        self._resume_mid_epoch = self._raw_in_epoch > 0
        self.stats = _stats_from_dict(state["stats"])


def _stats_from_dict(d: dict[str, Any]) -> SiftStats:
    fields = {k: v for k, v in d.items() if k in SiftStats.__dataclass_fields__ and k != "epochs"}
    stats = SiftStats(**fields)
    for e in d.get("epochs", []):
        stats.epochs.append(EpochStats(**{k: v for k, v in e.items() if k in EpochStats.__dataclass_fields__}))
    return stats


def fast_bf16(device: torch.device) -> bool:
    """Whether ``device`` runs bf16 matmuls natively (CUDA with bf16, CPUs with AVX512-BF16 or AMX).

    Elsewhere bf16 is emulated and slower than fp32, so ``auto`` must not pick it.
    """
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "cpu":
        probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)
    return False


def scoring_precision(requested: str | None, device: torch.device, train_precision: str) -> str:
    """The precision the scoring forward runs in: ``auto`` (or ``None``) means bf16 where it is fast.

    Scoring only ranks losses, so bf16 rounding does not change which samples are kept in any
    way that matters, while it cuts the scoring cost s that every saving is bounded by.
    """
    if requested in (None, "auto"):
        return "bf16" if fast_bf16(device) else train_precision
    return requested


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


def _autocast(device: torch.device, precision: str) -> contextlib.AbstractContextManager:
    if precision == "fp32":
        return contextlib.nullcontext()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)
