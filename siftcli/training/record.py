"""The run record: what one run measured, typed section by section; ``metrics.json`` is this record as JSON.

Every reader (the arms that copy a run, the statistics, the report, the sweep, the benchmarks) takes a
:class:`RunMetrics`, so a key that is misspelt or read from the wrong section is a type error, not a silent ``None``.
``docs/metrics.md`` describes each field from these types (a test keeps the two in step). The record stays plain
JSON-able data (``TypedDict``), so ``metrics.json``, ``compare.json`` and every benchmark's ``results.json`` read back
as the same type.
"""

from typing import Any, cast

from typing_extensions import NotRequired, TypedDict


class EpochKeep(TypedDict):
    """One epoch of a sifted run: raw samples offered, kept, and how they were decided."""

    epoch: int  # the loader's epoch counter
    raw: int  # raw samples offered
    kept: int  # samples kept
    kept_fraction: float | None  # kept / raw
    after_delay: float | None  # kept fraction of the samples the rule decided (the delay left out)
    scored: int  # samples given a scoring forward
    from_memory: int  # samples decided from a remembered loss
    sifted_raw: int  # raw samples the rule decided (after the delay)
    sifted_kept: int  # of those, kept


class KeepStats(TypedDict):
    """How much a sifted run kept, against what it aimed at (``None`` for a run that does not sift)."""

    target: float  # the rule's expected kept fraction, 1/(1+beta) or keep_fraction
    achieved: float | None  # trained / raw samples, the delay included: what a static filter must match
    achieved_after_delay: float | None  # kept / decided samples: what the random-keep control copies
    sifted_raw: int  # raw samples the rule decided (after the delay)
    sifted_kept: int  # of those, kept
    per_epoch: list[EpochKeep]  # the same, epoch by epoch
    dropped_to_sync: int  # kept samples dropped at epochs' ends so every rank yields as many batches (torchrun)
    sift_started_at: int | None  # raw batch at which sifting started (the delay's end); None: never
    anneal_started_at: int | None  # raw batch at which the anneal began keeping everything again; None: never
    scored_after_first_epoch: float | None  # share of later epochs' raw samples given a scoring forward
    nonfinite: int  # NaN/Inf losses (kept, counted)
    trace: NotRequired[list[list[int]]]  # [raw batch, n, kept] per raw batch, for the keep-rate plot (metrics.json only)
    score_ages: list[int]  # score_ages[a]: samples decided by a loss a epochs old (the last bucket: that or older)
    score_unknown: int  # samples decided with no loss known yet
    kept_overlap: list[float]  # Jaccard overlap of consecutive epochs' kept sets


class NoiseStats(TypedDict):
    """Where ``data.label_noise`` flipped labels: how many of the kept samples were flipped ones."""

    rate: float  # the fraction of training labels flipped
    flipped: int  # how many
    kept_flipped: int  # flipped samples kept (delay included)
    kept_flipped_after_delay: int  # flipped samples kept by the rule
    kept_share: float | None  # flipped share of everything kept
    kept_share_after_delay: float | None  # flipped share of what the rule kept


class GroupStats(TypedDict):
    """One value of ``data.group_column``: its size and its share of what was trained on."""

    samples: int  # rows of this group in the training data
    kept: int  # of them, kept
    share_of_kept: float | None  # its share of everything kept
    share_of_data: float  # its share of the training data


class TeacherInfo(TypedDict):
    """What the verdict needs to say "cache the teacher": was it cached, and could it have been (fixed inputs)."""

    cached: bool  # distill.cache was on
    inputs_change: bool  # data.augment changes the inputs every epoch (the cache cannot be exact)


class RankStats(TypedDict):
    """One torchrun rank's own numbers."""

    rank: int  # the process's rank
    raw_samples: int  # this rank's raw samples
    kept_samples: int  # what the rule kept on this rank
    samples_trained: int  # what this rank trained on
    kept_fraction: float  # kept / raw on this rank
    trained_fraction: float  # trained / raw on this rank
    optimizer_steps: int  # equal on every rank
    train_seconds: float  # this rank's training clock
    dropped_to_sync: int  # kept samples dropped to stay in step with the other ranks
    weights_sha1: str  # SHA-1 of the final weights


class ParallelInfo(TypedDict):
    """How the run was spread: the global batch is the per-rank batch times the ranks; the learning rate is the
    recipe's, never rescaled."""

    world_size: int  # processes
    per_rank_batch: int  # the recipe's batch_size
    global_batch: int  # per_rank_batch * world_size
    lr: float  # the recipe's, never rescaled
    optimizer_steps: int  # equal on every rank
    zero: bool  # optimizer state sharded (optim.zero with several processes)
    ranks: NotRequired[list[RankStats]]  # torchrun only
    ranks_in_sync: NotRequired[bool]  # every rank ended with the same weights


class ReferenceCost(TypedDict):
    """A reference's cost to this run: ``paid_seconds`` on its clock, ``build_seconds`` what building it cost whoever
    built it (a run that found it cached pays only the read)."""

    kind: str  # cross-fit, holdout, model, ngram or naive-bayes
    paid_seconds: float  # on this run's clock
    cached: bool  # read from the cache
    key: str | None  # the cache key
    build_seconds: float  # what building it cost


