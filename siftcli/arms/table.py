"""The table of arms: every run a comparison can hold, as data.

An arm is a row of :data:`ARMS`: a name, what it stands for, the arms it needs to have run first in the same seed,
and a function that derives what it trains (:class:`ArmPlan`: a recipe, engine changes or none, and optionally a subset
of the training data) from that seed's context. :func:`run_arms` runs a list of arms per seed, every seed from its
own initial weights and (where the data has no fixed split) its own split, every arm of a seed from the same weights
and data order. ``siftcli compare``, the sweep's baseline frontier and every benchmark go through it, so adding an
opponent is one row here, its derive function and a test.

An arm name may carry engine changes after a colon, ``sifted:score=reducible,beta=2``: a variant of the sifted arm
(benchmarks compare several); the opponents derive from the *subject* arm (``sifted`` unless told otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from siftcli.arms.context import SeedContext
from siftcli.arms.forks import less_steps
from siftcli.curate.dedup import DEFAULT_SIMILARITY, drop_near_copies
from siftcli.curate.pipeline import lowest
from siftcli.errors import SiftcliError
from siftcli.recipe.reader import apply_override, load_yaml_text
from siftcli.recipe.schema import Recipe, validate_recipe
from siftcli.sift.sifter import REFERENCE_SCORES
from siftcli.tasks import TASKS
from siftcli.training.record import RunMetrics, keep_value, kept_fraction, paid_seconds
from siftcli.training.setup import SIFT_FIELDS, sift_config


@dataclass(frozen=True)
class ArmPlan:
    """What one arm trains: ``recipe``; ``sift`` engine changes (``None``: no sifting, the loader keeps everything);
    ``subset``: training sample indices (``None``: all); ``pays_reference``: the reference is on its clock even
    though it does not sift (the static filter chose its subset with it); ``upfront``: seconds of work done before
    training to choose the data (near-duplicate removal), put on the arm's clock as phases of those names."""

    recipe: Recipe
    sift: dict[str, Any] | None = None
    subset: list[int] | None = None
    pays_reference: bool = False
    upfront: dict[str, float] = field(default_factory=dict)
    reference_kind: str | None = None  # the reference it paid for, where not the recipe's own (sift.reference.kind)


@dataclass(frozen=True)
class Arm:
    """One row of the table: ``derive(context, name)`` returns the arm's :class:`ArmPlan`; ``needs``: arms (``subject``:
    the compared sifted arm) that must have run first in the same seed."""

    name: str
    about: str
    derive: Callable[[SeedContext, str], ArmPlan]
    needs: tuple[str, ...] = ()
    sifts: bool = False
    check: Callable[[Recipe, str], None] | None = None  # refuses a recipe the arm cannot run, before anything trains


def _changes(name: str) -> dict[str, Any]:
    """Engine changes written after the colon of an arm name: ``sifted:score=reducible,beta=2``."""
    _, _, spec = name.partition(":")
    out: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise SiftcliError(f"--arm {name!r}: expected NAME or NAME:key=value,... (e.g. sifted:score=reducible)")
        if key.strip() in out:
            raise SiftcliError(f"--arm {name!r}: {key.strip()} is given twice; give each setting once")
        if value.strip().startswith(("[", "{")):
            raise SiftcliError(f"--arm {name!r}: {key.strip()} takes one value, not a list; give an arm per value "
                               f"(--arm {name.partition(':')[0]}:{key.strip()}=1 --arm {name.partition(':')[0]}:"
                               f"{key.strip()}=2), or search values with siftcli sweep-beta --param")
        out[key.strip()] = load_yaml_text(value, f"--arm {name}")
    return out


def _no_keys(recipe: Recipe, name: str) -> None:
    """An arm that reads no settings refuses any it is given (they would be dropped without a word)."""
    changes = _changes(name)
    if changes:
        raise SiftcliError(f"--arm {name!r}: {name.partition(':')[0]} takes no settings (got {', '.join(sorted(changes))})")


def _sifted(ctx: SeedContext, name: str) -> ArmPlan:
    return ArmPlan(ctx.recipe, _changes(name))


def _equal_time(ctx: SeedContext, name: str) -> ArmPlan:
    """A baseline given the subject's wall-clock in seconds, reference paid in full, learning rate fully decayed at its
    end."""
    return ArmPlan(equal_time_recipe(ctx.recipe, ctx.runs["baseline"], ctx.runs[ctx.subject]))


def _random_keep(ctx: SeedContext, name: str) -> ArmPlan:
    """The subject's kept fraction after the same delay, chosen uniformly at random: the value of selection."""
    return ArmPlan(ctx.recipe, random_keep_changes(ctx.runs[ctx.subject]))


