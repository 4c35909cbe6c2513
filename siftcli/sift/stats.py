"""What the loader did, counted so the achieved keep rate is never hidden."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from siftcli.sift.stateful import StateDict


@dataclass
class BatchDecision:
    """What happened to one raw batch, as batch hooks see it."""

    raw: Any
    mask: torch.Tensor  # kept samples
    losses: torch.Tensor | None  # scoring-forward losses (None when the batch was not scored)
    scores: torch.Tensor | None  # what was ranked: the losses, or the reducible losses
    indices: torch.Tensor | None  # dataset indices, where the loader could tell them
    delayed: bool  # kept whole by the schedule: inside the sift delay or the anneal
    scored: int = 0  # samples that went through a scoring forward (the rest, if losses is set, came from memory)
    weights: torch.Tensor | None = None  # per-sample loss weights of the rule (None: all ones)


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


def add_counts(a: list[int], b: list[int]) -> list[int]:
    """Two histograms of counts by bucket, summed bucket by bucket (the shorter padded with zeros)."""
    return [x + y for x, y in zip(a + [0] * (len(b) - len(a)), b + [0] * (len(a) - len(b)))]


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
    scored_samples: int = 0
    memory_samples: int = 0


@dataclass
class SiftStats(_KeepFractions):
    """Counters and timers of one loader over all epochs (restored whole on resume)."""

    target_keep_fraction: float
    raw_samples: int = 0
    scored_samples: int = 0  # samples that went through a scoring forward
    memory_samples: int = 0  # samples decided from remembered losses, without one
    kept_samples: int = 0
    sifted_raw_samples: int = 0
    sifted_kept_samples: int = 0
    batches: int = 0
    nonfinite: int = 0
    dropped_to_sync: int = 0  # kept samples dropped at an epoch's end so every rank yields as many batches
    scoring_seconds: float = 0.0
    data_wait_seconds: float = 0.0
    packing_seconds: float = 0.0
    sift_started_at: int | None = None  # raw batch at which sifting started (delay over)
    anneal_started_at: int | None = None  # raw batch from which everything was kept again (anneal_fraction)
    epochs: list[EpochStats] = field(default_factory=list)
    # how stale the scores that decided were: score_ages[a] samples ranked by a loss recorded a epochs earlier (the last
    # bucket: that or older), score_unknown by none yet (kept to learn it)
    score_ages: list[int] = field(default_factory=list)
    score_unknown: int = 0
    kept_overlap: list[float] = field(default_factory=list)  # Jaccard overlap of consecutive epochs' kept sets (sifted batches)

    def count_ages(self, ages: torch.Tensor, top: int = 10) -> None:
        """Ages in epochs (negative: never recorded) of the scores behind one ranked raw batch."""
        known = ages[ages >= 0].clamp(max=top)
        self.score_unknown += int((ages < 0).sum())
        self.score_ages = add_counts(self.score_ages, torch.bincount(known).tolist())

    def epoch_stats(self, epoch: int) -> EpochStats:
        """The counters of ``epoch``, opened on first use."""
        if not self.epochs or self.epochs[-1].epoch != epoch:
            self.epochs.append(EpochStats(epoch=epoch))
        return self.epochs[-1]

    def count(self, epoch: int, n: int, kept: int, delayed: bool, scored: int, from_memory: int = 0) -> None:
        """One raw batch of ``n`` samples of which ``kept`` survived, ``scored`` by a forward, ``from_memory`` not."""
        es = self.epoch_stats(epoch)
        for s in (self, es):
            s.scored_samples += scored
            s.memory_samples += from_memory
            s.raw_samples += n
            s.kept_samples += kept
            if not delayed:
                s.sifted_raw_samples += n
                s.sifted_kept_samples += kept

    def follow(self, sifter: Any, scoring_seconds: float) -> None:
        """After a decision: the sifter's counters (non-finite losses, when sifting started, when the anneal began)."""
        self.nonfinite = sifter.nonfinite
        self.scoring_seconds = scoring_seconds
        self.sift_started_at = sifter.started_at
        anneal = sifter.anneal_start
        if anneal is not None and sifter.steps > anneal:  # the batch just decided was inside the anneal
            self.anneal_started_at = anneal

    def count_batch(self, epoch: int, n: int = 1) -> None:
        """A batch yielded to the training loop (``n`` -1: one taken back, to be yielded again)."""
        self.batches += n
        self.epoch_stats(epoch).batches += n

    def to_dict(self) -> StateDict:
        out = asdict(self)
        out["kept_fraction"] = self.kept_fraction
        out["sifted_kept_fraction"] = self.sifted_kept_fraction
        for e, es in zip(out["epochs"], self.epochs):
            e["kept_fraction"] = es.kept_fraction
            e["sifted_kept_fraction"] = es.sifted_kept_fraction
        return out

    @classmethod
    def from_dict(cls, d: StateDict) -> SiftStats:
        stats = cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__ and k != "epochs"})
        for e in d.get("epochs", []):
            stats.epochs.append(EpochStats(**{k: v for k, v in e.items() if k in EpochStats.__dataclass_fields__}))
        return stats

    def load_state_dict(self, d: StateDict) -> None:
        """:meth:`to_dict`'s counters put back in place (the loader's parts hold this object)."""
        vars(self).update(vars(SiftStats.from_dict(d)))


class KeptOverlap:
    """Which samples sifted batches kept this epoch and in the last epoch that kept any: a stale score repeats itself,
    so the overlap of consecutive kept sets says how stale the scores were."""

    def __init__(self) -> None:
        self.now: set[int] = set()
        self.before: set[int] = set()

    def add(self, indices: list[int]) -> None:
        self.now.update(indices)

    def close_epoch(self) -> float | None:
        """At an epoch's end: the Jaccard overlap of its kept set with the last one (``None``: nothing to compare)."""
        overlap = None
        if self.now:
            if self.before:
                overlap = len(self.now & self.before) / len(self.now | self.before)
            self.before = self.now
        self.now = set()
        return overlap

    def state_dict(self) -> list[list[int]]:
        return [sorted(self.now), sorted(self.before)]

    def load_state_dict(self, state: list[list[int]]) -> None:
        self.now, self.before = (set(k) for k in state)
