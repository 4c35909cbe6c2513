"""The one stateful piece of sifting: loss history, delay counter and seeded generator."""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Literal

import torch

from siftcli.sift import algorithm

Mode = Literal["probabilistic", "calibrated", "random", "all"]
Score = Literal["loss", "reducible"]
MODES = ("probabilistic", "calibrated", "random", "all")


@dataclass
class SiftConfig:
    """How to sift. Same meanings as SageMaker smart sifting's ``RelativeProbabilisticSiftConfig``.

    - ``beta``: keep probability is ``percentile ** beta``; about ``1/(1+beta)`` is kept.
    - ``loss_history_length``: how many recent losses a new loss is ranked against.
    - ``sift_delay``: raw batches trained on in full before sifting starts (the model must
      have learned something for its losses to mean anything).
    - ``repeat_delay_per_epoch``: apply the delay again at the start of every epoch.
    - ``mode``: ``probabilistic`` draws each sample independently (SageMaker's rule; the rate
      drifts below target as losses fall); ``calibrated`` keeps exactly ``1/(1+beta)`` of each
      raw batch, drawn with ``percentile ** beta`` weights, so the time saved is predictable.
    - ``random``: the control arm of an honest comparison: keeps exactly ``keep_fraction`` of each raw
      batch after the delay, chosen uniformly at random, with no scoring; the gap between a sifted run
      and this one is the value of *selection* itself. ``all`` keeps everything (the baseline).
    - ``score``: what is ranked: ``loss``, or ``reducible`` (loss minus a reference model's loss on the
      same sample; the loader needs ``reference_losses`` and sample indices).
    - ``keep_fraction``: the kept fraction for ``calibrated`` and ``random`` instead of ``1/(1+beta)``.
    - ``scoring``: ``fresh`` runs a scoring forward on every raw batch; ``memory`` decides samples
      whose loss is remembered (from the training forward or an earlier scoring pass, see
      :mod:`siftcli.sift.memory`) without one, and scores only the unknown ones.
    - ``memory_max_age``: with ``memory``, a remembered loss older than this many epochs is scored
      again (default 1: at least every other epoch). ``None`` never rescores, which is unsafe: a
      sample never kept keeps its first score, often from a model that had learnt nothing yet.
    - ``seed``: seeds the generator behind every keep decision.
    """

    beta: float = 1.0
    loss_history_length: int = 500
    sift_delay: int = 0
    repeat_delay_per_epoch: bool = False
    mode: Mode = "probabilistic"
    score: Score = "loss"
    keep_fraction: float | None = None
    scoring: Literal["fresh", "memory"] = "fresh"
    memory_max_age: int | None = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"beta must be a positive number, got {self.beta!r}")
        if int(self.loss_history_length) < 1:
            raise ValueError(f"loss_history_length must be at least 1, got {self.loss_history_length!r}")
        if int(self.sift_delay) < 0:
            raise ValueError(f"sift_delay must be 0 or more, got {self.sift_delay!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.score not in ("loss", "reducible"):
            raise ValueError(f"score must be 'loss' or 'reducible', got {self.score!r}")
        if self.scoring not in ("fresh", "memory"):
            raise ValueError(f"scoring must be 'fresh' or 'memory', got {self.scoring!r}")
        if self.memory_max_age is not None and int(self.memory_max_age) < 0:
            raise ValueError(f"memory_max_age must be 0 or more epochs, got {self.memory_max_age!r}")
        if self.keep_fraction is not None and not 0 < self.keep_fraction <= 1:
            raise ValueError(f"keep_fraction must be in (0, 1], got {self.keep_fraction!r}")

    @property
    def target_keep_fraction(self) -> float:
        if self.mode == "all":
            return 1.0
        if self.keep_fraction is not None:
            return float(self.keep_fraction)
        return algorithm.target_keep_fraction(self.beta)

    @property
    def needs_scores(self) -> bool:
        """Whether this rule ranks anything (``random`` and ``all`` never run a scoring forward)."""
        return self.mode in ("probabilistic", "calibrated")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sifter:
    """Decides, batch by batch, which samples to keep.

    Holds a ring buffer of the last ``loss_history_length`` finite losses, counts raw
    batches for the delay, and draws from its own seeded ``torch.Generator`` so decisions
    are reproducible and can be saved and restored with :meth:`state_dict`.
    """

    def __init__(self, config: SiftConfig) -> None:
        self.config = config
        self.generator = torch.Generator().manual_seed(int(config.seed))
        self._ring = torch.zeros(int(config.loss_history_length))
        self._filled = 0
        self._pos = 0
        self.steps = 0  # raw batches decided, all epochs
        self.epoch_steps = 0  # raw batches decided this epoch
        self.carry = 0.0  # calibrated mode: fractional sample owed to the next batch
        self.nonfinite = 0
        self._warned_nonfinite = False

    # -- delay -------------------------------------------------------------------------
    def start_epoch(self) -> None:
        self.epoch_steps = 0

    def _delay_counter(self) -> int:
        return self.epoch_steps if self.config.repeat_delay_per_epoch else self.steps

    @property
    def in_delay(self) -> bool:
        return self._delay_counter() < self.config.sift_delay

    def wants_scores(self, batch_size: int) -> bool:
        """Whether the next raw batch must be scored.

        During the delay only the last batches before sifting starts are scored: enough
        to fill the history, so the delay costs no scoring forwards beyond that.
        """
        if not self.config.needs_scores:
            return False
        if not self.in_delay:
            return True
        fill_steps = math.ceil(self.config.loss_history_length / max(1, batch_size))
        return self.config.sift_delay - self._delay_counter() <= fill_steps

    # -- history -------------------------------------------------------------------------
    @property
    def history(self) -> torch.Tensor:
        return self._ring[: self._filled] if self._filled < self._ring.numel() else self._ring

    def _remember(self, losses: torch.Tensor) -> None:
        losses = losses[torch.isfinite(losses)].float().cpu()
        cap = self._ring.numel()
        if losses.numel() >= cap:
            self._ring.copy_(losses[-cap:])
            self._pos, self._filled = 0, cap
            return
        end = self._pos + losses.numel()
        if end <= cap:
            self._ring[self._pos:end] = losses
        else:
            first = cap - self._pos
            self._ring[self._pos:] = losses[:first]
            self._ring[: end - cap] = losses[first:]
        self._pos = end % cap
        self._filled = min(cap, self._filled + losses.numel())

    # -- decisions -----------------------------------------------------------------------
    def decide(self, losses: torch.Tensor | None, n: int) -> torch.Tensor:
        """Boolean keep-mask for a raw batch of ``n`` samples from their scores (``None`` in the delay or without scoring)."""
        if losses is not None:
            losses = losses.detach().float().flatten().cpu()
            if losses.numel() != n:
                raise ValueError(f"the loss function returned {losses.numel()} losses for a batch of {n} samples")
        delayed = self.in_delay
        self.steps += 1
        self.epoch_steps += 1
        if delayed or self.config.mode == "all":
            if losses is not None:
                self._remember(losses)
            return torch.ones(n, dtype=torch.bool)
        if self.config.mode == "random":
            k, self.carry = algorithm.calibrated_count(n, self.config.target_keep_fraction, self.carry)
            return algorithm.sample_keep_count(torch.ones(n), k, self.generator)
        if losses is None:
            raise ValueError(f"mode {self.config.mode!r} needs the batch's scores after the delay")
        finite = torch.isfinite(losses)
        bad = int((~finite).sum())
        if bad:
            self.nonfinite += bad
            if not self._warned_nonfinite:
                self._warned_nonfinite = True
                warnings.warn(
                    f"siftcli: {bad} sample(s) had a NaN or Inf loss in the scoring pass; they are kept "
                    "for training and counted in stats.nonfinite (further occurrences are not reported)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        pct = algorithm.percentiles(losses.nan_to_num(posinf=0.0, neginf=0.0), self.history)
        prob = algorithm.keep_probability(pct, self.config.beta)
        if self.config.mode == "calibrated":
            k, self.carry = algorithm.calibrated_count(n, self.config.target_keep_fraction, self.carry)
            prob = torch.where(finite, prob, torch.zeros_like(prob))
            mask = algorithm.sample_keep_count(prob, max(0, k - bad), self.generator)
        else:
            mask = algorithm.sample_keep(prob, self.generator)
        mask |= ~finite
        self._remember(losses)
        return mask

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "ring": self._ring.clone(),
            "filled": self._filled,
            "pos": self._pos,
            "steps": self.steps,
            "epoch_steps": self.epoch_steps,
            "carry": self.carry,
            "nonfinite": self.nonfinite,
            "generator": self.generator.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        ring = state["ring"].float()
        if ring.numel() != self._ring.numel():
            raise ValueError(
                f"saved loss history holds {ring.numel()} values but loss_history_length is {self._ring.numel()}"
            )
        self._ring = ring.clone()
        self._filled = int(state["filled"])
        self._pos = int(state["pos"])
        self.steps = int(state["steps"])
        self.epoch_steps = int(state["epoch_steps"])
        self.carry = float(state["carry"])
        self.nonfinite = int(state.get("nonfinite", 0))
        self.generator.set_state(state["generator"])