def _static_filter(ctx: SeedContext, name: str) -> ArmPlan:
    """The subject's overall kept fraction, chosen once before training: the samples with the lowest reference loss
    (what the reference finds learnable and on target). The offline alternative a careful user would try.

    ``static-filter:fraction=F`` keeps the lowest ``F`` instead and trains for the subject's optimizer steps (schedule
    fully decayed there): the same compute spread over a wider, fixed subset. A filter that must match the subject's
    per-epoch fraction sees fewer distinct samples than an online draw that changes every epoch; this one does not, so
    it is the static opponent a careful user who filters once and trains less would pick."""
    fraction = _static_fraction(name)
    subset = lowest(ctx.reference(name).losses, kept_fraction(ctx.runs[ctx.subject]) if fraction is None else fraction).tolist()
    if fraction is None:
        return ArmPlan(ctx.recipe, subset=subset, pays_reference=True)
    steps = max(1, int(ctx.runs[ctx.subject]["optimizer_steps"]))
    return ArmPlan(capped(ctx.recipe, steps, len(subset) // ctx.recipe.batch_size), subset=subset, pays_reference=True)


def _static_fraction(name: str) -> float | None:
    changes = _changes(name)
    unknown = sorted(set(changes) - {"fraction"})
    if unknown:
        raise SiftcliError(f"--arm {name!r}: static-filter takes only fraction=F (got {', '.join(unknown)})")
    fraction = changes.get("fraction")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1):
        raise SiftcliError(f"--arm {name!r}: fraction must be a number in (0, 1]")
    return None if fraction is None else float(fraction)


def _check_static(recipe: Recipe, name: str) -> None:
    _static_fraction(name)


def _dedup(ctx: SeedContext, name: str) -> ArmPlan:
    """Near-copies dropped once before training (``dedup:threshold=0.8``; default 0.7 Jaccard similarity of token
    bigrams), the rest trained on the full schedule; the search is on the arm's clock."""
    kept, seconds = drop_near_copies(ctx.workload.train_data, float(_changes(name).get("threshold", DEFAULT_SIMILARITY)))
    return ArmPlan(ctx.recipe, subset=kept, upfront={"dedup": seconds})


def _check_dedup(recipe: Recipe, name: str) -> None:
    if TASKS[recipe.task].inputs != "text":
        raise SiftcliError(f"--arm {name}: near-duplicate removal needs a text task; {recipe.task} has none")
    changes = _changes(name)
    if set(changes) - {"threshold"}:
        raise SiftcliError(f"--arm {name!r}: dedup takes threshold=T only (got {', '.join(sorted(set(changes) - {'threshold'}))})")
    threshold = changes.get("threshold", DEFAULT_SIMILARITY)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise SiftcliError(f"--arm {name!r}: threshold must be a similarity in (0, 1], got {threshold!r}")


FILTER_KEYS = {"fraction", "reference", "dedup"}
#: Reference kinds a filter may name; those but cross-fit read the recipe's holdout (sift.reference.holdout_*).
FILTER_REFERENCES = ("ngram", "naive-bayes", "holdout", "cross-fit")


def _fraction(name: str, value: Any, key: str = "fraction") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise SiftcliError(f"--arm {name!r}: {key} must be a number in (0, 1]")
    return float(value)


def _filter_changes(recipe: Recipe, name: str) -> tuple[float | None, str | None, float | None]:
    """(fraction, reference kind, dedup similarity) of ``filter:fraction=F,reference=KIND,dedup=T``, checked."""
    changes = _changes(name)
    unknown = sorted(set(changes) - FILTER_KEYS)
    if unknown or not changes:
        raise SiftcliError(f"--arm {name!r}: filter takes fraction=F, reference=KIND and dedup=T (at least one; got "
                           f"{', '.join(unknown) or 'none'})")
    fraction = None if "fraction" not in changes else _fraction(name, changes["fraction"])
    kind = changes.get("reference")
    if kind is not None and kind not in FILTER_REFERENCES:
        raise SiftcliError(f"--arm {name!r}: reference must be one of {', '.join(FILTER_REFERENCES)}")
    if kind is not None and fraction is None:
        raise SiftcliError(f"--arm {name!r}: reference={kind} ranks rows for a fraction=F to keep; give one")
    ref = recipe.sift.reference
    if kind not in (None, "cross-fit") and ref.holdout_source is None and ref.holdout_fraction is None:
        raise SiftcliError(f"--arm {name!r}: reference={kind} reads a holdout; set sift.reference.holdout_source or "
                           "holdout_fraction in the recipe")
    dedup = None if "dedup" not in changes else _fraction(name, changes["dedup"], "dedup")
    if dedup is not None and TASKS[recipe.task].inputs != "text":
        raise SiftcliError(f"--arm {name}: near-duplicate removal needs a text task; {recipe.task} has none")
    return fraction, kind, dedup


def _filter(ctx: SeedContext, name: str) -> ArmPlan:
    """The pool filtered once before training, the rest trained on the recipe's full schedule: near-copies dropped
    (``dedup=T``), then the ``fraction=F`` with the lowest reference loss (``reference=KIND``, default the recipe's
    own), the reference and the search on the arm's clock. What ``siftcli filter`` writes and a recipe then trains on."""
    fraction, kind, dedup = _filter_changes(ctx.recipe, name)
    done = filtered(ctx, name, dedup, fraction, kind)
    return ArmPlan(ctx.recipe, subset=done.rows, pays_reference=fraction is not None, upfront=done.upfront, reference_kind=kind)


@dataclass
class Filtered:
    """What :func:`filtered` kept: the rows, the search's seconds (``{"dedup": s}``), the rows left after the near-copy
    search (None without one) and the reference that ranked them (None without a fraction)."""

    rows: list[int]
    upfront: dict[str, float]
    after_dedup: int | None = None
    reference: Any = None


def filtered(ctx: SeedContext, name: str, dedup: float | None, fraction: float | None, kind: str | None = None) -> Filtered:
    """The pool filtered once, in memory: near-copies dropped (``dedup``, a similarity), then the ``fraction`` with the
    lowest reference loss (``kind``, default the recipe's own). The filter arm trains on these rows and ``siftcli
    filter`` writes them (the in-memory path), so the two agree by construction."""
    out = Filtered(list(range(len(ctx.workload.train_data))), {})
    if dedup is not None:
        out.rows, out.upfront["dedup"] = drop_near_copies(ctx.workload.train_data, dedup)
        out.after_dedup = len(out.rows)
    if fraction is not None:
        out.reference = ctx.reference(name, kind=kind)
        out.rows = [out.rows[i] for i in lowest(out.reference.losses[out.rows], fraction).tolist()]
    return out


def _check_filter(recipe: Recipe, name: str) -> None:
    _filter_changes(recipe, name)


def _random_subset(ctx: SeedContext, name: str) -> ArmPlan:
    """A uniform random ``fraction=F`` of the pool (drawn per seed), trained on the recipe's full schedule: what a
    filter's choice of that many rows is worth over chance."""
    import torch

    fraction = _random_fraction(name)
    n = len(ctx.workload.train_data)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(104_729 + int(ctx.recipe.seed)))
    return ArmPlan(ctx.recipe, subset=sorted(order[: max(1, round(fraction * n))].tolist()))


