"""The one stateful piece of sifting: loss history, delay counter and seeded generator."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Literal

import torch

from siftcli.sift import algorithm
from siftcli.sift.losses import UNCERTAINTY
from siftcli.sift.stateful import StateDict

Mode = Literal["probabilistic", "calibrated", "infobatch", "random", "all"]
Score = Literal["loss", "reducible", "reference", "entropy", "margin"]
SCORES = ("loss", "reducible", "reference", "entropy", "margin")
#: Scores that rank against a reference model's per-sample losses (the loader needs them, and sample indices).
REFERENCE_SCORES = ("reducible", "reference")
MODES = ("probabilistic", "calibrated", "infobatch", "random", "all")
#: With ``sift_delay="auto"``, one raw batch in this many is scored during the delay: it measures the
#: scoring cost ``s`` (the start rule needs it) and, for loops that do not call ``record()``, the gain.
PROBE_EVERY = 8
#: The longest loss history (a ring of float32: 40 MB at this length), as a recipe allows.
MAX_HISTORY = 10_000_000
#: Smoothing of the per-batch gain estimate (an exponential moving average over raw batches).
GAIN_SMOOTHING = 0.1


@dataclass
class SiftConfig:
    """How to sift. Same meanings as SageMaker smart sifting's ``RelativeProbabilisticSiftConfig``.

    - ``beta``: keep probability is ``percentile ** beta``; about ``1/(1+beta)`` is kept.
    - ``loss_history_length``: how many recent losses a new loss is ranked against.
    - ``sift_delay``: raw batches trained on in full before sifting starts (the model must
      have learned something for its losses to mean anything), or ``"auto"``: start when the loss
      spread says selection pays for its scoring, ``E[l^2]/E[l]^2 > 1 + s/a`` (see
      :func:`~siftcli.sift.algorithm.importance_gain` and :func:`~siftcli.sift.algorithm.start_threshold`);
      the raw batch it started at is :attr:`Sifter.started_at`.
    - ``repeat_delay_per_epoch``: apply the delay again at the start of every epoch.
    - ``mode``: ``probabilistic`` draws each sample independently (SageMaker's rule; the rate
      drifts below target as losses fall); ``calibrated`` keeps exactly ``1/(1+beta)`` of each
      raw batch, drawn with ``percentile ** beta`` weights, so the time saved is predictable.
    - ``random``: the control arm of an honest comparison: keeps exactly ``keep_fraction`` of each raw
      batch after the delay, chosen uniformly at random, with no scoring; the gap between a sifted run
      and this one is the value of *selection* itself. ``all`` keeps everything (the baseline).
    - ``infobatch``: InfoBatch's unbiased rule: a sample scoring below the history's mean is dropped
      with probability ``prune_fraction`` and the low-score samples kept weigh ``1/(1-prune_fraction)``
      in the loss (:func:`~siftcli.sift.algorithm.infobatch_keep`); the loader hands the weights out.
    - ``anneal_fraction``: the last fraction of the run (in raw batches; the loader must be told the
      number of epochs) keeps everything, with every rule (InfoBatch's full-data finish).
    - ``score``: what is ranked: ``loss``; ``reducible`` (loss minus a reference model's loss on the
      same sample; the loader needs ``reference_losses`` and sample indices); or ``reference``: minus the
      reference's loss alone (a reference trained toward the target keeps what it finds learnable and relevant),
      which needs no scoring forward at all: every raw batch is decided at the sampler; ``entropy`` or ``margin``: the
      model's own uncertainty (:class:`~siftcli.sift.losses.Uncertainty`), which needs no label (distillation from
      unlabelled data; training losses never enter its memory or history).
    - ``keep_fraction``: the kept fraction for ``calibrated`` and ``random`` instead of ``1/(1+beta)``.
    - ``scoring``: ``fresh`` runs a scoring forward on every raw batch; ``memory`` decides samples
      whose loss is remembered (from the training forward or an earlier scoring pass, see
      :mod:`siftcli.sift.memory`) without one, and scores only the unknown ones.
    - ``memory_max_age``: with ``memory``, a remembered loss older than this many epochs is scored
      again (default 1: at least every other epoch). ``None`` never rescores, which is unsafe: a
      sample never kept keeps its first score, often from a model that had learnt nothing yet.
    - ``memory_refresh``: how a stale or unknown remembered loss is renewed. ``score``: by a scoring forward (eval
      mode; the memory then mixes two sources). ``train``: by keeping the sample, so the training forward renews it;
      no scoring forward ever runs, every ranked score comes from the training forward (one source), and every sample
      is trained at least once every ``memory_max_age + 1`` epochs (the first epoch trains everything).
    - ``seed``: seeds the generator behind every keep decision.
    """

    beta: float = 1.0
    loss_history_length: int = 500
    sift_delay: int | Literal["auto"] = 0
    repeat_delay_per_epoch: bool = False
    mode: Mode = "probabilistic"
    score: Score = "loss"
    keep_fraction: float | None = None
    prune_fraction: float = 0.5
    anneal_fraction: float = 0.0
    scoring: Literal["fresh", "memory"] = "fresh"
    memory_max_age: int | None = 1
    memory_refresh: Literal["score", "train"] = "score"
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.beta, bool) or not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta)
                                               and self.beta > 0):
            raise ValueError(f"beta must be a positive number, got {self.beta!r}")
        for name in ("keep_fraction", "prune_fraction", "anneal_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or (value is not None and not isinstance(value, numbers.Real)):
                raise ValueError(f"{name} must be a number (a share of the samples), got {value!r}")
        length = self.loss_history_length
        if isinstance(length, bool) or not isinstance(length, numbers.Integral) or not 1 <= length <= MAX_HISTORY:
            raise ValueError(f"loss_history_length must be a whole number from 1 to {MAX_HISTORY:,} (recent losses a new "
                             f"one is ranked against; 500 by default), got {length!r}")
        if self.sift_delay == "auto":
            if self.repeat_delay_per_epoch:
                raise ValueError("sift_delay='auto' starts sifting once; it cannot repeat every epoch")
        elif isinstance(self.sift_delay, str) or int(self.sift_delay) < 0:
            raise ValueError(f"sift_delay must be 0 or more raw batches, or 'auto', got {self.sift_delay!r}")
        if not 0 <= self.prune_fraction < 1:
            raise ValueError(f"prune_fraction must be in [0, 1), got {self.prune_fraction!r}")
        if not 0 <= self.anneal_fraction < 1:
            raise ValueError(f"anneal_fraction must be in [0, 1), got {self.anneal_fraction!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.score not in SCORES:
            raise ValueError(f"score must be one of {', '.join(SCORES)}, got {self.score!r}")
        if self.scoring not in ("fresh", "memory"):
            raise ValueError(f"scoring must be 'fresh' or 'memory', got {self.scoring!r}")
        if self.memory_max_age is not None and int(self.memory_max_age) < 0:
            raise ValueError(f"memory_max_age must be 0 or more epochs, got {self.memory_max_age!r}")
        if self.memory_refresh not in ("score", "train"):
            raise ValueError(f"memory_refresh must be 'score' or 'train', got {self.memory_refresh!r}")
        if self.memory_refresh == "train" and (self.memory_max_age is None or self.score in UNCERTAINTY):
            raise ValueError("memory_refresh='train' renews losses by training: it needs a memory_max_age, and a score "
                             "the training forward gives (loss or reducible, not entropy or margin)")
        if self.keep_fraction is not None and not 0 < self.keep_fraction <= 1:
            raise ValueError(f"keep_fraction must be in (0, 1], got {self.keep_fraction!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be a whole number, 0 or more (it seeds the keep decisions), got {self.seed!r}")

    @property
    def target_keep_fraction(self) -> float:
        if self.mode == "all":
            return 1.0
        if self.mode == "infobatch":  # nominal: about half the samples score below the mean
            return 1.0 - self.prune_fraction / 2
        if self.keep_fraction is not None and self.mode in ("calibrated", "random"):  # the modes it is documented for
            return float(self.keep_fraction)
        return algorithm.target_keep_fraction(self.beta)

    @property
    def uses_reference(self) -> bool:
        """Whether the rule ranks against reference losses (:data:`REFERENCE_SCORES`)."""
        return self.score in REFERENCE_SCORES

    @property
    def needs_scores(self) -> bool:
        """Whether this rule ranks anything (``random`` and ``all`` never run a scoring forward)."""
        return self.mode in ("probabilistic", "calibrated", "infobatch")

    @property
    def auto_delay(self) -> bool:
        return self.sift_delay == "auto"

    def to_dict(self) -> StateDict:
        return asdict(self)


class Sifter:
    """Decides, batch by batch, which samples to keep.

    Holds a ring buffer of the last ``loss_history_length`` finite losses, counts raw
    batches for the delay and the anneal, and draws from its own seeded ``torch.Generator``
    so decisions are reproducible and can be saved and restored with :meth:`state_dict`.
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
        self.total_steps: int | None = None  # raw batches in the whole run, where known (the anneal needs it)
        self.started_at: int | None = None  # raw batch at which sifting started (None: not yet)
        self.gain = 1.0  # smoothed importance_gain of the losses seen in the delay
        self.gain_samples = 0
        # under torch.distributed: returns every rank's values (the loader sets it), so the history is global;
        # observed losses wait in _unshared for the next decision, which every rank makes at the same point
        self.share: Callable[[torch.Tensor], torch.Tensor] | None = None
        self._unshared: list[torch.Tensor] = []
        # an epoch's floor (exact-length loaders): keep at least floor_rows of its epoch_rows; seen/kept so far
        self.floor_rows: int | None = None
        self.epoch_rows = self.epoch_seen = self.epoch_kept = 0

    # -- delay and anneal ---------------------------------------------------------------
    def start_epoch(self, floor_rows: int | None = None, epoch_rows: int = 0) -> None:
        """A new epoch; ``floor_rows``: keep at least that many of its ``epoch_rows`` (see :meth:`_meet_floor`)."""
        self.epoch_steps = 0
        self.floor_rows, self.epoch_rows, self.epoch_seen, self.epoch_kept = floor_rows, epoch_rows, 0, 0

    def _delay_counter(self, step: int) -> int:
        """Raw batch ``step`` (counted over the run) as the delay counts it: over the run, or within its epoch."""
        return step - (self.steps - self.epoch_steps) if self.config.repeat_delay_per_epoch else step

    @property
    def in_delay(self) -> bool:
        return self._in_delay(self.steps)

    def _in_delay(self, step: int) -> bool:
        """Raw batch ``step`` is inside the delay (an ``auto`` delay: until it has started)."""
        if self.config.auto_delay:
            return self.started_at is None
        return self._delay_counter(step) < int(self.config.sift_delay)

    @property
    def anneal_start(self) -> int | None:
        """Raw batch from which everything is kept (``anneal_fraction``), if the run's length is known."""
        if not self.config.anneal_fraction or not self.total_steps:
            return None
        return math.ceil((1.0 - self.config.anneal_fraction) * self.total_steps)

    @property
    def in_anneal(self) -> bool:
        return self._in_anneal(self.steps)

    def _in_anneal(self, step: int) -> bool:
        start = self.anneal_start
        return start is not None and step >= start

    def _whole_in(self, first: int, count: int, auto_end: int) -> int:
        """How many of the ``count`` raw batches from ``first`` (an epoch's start) the schedule keeps whole: the delay
        (an ``auto`` one ending at ``auto_end``; a fixed one repeated from each epoch's start where configured), the
        anneal."""
        if self.config.auto_delay:
            delay_end = auto_end
        else:
            delay_end = int(self.config.sift_delay) + (first if self.config.repeat_delay_per_epoch else 0)
        anneal = self.anneal_start
        return sum(1 for step in range(first, first + count) if step < delay_end or (anneal is not None and step >= anneal))

    def kept_whole(self, raw_batches: int, mid_epoch: bool) -> int:
        """How many of an epoch's ``raw_batches`` the schedule keeps whole (the delay; the anneal): the epoch under
        way (``mid_epoch``) or the next. An ``auto`` delay that has not started counts as lasting the whole epoch."""
        first = self.steps - (self.epoch_steps if mid_epoch else 0)  # raw batches decided before that epoch
        return self._whole_in(first, raw_batches, first + (0 if self.started_at is not None else raw_batches))

    def kept_whole_run(self, raw_batches: int) -> float:
        """Raw batches per epoch the schedule keeps whole, averaged over the run (``total_steps``, from the start): the
        delay counts once (or every epoch with ``repeat_delay_per_epoch``); an ``auto`` delay not yet started is
        taken to end with the first epoch."""
        total, per_epoch = int(self.total_steps or raw_batches), max(1, raw_batches)
        auto_end = self.started_at if self.started_at is not None else raw_batches
        whole = sum(self._whole_in(first, min(per_epoch, total - first), auto_end) for first in range(0, total, per_epoch))
        return whole * raw_batches / max(1, total)

    @property
    def keeps_all(self) -> bool:
        """The next raw batch is kept whole by the schedule (delay or anneal), not by a decision."""
        return self.in_delay or self.in_anneal

    def wants_scores(self, batch_size: int, step: int | None = None) -> bool:
        """Whether raw batch ``step`` (counted over the run; by default the next to be decided) must be scored.

        During a fixed delay only the last batches before sifting starts are scored: enough to
        fill the history, so the delay costs no scoring forwards beyond that; with memory scoring
        none is (the recorded training losses fill it). During an ``auto`` delay one batch in
        :data:`PROBE_EVERY` is (the start rule needs the scoring cost; for a later batch, whether it starts is not known
        yet).
        """
        step = self.steps if step is None else step
        if not self.config.needs_scores or self._in_anneal(step):
            return False
        if not self._in_delay(step):
            return True
        if self.config.auto_delay:
            return step % PROBE_EVERY == 0
        if self.config.scoring == "memory":  # the history fills from the recorded training losses
            return False
        fill_steps = math.ceil(self.config.loss_history_length / max(1, batch_size))
        return int(self.config.sift_delay) - self._delay_counter(step) <= fill_steps

    def observe(self, losses: torch.Tensor) -> None:
        """Losses of samples trained in full (delay): they fill the history and the gain estimate."""
        losses = losses.detach().float().flatten().cpu()
        if losses.numel() == 0:
            return
        if self.share is None:
            self._remember(losses)
        else:
            self._unshared.append(losses)
        g = algorithm.importance_gain(losses)
        self.gain = g if self.gain_samples == 0 else (1 - GAIN_SMOOTHING) * self.gain + GAIN_SMOOTHING * g
        self.gain_samples += losses.numel()

    def maybe_start(self, scoring_cost: float) -> bool:
        """``auto`` delay: start sifting once the history is full and the smoothed gain exceeds
        ``1 + s/a`` (:func:`~siftcli.sift.algorithm.start_threshold`); ``scoring_cost`` is the measured
        ``s`` (NaN until measured: no start). Returns whether sifting is on."""
        if self.started_at is not None or not self.config.auto_delay:
            return self.started_at is not None
        if self._filled == self._ring.numel() and math.isfinite(scoring_cost):
            if self.gain > algorithm.start_threshold(scoring_cost, self.config.target_keep_fraction):
                self.started_at = self.steps
        return self.started_at is not None

    # -- history -------------------------------------------------------------------------
    @property
    def history(self) -> torch.Tensor:
        return self._ring[: self._filled] if self._filled < self._ring.numel() else self._ring

    def _absorb(self, ranked: torch.Tensor | None) -> None:
        """Add a decided batch's scores to the history; under torch.distributed, every rank's (and what
        each observed since its last decision), so every rank ranks against the same history."""
        if self.share is None:
            if ranked is not None:
                self._remember(ranked)
            return
        if not self.config.needs_scores:  # random and all never rank: nothing to share, no collective
            return
        parts = self._unshared + ([ranked] if ranked is not None else [])
        self._unshared = []
        self._remember(self.share(torch.cat(parts) if parts else torch.empty(0)))

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
        return self.decide_weighted(losses, n)[0]

    def decide_weighted(self, losses: torch.Tensor | None, n: int,
                        forced: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(keep-mask, per-sample loss weights or ``None`` for all ones) for a raw batch of ``n`` samples. ``forced``:
        samples kept whatever their score (a remembered loss too old, refreshed by training it), counted against
        the kept budget, never ranked nor added to the history."""
        mask, weights, ranked = self._decide(losses, n, forced)
        self._absorb(ranked)
        if self.floor_rows is not None:
            mask, weights = self._meet_floor(mask, weights, losses)
        self.epoch_seen += n
        self.epoch_kept += int(mask.sum())
        return mask, weights

    def _meet_floor(self, mask: torch.Tensor, weights: torch.Tensor | None,
                    losses: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Keep the fewest extra samples that still let the epoch reach its floor: only when the rows left after this
        batch could no longer make up what the draw fell behind (the epoch's tail), the batch's highest-scored
        dropped samples are kept too (weight 1). A loader that promised its trainer ``len()`` batches keeps it."""
        n = mask.numel()
        left_after = max(0, self.epoch_rows - self.epoch_seen - n)
        short = min(int((~mask).sum()), self.floor_rows - self.epoch_kept - int(mask.sum()) - left_after)
        if short <= 0:
            return mask, weights
        scores = torch.zeros(n) if losses is None else losses.detach().float().flatten().cpu().nan_to_num(nan=-math.inf)
        extra = torch.topk(scores.masked_fill(mask, -math.inf), short).indices  # the best of those it dropped
        mask = mask.clone()
        mask[extra] = True
        if weights is not None:
            weights = weights.clone()
            weights[extra] = 1.0
        return mask, weights

    def _decide(self, losses: torch.Tensor | None, n: int,
                forced: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(mask, weights, the scores ranked, which join the history; None when nothing was ranked)."""
        if losses is not None:
            losses = losses.detach().float().flatten().cpu()
            if losses.numel() != n:
                raise ValueError(f"the loss function returned {losses.numel()} losses for a batch of {n} samples")
            if forced is not None and bool(forced.any()):
                losses = losses.masked_fill(forced.cpu(), math.nan)
        forced_count = 0 if forced is None else int(forced.sum())
        delayed, annealed = self.in_delay, self.in_anneal
        if not delayed and self.started_at is None:
            self.started_at = self.steps
        self.steps += 1
        self.epoch_steps += 1
        if delayed or annealed or self.config.mode == "all":
            if losses is not None and delayed:
                self.observe(losses)
            return torch.ones(n, dtype=torch.bool), None, None
        if self.config.mode == "random":
            k, self.carry = algorithm.calibrated_count(n, self.config.target_keep_fraction, self.carry)
            return algorithm.sample_keep_count(torch.ones(n), k, self.generator), None, None
        if losses is None:
            raise ValueError(f"mode {self.config.mode!r} needs the batch's scores after the delay")
        finite = torch.isfinite(losses)
        bad = int((~finite).sum())
        if bad - forced_count:
            self.nonfinite += bad - forced_count
            if not self._warned_nonfinite:
                self._warned_nonfinite = True
                warnings.warn(
                    f"siftcli: {bad} sample(s) had a NaN or Inf loss in the scoring pass; they are kept "
                    "for training and counted in stats.nonfinite (further occurrences are not reported)",
                    RuntimeWarning,
                    stacklevel=3,
                )
        weights = None
        if self.config.mode == "infobatch":
            history = self.history if self._filled else losses[finite]
            threshold = float(history.mean()) if history.numel() else math.inf
            mask, weights = algorithm.infobatch_keep(losses.nan_to_num(nan=math.inf), threshold,
                                                     self.config.prune_fraction, self.generator)
        else:
            pct = algorithm.percentiles(losses.nan_to_num(posinf=0.0, neginf=0.0), self.history)
            prob = algorithm.keep_probability(pct, self.config.beta)
            if self.config.mode == "calibrated":
                k, self.carry = algorithm.calibrated_count(n, self.config.target_keep_fraction, self.carry)
                prob = torch.where(finite, prob, torch.zeros_like(prob))
                mask = algorithm.sample_keep_count(prob, max(0, k - bad), self.generator)
            else:
                mask = algorithm.sample_keep(prob, self.generator)
        mask |= ~finite
        return mask, weights, losses

    # -- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StateDict:
        return {
            "ring": self._ring.clone(),
            "filled": self._filled,
            "pos": self._pos,
            "steps": self.steps,
            "epoch_steps": self.epoch_steps,
            "carry": self.carry,
            "nonfinite": self.nonfinite,
            "generator": self.generator.get_state(),
            "started_at": self.started_at,
            "gain": self.gain,
            "gain_samples": self.gain_samples,
            "unshared": [t.clone() for t in self._unshared],
            "floor": (self.floor_rows, self.epoch_rows, self.epoch_seen, self.epoch_kept),
        }

    def load_state_dict(self, state: StateDict) -> None:
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
        self.started_at = state.get("started_at")
        self.gain = float(state.get("gain", 1.0))
        self.gain_samples = int(state.get("gain_samples", 0))
        self._unshared = list(state.get("unshared", []))
        self.floor_rows, self.epoch_rows, self.epoch_seen, self.epoch_kept = state.get("floor", (None, 0, 0, 0))
