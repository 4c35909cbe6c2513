"""Numbers a sceptic accepts: time-to-accuracy, equal-epoch ratio, seeds, and a plain verdict."""

from __future__ import annotations

import math
import statistics
from typing import Any, cast

from typing_extensions import NotRequired, TypedDict

from siftcli.tasks import metric
from siftcli.training.record import RunMetrics, TeacherInfo, final_value, keep_value, paid_seconds


class Opponent(TypedDict):
    """The subject against one other arm of the same seed."""

    metric: float | None
    seconds: float
    paid_ratio: float | None  # its clock, reference paid in full, over the baseline's
    diff: float | None  # subject minus it, in the metric's reporting unit (positive: the subject is better)


class EqualTime(TypedDict):
    """The equal-time opponent's time against the time it was given: the arm it is held against (reference paid)."""

    held_against: str
    budget_seconds: float
    train_seconds: float
    ratio: float
    within_3_percent: bool


class Pair(TypedDict):
    """One seed of a comparison: the subject against the baseline on time, and against every arm on the metric."""

    metric: str
    higher_is_better: bool
    subject: str
    target: float | None
    target_drop: float
    baseline_time_to_target: float | None
    sifted_time_to_target: float | None
    time_to_target_ratio: float | None
    baseline_target_fraction_of_run: float | None
    equal_epoch_ratio: float | None
    paid_ratio: float | None
    total_ratio: float | None
    speedup: float | None
    metric_delta: float | None
    predicted_ratio: float | None
    scoring_cost: float | None
    achieved_keep: float | None
    target_keep: float | None
    vs: dict[str, Opponent]
    teacher: NotRequired[TeacherInfo]
    equal_time: NotRequired[EqualTime]
    noisy_share_kept: NotRequired[float]
    noise_rate: NotRequired[float]
    seed: NotRequired[int]


class Paired(TypedDict):
    """Per-seed paired differences: their mean and standard error, and what they allow a sceptic to say."""

    mean: float
    std: float
    se: float
    n: int
    values: list[float]
    ci95: list[float]
    status: str  # beats | loses | within noise | too few seeds
    beats: bool
    within_noise: bool


class Spread(TypedDict):
    """A ratio over seeds: mean, spread and the values."""

    mean: float
    std: float
    n: int
    values: list[float]


class SeedsSummary(TypedDict, total=False):
    """Every ratio over seeds (:class:`Spread`) and every difference paired (:class:`Paired`)."""

    seeds: int
    time_to_target_ratio: Spread
    equal_epoch_ratio: Spread
    paid_ratio: Spread
    speedup: Spread
    achieved_keep: Spread
    noisy_share_kept: Spread
    metric_delta: Paired
    vs: dict[str, Paired]


class CompareResult(TypedDict):
    """``compare.json``: every seed's arms (brief), the per-seed pairs, the statistics over seeds and the verdict."""

    status: str
    recipe: str
    runs: list[dict[str, RunMetrics]]
    pairs: list[Pair]
    seeds_summary: SeedsSummary | None
    verdict: str
    arms: NotRequired[list[str]]
    pilot_warning: NotRequired[str | None]
    evaluation_warning: NotRequired[str | None]  # too few evaluation rows, or one class: what the numbers cannot say
    plots: NotRequired[list[str]]


def metric_value(run: RunMetrics) -> float | None:
    """The run's metric at its last evaluation (``None``: never evaluated)."""
    return final_value(run)


def target_for(baseline: RunMetrics, drop_points: float) -> float | None:
    """Baseline's final value, loosened by ``drop_points`` (accuracy points, or percent for loss-like metrics)."""
    final = metric_value(baseline)
    if final is None:
        return None
    if baseline["higher_is_better"]:
        return final - drop_points / 100.0
    return final * (1.0 + drop_points / 100.0)


def time_to_target(run: RunMetrics, target: float | None) -> float | None:
    """Training seconds at the first evaluation that reached ``target`` (``None`` if never)."""
    if target is None:
        return None
    higher = run["higher_is_better"]
    for point in run.get("curve", []):
        value = point.get(run["metric"])
        if value is not None and (value >= target - 1e-12 if higher else value <= target + 1e-12):
            return point["train_seconds"]
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return a / b