def _random_fraction(name: str) -> float:
    changes = _changes(name)
    if set(changes) != {"fraction"}:
        raise SiftcliError(f"--arm {name!r}: random-subset takes fraction=F only (random-subset:fraction=0.25)")
    return _fraction(name, changes["fraction"])


def _target_only(ctx: SeedContext, name: str) -> ArmPlan:
    """Only the pool's rows of ``data.target_group``: the ceiling a perfect filter of a mixed pool reaches."""
    w, target = ctx.workload, ctx.recipe.data.target_group
    if target is None or w.groups is None:
        raise SiftcliError("--arm target-only needs data.group_column and data.target_group in the recipe")
    code = w.group_names.index(target)
    return ArmPlan(ctx.recipe, subset=[i for i, g in enumerate(w.groups.tolist()) if g == code])


def _train_less(ctx: SeedContext, name: str) -> ArmPlan:
    """The baseline stopped at ``fraction`` of the full baseline's steps, schedule fully decayed there: what training
    less buys (``train-less:fraction=0.5``; the sweep's baseline frontier is made of these)."""
    fraction = less_fraction(name)
    steps = less_steps(fraction, ctx.runs["baseline"]["optimizer_steps"])
    return ArmPlan(ctx.recipe.model_copy(update={"max_steps": steps}))


def less_fraction(name: str) -> float:
    """``train-less:fraction=F``'s F (0.5 when not given)."""
    changes = _changes(name)
    if set(changes) - {"fraction"}:
        raise SiftcliError(f"--arm {name!r}: train-less takes fraction=F only (train-less:fraction=0.5)")
    return _fraction(name, changes.get("fraction", 0.5))


def _check_fraction(read: Callable[[str], float], name: str) -> None:
    """An arm's check that only reads (and so checks) its fraction."""
    read(name)


