"""What one run carries from step to step: the reference it was given, everything the loop changes (saved and
restored whole), and when the run ends."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from siftcli.recipe.schema import Recipe
from siftcli.sift.loader import BatchDecision
from siftcli.training.record import CurvePoint, ReferenceCost

PHASES = ("data", "scoring", "forward_backward", "optimizer", "evaluation", "checkpoint")
#: Phases off the training clock.
OFF_CLOCK = ("evaluation", "checkpoint")


TRACE_LIMIT = 20_000  # kept/rejected losses remembered for the histogram plot


@dataclass
class Reference:
    """Reference losses per training sample and their cost: ``seconds`` paid in this run (on its clock), and
    ``build_seconds``, what building them cost whoever built them (the same where this run built them; a run that
    found them cached pays only the read, and reports both, so a ratio can say which it uses)."""

    losses: torch.Tensor
    seconds: float
    build_seconds: float | None = None
    cached: bool = False
    kind: str = "cross-fit"
    key: str | None = None

    def summary(self) -> ReferenceCost:
        return {"kind": self.kind, "paid_seconds": self.seconds, "cached": self.cached, "key": self.key,
                "build_seconds": self.seconds if self.build_seconds is None else self.build_seconds}


@dataclass
class RunState:
    """Everything the loop changes, saved and restored whole (beside model, optimizer, loader and RNG)."""

    step: int = 0
    epoch: int = 0
    trained: int = 0
    train_clock: float = 0.0  # training wall-clock: data, scoring, steps (and a reference's cost); no eval
    earlier_seconds: float = 0.0  # total wall-clock of the processes before a resume
    phases: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    curve: list[CurvePoint] = field(default_factory=list)
    last_eval_clock: float = 0.0
    last_eval_step: int = -1
    keep_trace: list[list[int]] = field(default_factory=list)  # [raw batch, n, kept], for the keep-rate plot
    kept_losses: list[float] = field(default_factory=list)
    rejected_losses: list[float] = field(default_factory=list)
    noisy_kept: int = 0  # kept samples whose label data.label_noise flipped
    noisy_kept_after_delay: int = 0
    group_kept: list[int] = field(default_factory=list)  # kept samples per data.group_column value
    teacher_samples: int = 0  # distillation: teacher forwards, in samples (kept samples only when sifting)
    last_loss: float | None = None  # the mean training loss at the last log line (read from the device there only)

    def count_step(self, samples: int, taught: int) -> None:
        """One optimizer step on ``samples`` samples, ``taught`` of them by a teacher's forward (not cache hits). Its
        seconds reach the clock through :class:`~siftcli.training.clock.RunClock`."""
        self.teacher_samples += taught
        self.step += 1
        self.trained += samples

    def record(self, d: BatchDecision, noisy: torch.Tensor | None = None, groups: torch.Tensor | None = None) -> None:
        """Batch hook: the keep trace, a sample of kept and rejected losses, kept noisy labels and kept samples per group."""
        self.keep_trace.append([len(self.keep_trace), int(d.mask.numel()), int(d.mask.sum())])
        if d.losses is not None and not d.delayed and len(self.kept_losses) + len(self.rejected_losses) < TRACE_LIMIT:
            self.kept_losses.extend(d.losses[d.mask].tolist())
            self.rejected_losses.extend(d.losses[~d.mask].tolist())
        if noisy is not None and d.indices is not None:
            flipped = int(noisy[d.indices][d.mask].sum())
            self.noisy_kept += flipped
            self.noisy_kept_after_delay += 0 if d.delayed else flipped
        if groups is not None and d.indices is not None:
            counts = torch.bincount(groups[d.indices][d.mask], minlength=int(groups.max()) + 1).tolist()
            self.group_kept = [a + b for a, b in zip(self.group_kept or [0] * len(counts), counts)]


@dataclass
class Budget:
    """When the run ends and how far along it is (the learning-rate schedule's clock).

    Whole epochs end when the loader runs dry (so sifted remainders are trained on); a fractional last epoch ends on its
    raw-sample budget, a step cap on its step, a seconds cap (the equal-time opponent: the seconds of the arm it is held
    against) when the training clock reaches it. Progress follows whichever cap is set, so the schedule is fully
    decayed exactly where the run ends.
    """

    epochs: int
    total_raw: int
    fractional: bool
    max_steps: int | None
    max_seconds: float | None = None

    @classmethod
    def of(cls, recipe: Recipe, n_train: int) -> Budget:
        return cls(math.ceil(recipe.epochs), max(1, math.ceil(recipe.epochs * n_train)), recipe.epochs != math.ceil(recipe.epochs),
                   recipe.max_steps, recipe.max_seconds)

    def progress(self, step: int, raw: int, seconds: float = 0.0) -> float:
        if self.max_seconds:
            return seconds / self.max_seconds
        return step / self.max_steps if self.max_steps else raw / self.total_raw

    def full_progress(self, raw: int) -> float:
        """How far the run is along the full schedule (its raw samples over the full run's), whatever cap ends it: the
        ``wsd`` schedule's warm-up clock, so a capped run warms up as the full one does."""
        return raw / self.total_raw

    def done(self, step: int, raw: int) -> bool:
        """The step or sample budget is spent (the same on every rank)."""
        return (self.max_steps is not None and step >= self.max_steps) or (self.fractional and raw >= self.total_raw)

    def out_of_time(self, seconds: float) -> bool:
        """The seconds budget is spent on this process's clock (under torchrun the loop agrees it across ranks)."""
        return self.max_seconds is not None and seconds >= self.max_seconds