def compare_pair(runs: dict[str, RunMetrics], drop_points: float = 0.5, subject: str = "sifted",
                 reference: str = "baseline") -> Pair:
    """Everything the compare table shows for one seed: ``subject`` (the sifted arm) against ``reference`` (the
    full baseline) on time, and against every other arm that ran (``vs``) on the final metric.

    Sifted minus equal-time is the value of the *trade* (fewer samples for the same time); sifted minus random-keep
    (same kept fraction, chosen uniformly) is the value of *selection* itself; sifted minus static-filter, the value
    of deciding online rather than once before training.
    """
    baseline, sifted = runs[reference], runs[subject]
    m = metric(baseline["metric"])
    target = target_for(baseline, drop_points)
    b_tta, s_tta = time_to_target(baseline, target), time_to_target(sifted, target)
    b_val, s_val = metric_value(baseline), metric_value(sifted)
    out: Pair = {
        "metric": baseline["metric"],
        "higher_is_better": baseline["higher_is_better"],
        "subject": subject,
        "target": target,
        "target_drop": drop_points,
        "baseline_time_to_target": b_tta,
        "sifted_time_to_target": s_tta,
        "time_to_target_ratio": _ratio(s_tta, b_tta),
        "baseline_target_fraction_of_run": _ratio(b_tta, baseline["train_seconds"]),
        "equal_epoch_ratio": _ratio(sifted["train_seconds"], baseline["train_seconds"]),
        "paid_ratio": _ratio(paid_seconds(sifted), baseline["train_seconds"]),
        "total_ratio": _ratio(sifted["total_seconds"], baseline["total_seconds"]),
        "speedup": _ratio(baseline["train_seconds"], sifted["train_seconds"]),
        "metric_delta": diff_points(s_val, b_val, m),
        "predicted_ratio": sifted.get("predicted_ratio"),
        "scoring_cost": sifted.get("scoring_cost"),
        "achieved_keep": keep_value(sifted, "achieved"),
        "target_keep": keep_value(sifted, "target"),
        "vs": {arm: {"metric": metric_value(run), "seconds": run["train_seconds"],
                     "paid_ratio": _ratio(paid_seconds(run), baseline["train_seconds"]),
                     "diff": diff_points(s_val, metric_value(run), m)}
               for arm, run in runs.items() if arm != subject},
    }
    if sifted.get("teacher"):
        out["teacher"] = sifted["teacher"]
    if "equal-time" in runs:  # the record says whether the opponent really trained as long as the arm it is held against
        budget, spent = paid_seconds(sifted), runs["equal-time"]["train_seconds"]
        out["equal_time"] = {"held_against": subject, "budget_seconds": budget, "train_seconds": spent,
                             "ratio": spent / budget if budget else float("nan"),
                             "within_3_percent": bool(budget and abs(spent / budget - 1) <= 0.03)}
    noise = sifted.get("label_noise") or {}
    if noise.get("kept_share_after_delay") is not None:
        out["noisy_share_kept"] = noise["kept_share_after_delay"]
        out["noise_rate"] = noise["rate"]
    return out


def diff_points(a: float | None, b: float | None, m: Any) -> float | None:
    """``a - b`` in the metric's reporting unit, signed so that positive means ``a`` is better."""
    if a is None or b is None:
        return None
    return (a - b) * m.scale * (1 if m.higher_is_better else -1)


# Two-sided 95% Student-t quantiles by degrees of freedom (beyond the table: the next lower row's, conservative).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}
#: An accuracy claim needs at least this many seeds (each its own initial weights and split).
MIN_SEEDS = 5


def t975(df: int) -> float:
    return _T975[max(k for k in _T975 if k <= df)] if df >= 1 else math.inf


def paired(values: list[float]) -> Paired:
    """Mean and standard error of per-seed paired differences, and what they allow us to say.

    ``beats``/``loses`` only when the 95% Student-t interval excludes zero *and* the mean is beyond two standard
    errors; fewer than :data:`MIN_SEEDS` seeds, or no spread at all, is ``too few seeds`` whatever the mean.
    """
    n = len(values)
    mean = statistics.fmean(values) if values else math.nan
    sd = statistics.stdev(values) if n > 1 else 0.0
    se = sd / math.sqrt(n) if n > 1 else math.nan
    half = t975(n - 1) * se if n > 1 else math.inf
    if n < MIN_SEEDS or sd == 0:
        status = "too few seeds"
    elif mean - half > 0 and mean > 2 * se:
        status = "beats"
    elif mean + half < 0 and -mean > 2 * se:
        status = "loses"
    else:
        status = "within noise"
    return {"mean": mean, "std": sd, "se": se, "n": n, "values": values, "ci95": [mean - half, mean + half],
            "status": status, "beats": status == "beats", "within_noise": status == "within noise"}


def summarise_seeds(pairs: list[Pair]) -> SeedsSummary:
    """Mean and spread of each ratio over seeds; paired statistics (:func:`paired`) of every difference."""
    out: SeedsSummary = {"seeds": len(pairs)}
    for key in ("time_to_target_ratio", "equal_epoch_ratio", "paid_ratio", "speedup", "achieved_keep", "noisy_share_kept"):
        values = [cast(float, p.get(key)) for p in pairs if p.get(key) is not None]
        if values:
            out[key] = {"mean": statistics.fmean(values),  # type: ignore[literal-required]
                        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                        "n": len(values), "values": values}
    deltas = [p["metric_delta"] for p in pairs if p.get("metric_delta") is not None]
    if deltas:
        out["metric_delta"] = paired(deltas)
    out["vs"] = {}
    for arm in pairs[0].get("vs", {}):
        diffs = [p["vs"][arm]["diff"] for p in pairs if (p.get("vs", {}).get(arm) or {}).get("diff") is not None]
        if diffs:
            out["vs"][arm] = paired(diffs)
    return out