def _check_sifted(recipe: Recipe, name: str) -> None:
    """The engine settings after the colon, checked as the engine will take them, before anything trains."""
    changes = _changes(name)
    unknown = sorted(set(changes) - SIFT_FIELDS)
    if unknown:
        raise SiftcliError(f"--arm {name!r}: unknown sift setting {', '.join(unknown)}; known: {', '.join(sorted(SIFT_FIELDS))}")
    try:
        sift_config(recipe, 1_000, **changes)
    except ValueError as exc:
        raise SiftcliError(f"--arm {name!r}: {exc}") from None


def _variant(ctx: SeedContext, name: str) -> ArmPlan:
    """The recipe with ``--set``-style overrides (``variant:sift.beta=2,sift.mode=calibrated``): sifted if it sifts."""
    raw = ctx.recipe.model_dump(mode="json")
    for item in filter(None, (p.strip() for p in name.partition(":")[2].split(","))):
        apply_override(raw, item)
    recipe = validate_recipe(raw, f"--arm {name}")
    return ArmPlan(recipe, {} if recipe.sift.enabled else None)


def _needs_target(recipe: Recipe, name: str) -> None:
    _no_keys(recipe, name)
    if recipe.data.target_group is None:
        raise SiftcliError(f"--arm {name}: needs data.group_column and data.target_group in the recipe (which rows are the target)")


def _check_variant(recipe: Recipe, name: str) -> None:
    _variant(SeedContext(recipe, None, {}), name)


def _baseline(ctx: SeedContext, name: str) -> ArmPlan:
    return ArmPlan(ctx.recipe)


ARMS: dict[str, Arm] = {a.name: a for a in (
    Arm("baseline", "the full schedule on every sample", _baseline, check=_no_keys),
    Arm("sifted", "the recipe's sifting (variants: sifted:key=value,...)", _sifted, sifts=True, check=_check_sifted),
    Arm("equal-time", "a baseline given the sifted run's wall-clock (reference paid), fully decayed", _equal_time,
        ("baseline", "subject"), check=_no_keys),
    Arm("random-keep", "the sifted run's kept fraction chosen at random: the value of selection", _random_keep, ("subject",),
        sifts=True, check=_no_keys),
    Arm("static-filter", "the sifted run's kept fraction chosen once by the reference's loss, before training "
        "(static-filter:fraction=F: the lowest F, trained for the sifted run's steps)", _static_filter, ("subject",),
        check=_check_static),
    Arm("dedup", "near-copies dropped once before training (dedup:threshold=0.7), the rest on the full schedule", _dedup,
        check=_check_dedup),
    Arm("target-only", "only the rows of data.target_group: the ceiling of filtering a mixed pool", _target_only,
        check=_needs_target),
    Arm("variant", "the recipe with overrides (variant:sift.beta=2,sift.mode=calibrated); sifted if it sifts", _variant,
        sifts=True, check=_check_variant),
    Arm("train-less", "the baseline stopped at a fraction of its steps (train-less:fraction=0.5), fully decayed", _train_less,
        ("baseline",), check=lambda recipe, name: _check_fraction(less_fraction, name)),
    Arm("filter", "the pool filtered once, the rest on the full schedule: filter:fraction=F,reference=KIND,dedup=T "
        "(any of them)", _filter, check=_check_filter),
    Arm("random-subset", "a random fraction of the pool on the full schedule (random-subset:fraction=F): chance at that "
        "size", _random_subset, check=lambda recipe, name: _check_fraction(_random_fraction, name)),
)}


def arm_row(name: str) -> Arm:
    """The table row an arm name refers to (``sifted:beta=2`` is a ``sifted`` variant)."""
    base = name.partition(":")[0]
    if base not in ARMS:
        raise SiftcliError(f"--arm {name!r}: unknown arm; known: {', '.join(ARMS)}")
    return ARMS[base]


def subject_of(arms: list[str]) -> str:
    """The arm a comparison is about: the first ``sifted`` arm named, else the first ``variant`` (a recipe change such
    as ``variant:distill.teacher_fraction=0.25`` measured against the baseline and opponents), else ``sifted``."""
    rows = [(a, a.partition(":")[0]) for a in arms]
    return next((a for a, row in rows if row == "sifted"), None) or next((a for a, row in rows if row == "variant"), "sifted")


def default_arms(recipe: Recipe, quick: bool = False) -> list[str]:
    """The honest default: the equal-time baseline always, the random-keep control whenever the sifted arm selects,
    the static filter whenever it ranks by a reference; ``quick``: baseline and sifted only."""
    arms = ["baseline", "sifted"]
    if quick:
        return arms
    arms.append("equal-time")
    if recipe.sift.mode not in ("random",):
        arms.append("random-keep")
    if recipe.sift.score in REFERENCE_SCORES:
        arms.append("static-filter")
    return arms