class SubsetInfo(TypedDict):
    """An arm that trained on part of the training data (static filter, dedup, target-only)."""

    samples: int  # training samples the arm trained on
    of: int  # of the whole training data


class CurvePoint(TypedDict, total=False):
    """One evaluation: ``step``, ``epoch``, ``train_seconds`` (training clock), ``raw_samples`` consumed, ``loss`` and
    the task's metric under its own name (``accuracy``, ``mse``, ...)."""

    step: int  # optimizer step
    epoch: float  # epochs consumed
    train_seconds: float  # training clock at this evaluation
    raw_samples: int  # raw samples consumed
    loss: float | None  # evaluation loss


class RunMetrics(TypedDict):
    """One run: ``metrics.json``. Sections: ``final`` (the last evaluation), the cost (``train_seconds``,
    ``phases``, ``scoring_cost``, ``predicted_ratio``, ``reference``), ``keep``, ``label_noise``, ``groups``,
    ``parallel``."""

    status: str  # completed, interrupted or failed
    arm: str  # the arm's name in a comparison (baseline, sifted, ...)
    task: str  # text-classification, regression, causal-lm or image-classification
    metric: str  # the task's metric, the key of final and of each curve point
    higher_is_better: bool  # the metric's direction
    final: dict[str, float | None]  # loss and the metric at the last evaluation
    train_seconds: float  # training wall-clock: data, scoring, steps, a reference or teacher; no evaluation
    total_seconds: float  # the process's wall-clock, evaluation and checkpoints included (over resumes)
    optimizer_steps: int  # steps taken
    raw_samples: int  # samples the data loader offered, over all epochs
    samples_scored: int  # samples given a scoring forward
    samples_from_memory: int  # samples decided from a remembered loss
    samples_trained: int  # samples in training batches
    samples_teacher: int | None  # teacher forwards, in samples (distillation only)
    teacher: TeacherInfo | None  # distillation only
    parallel: ParallelInfo  # how the run was spread over processes
    keep: KeepStats | None  # a sifted run's keep rates (None: the run does not sift)
    label_noise: NoiseStats | None  # data.label_noise only
    groups: dict[str, GroupStats] | None  # data.group_column only, by its value
    phases: dict[str, float]  # seconds per phase: data, scoring, forward_backward, optimizer, evaluation, checkpoint, ...
    scoring_cost: float  # s: scoring seconds per scored sample over training seconds per trained sample (NaN: none)
    predicted_ratio: float | None  # the cost model's equal-epoch time ratio, scored/raw * s + kept fraction
    curve: list[CurvePoint]  # every evaluation, in order
    settings: NotRequired[dict[str, Any]]  # the recipe (model and data left out), as JSON (metrics.json only)
    sift: dict[str, Any] | None  # the engine's settings (SiftConfig) and the scoring precision it chose
    device: str  # where it trained (cpu, cuda:0, ...)
    torch: str  # the torch version
    reference: NotRequired[ReferenceCost | None]  # what a reference cost this run (score reducible or reference)
    compile: NotRequired[dict[str, float]]  # graphs, compilations, eager fallbacks, seconds, steady_compilations (compile: true)
    subset: NotRequired[SubsetInfo]  # arms that trained on part of the data
    forked_from: NotRequired[str]  # a capped wsd run started from its baseline's checkpoint there (siftcli.arms.forks)


def brief(m: RunMetrics) -> RunMetrics:
    """A run's numbers without its long traces (those stay in the arm's metrics.json): what compare.json holds."""
    out = cast(RunMetrics, {k: v for k, v in m.items() if k not in ("curve", "keep", "settings")})
    keep = m.get("keep")
    if keep:
        keep = keep.copy()
        keep.pop("trace", None)
    out["keep"] = keep
    out["curve"] = [cast(CurvePoint, {k: p.get(k) for k in ("step", "train_seconds", m["metric"], "loss")}) for p in m.get("curve", [])]
    return out


def final_value(run: RunMetrics, key: str | None = None) -> float | None:
    """The run's metric (or ``key``, such as ``"loss"``) at its last evaluation; ``None``: never evaluated."""
    return run["final"].get(run["metric"] if key is None else key) if run.get("final") else None


def keep_value(run: RunMetrics, key: str) -> Any:
    """One number of the keep section (``achieved``, ``target``, ``sift_started_at``, ...); ``None`` for a run that
    does not sift."""
    keep = run.get("keep")
    return keep.get(key) if keep else None


def paid_seconds(run: RunMetrics) -> float:
    """A run's training clock with its reference paid in full, also where this run found it cached (amortised)."""
    ref = run.get("reference") or {}
    return run["train_seconds"] - float(ref.get("paid_seconds") or 0.0) + float(ref.get("build_seconds") or 0.0)


def kept_fraction(run: RunMetrics) -> float:
    """The fraction of the pool's sample-epochs a run trained on, delay included (what a static filter must match): a
    sifted run's achieved keep, a subset's share of the pool, else everything."""
    keep = run.get("keep")
    value = keep["achieved"] if keep else None
    if value is not None and 0 < value <= 1:
        return float(value)
    subset = run.get("subset")
    return subset["samples"] / max(1, subset["of"]) if subset else 1.0