def ordered(arms: list[str], subject: str = "sifted") -> list[str]:
    """``arms`` with what each needs added before it (baseline, the subject), in a runnable order, each once."""
    out: list[str] = []

    def add(name: str) -> None:
        if name in out:
            return
        for need in arm_row(name).needs:
            add(subject if need == "subject" else need)
        out.append(name)

    for name in arms:
        arm_row(name)
        add(name)
    return out


def check_arms(recipe: Recipe, arms: list[str], subject: str = "sifted") -> list[str]:
    """The runnable order of ``arms``, after refusing (one line) any arm this recipe cannot run, or one given twice in
    other words (``train-less:fraction=0.5`` and ``=0.50``): before anything trains."""
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
    for name in arms:
        base = name.partition(":")[0]
        try:
            key = (base, tuple(sorted((k, repr(v)) for k, v in _changes(name).items())))
        except SiftcliError:
            continue  # the arm's own check says what is wrong with it
        if key in seen and seen[key] != name:
            raise SiftcliError(f"--arm {name!r} is --arm {seen[key]!r} again (the same setting written another way); "
                               "give it once")
        seen[key] = name
    order = ordered(arms, subject)
    for name in order:
        row = arm_row(name)
        if row.check is not None:
            row.check(recipe, name)
    return order


def seed_order(order: list[str], position: int, subject: str = "sifted") -> list[str]:
    """The arms' order for the ``position``-th seed of a comparison: as given for even positions, reversed (each arm
    still after what it needs) for odd ones, so no arm always runs first or last in the process: what running early or
    late costs or gains (a cold device, a warm cache, a throttled CPU) falls on each arm in turn."""
    return order if position % 2 == 0 else ordered(order[::-1], subject)


# -- what the opponents copy from the subject ------------------------------------------------------

def equal_time_recipe(recipe: Recipe, baseline: RunMetrics, sifted: RunMetrics) -> Recipe:
    """The baseline recipe given the sifted run's training seconds (its reference paid in full) as a budget of seconds
    on its own clock, the schedule planned to decay fully when that time is spent.

    Seconds, not steps converted at the baseline's rate: the rate of another run carries that run's own start-up (on a
    GPU the first arm paid the device's warm-up and the opponent got 28% less time than the arm it was held against).
    The epochs are an upper bound from the baseline's rate, with room, so the clock ends the run, never the data.
    """
    seconds = max(1e-3, paid_seconds(sifted))
    per_epoch = baseline["train_seconds"] / max(recipe.epochs, 1e-9)
    epochs = math.ceil(max(recipe.epochs, 1.5 * seconds / per_epoch if per_epoch > 0 else recipe.epochs) + 1)
    return recipe.model_copy(update={"max_seconds": seconds, "max_steps": None, "epochs": float(epochs)})


def capped(recipe: Recipe, steps: int, per_epoch: float) -> Recipe:
    """``recipe`` ending, fully decayed, at optimizer step ``steps``, with the epochs (of ``per_epoch`` steps) to get there."""
    return recipe.model_copy(update={"max_steps": steps, "epochs": max(recipe.epochs, float(math.ceil(steps / max(1, per_epoch))))})


def random_keep_fraction(sifted: RunMetrics) -> float:
    """The kept fraction the random-keep control copies: what the sifted run achieved after its delay."""
    keep = sifted.get("keep") or {}
    value = keep.get("achieved_after_delay")
    return float(value) if value is not None and 0 < value <= 1 else float(keep.get("target") or 1.0)


def random_keep_changes(sifted: RunMetrics) -> dict[str, Any]:
    """The engine settings of the random-keep control: the sifted run's kept fraction after its delay, the same delay
    and anneal (a variant's own, not the recipe's), and, where that run chose its start (``sift_delay: auto``), the
    raw batch it started at (never started: keep everything)."""
    changes: dict[str, Any] = {"mode": "random", "score": "loss", "keep_fraction": random_keep_fraction(sifted)}
    sift = sifted.get("sift") or {}
    for key in ("sift_delay", "anneal_fraction", "repeat_delay_per_epoch"):
        if key in sift and sift[key] not in (None, "auto"):
            changes[key] = sift[key]
    if sift.get("sift_delay") == "auto":
        started = keep_value(sifted, "sift_started_at")
        changes["sift_delay"] = 0 if started is None else int(started)
        if started is None:
            changes["keep_fraction"] = 1.0
    return changes


