"""The search's pick in, its confirmation on the evaluation split out: paired seeds added one at a time against the full
baseline (and, for a subset, a random subset of the same size), stopped as soon as the interval knows, or as soon as
two seeds show the pick is not faster.

Each seed is a fresh one (not the search's), with its own initial weights and data order shared by its arms; the rows
measured here were never used to choose. After every seed from the second on, the paired difference to the baseline is
looked at: a one-sided Student-t bound at the level a fixed alpha-spending schedule allots that look (:func:`look_alpha`).
The pick is confirmed when the bound lies above minus the tolerance, found worse when the look's own 80% interval lies
below it (``FUTILITY``: that error only costs a saving), and otherwise another seed is trained, up to ``--seeds``. The
confirming looks' alphas sum to at most 5%, however many there are and wherever the seeds stop (a union bound: no
assumption on how looks correlate), so stopping early keeps the error rate of confirming a pick that loses more than
the tolerance; a clear win stops after 3 seeds, a clear loser after 2, a close call takes them all. A resumed plan
with more ``--seeds`` extends an inconclusive confirmation from a reserve the schedule kept for it.

A confirmation still open at its last seed is read once more (:func:`lean`), on the interval that calls a pick worse:
where that interval lies wholly above minus the tolerance, the pick is *favoured*, an answer that says it was not
confirmed (:mod:`siftcli.plan.verdict`), instead of "train on everything, undecided" for a pick the seeds lean towards.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from siftcli.analysis.stats import diff_points, paired
from siftcli.plan.record import Candidate, Confirmation, Look, Versus
from siftcli.plan.search import FASTER, confirm_phases, find
from siftcli.plan.study import Job, Result
from siftcli.training.record import RunMetrics, final_value, paid_seconds

#: Candidates that train on a part of the pool; the confirmation holds them against a random part of the same size.
SUBSET_FAMILIES = ("filter", "dedup", "dedup+filter", "target-only")
#: The error the looks up to the first ``--seeds`` spend, in all; what a resumed plan's extensions spend (halved at each
#: extension, so their sum stays below it); and the shape of the main schedule (the cumulative alpha grows as the
#: square of the share of looks taken: early looks spend little, so an early stop needs a clear difference).
MAIN_ALPHA, RESERVE_ALPHA, SHAPE = 0.04, 0.01, 2.0
#: A pick is found worse, and the seeds stop, when a look's own two-sided ``1 - FUTILITY`` interval (80%) lies below
#: minus the tolerance: a looser rule than confirming's, since wrongly stopping there only costs a saving (the answer
#: is then "train on everything"), never a recipe that loses accuracy. At 95% a pick 10 to 25 points worse took 3 or 4
#: seeds (a t bound on 1 degree of freedom is 12.7 standard errors wide), each a full baseline run and the pick's;
#: replayed over every truth candidate's 5 seeds in every order (``python -m benchmarks confirm-replay``), 80% stops
#: the losers after 3.3 seeds on average instead of 4.1, no candidate confirmed at 95% goes unconfirmed, and 2.3% of
#: the orders of candidates within the tolerance are called worse (0.4% at 95%), none of them confirmed at 95%: the
#: answer, training on everything, is the same.
FUTILITY = 0.2


def look_alpha(n: int, horizons: list[int]) -> float:
    """The error spent by the look after ``n`` paired seeds (``n`` from 2) under the plan's ``--seeds`` as first given
    and as each resumed plan extended it (``horizons``)."""
    first = horizons[0]
    if n < 2:
        return 0.0
    if n <= first:
        def cumulative(m: int) -> float:
            return 0.0 if m < 2 else MAIN_ALPHA * ((m - 1) / max(1, first - 1)) ** SHAPE
        return cumulative(n) - cumulative(n - 1)
    for i in range(1, len(horizons)):
        low, high = horizons[i - 1], horizons[i]
        if low < n <= high:
            return RESERVE_ALPHA * 0.5 ** i / (high - low)
    return 0.0


def _spread(diffs: list[float], quantile: float) -> tuple[float, float]:
    """The paired differences' mean and the Student-t half-width at ``quantile`` (infinite with one difference)."""
    from scipy.stats import t

    n, mean = len(diffs), statistics.fmean(diffs)
    if n < 2:
        return mean, math.inf
    se = statistics.stdev(diffs) / math.sqrt(n)
    return mean, float(t.ppf(quantile, n - 1)) * se


def look(diffs: list[float], alpha: float, tolerance: float, futility: float = FUTILITY) -> Look:
    """The paired differences' lower bound at level ``1 - alpha``: within when it lies above minus the tolerance; worse
    when the look's own two-sided ``1 - futility`` interval lies below it; else open.

    The bound is one-sided: the error the confirmation answers for is one way only (confirming a pick that loses more
    than the tolerance; a pick that wins by more than the interval says is no error), so the look spends all its
    ``alpha`` on the lower side. A two-sided interval spent half of it on an upper bound nothing reads: with 5 seeds a
    subset at +9.1 ± 2.6 points stayed "inconclusive" (the relevance regime's ``target-only``, whose truth is +15). The
    record's ``high`` mirrors ``low`` (the two-sided interval at ``1 - 2 alpha``), for reading only."""
    mean, half = _spread(diffs, 1 - alpha)
    low, high = mean - half, mean + half
    futile = mean + _spread(diffs, 1 - futility / 2)[1]
    says = "within" if low >= -tolerance else "worse" if futile < -tolerance else "open"
    return Look(len(diffs), alpha, mean, low, high, says)


def lean(diffs: list[float], tolerance: float, tested: int = 1, futility: float = FUTILITY) -> Look:
    """The last seed's reading of a confirmation the sequential looks left inconclusive: the paired differences'
    two-sided ``1 - futility / tested`` interval (the one that calls a pick worse, for one pick), "favoured" when it lies
    wholly above minus the tolerance, else "open".

    The confirming bound spends its alpha over every look, so at 5 seeds a close call is inconclusive where its seeds
    point one way: *compose*'s ``target-only`` at +3.50 ± 2.64 points over 5 seeds and 0.26 of the time, whose truth
    over 10 seeds is the regime's best, was answered "train on everything". Favoured, it is the answer with the seeds'
    own interval and the words "not confirmed", and ``--resume DIR --seeds N`` goes on confirming it.

    Its error: the interval's lower side is a one-sided ``1 - futility / 2`` bound (90% for one pick), split between
    the picks confirmed together as the confirming alpha is, so a pick whose true difference is exactly minus the
    tolerance is favoured at most 10% of the time (confirmed at most 5%); the answer says which it is. Replayed over
    every truth candidate's 5 seeds in every order (``python -m benchmarks confirm-replay``), no candidate beyond the
    tolerance is favoured in any order."""
    alpha = futility / max(1, tested)
    mean, half = _spread(diffs, 1 - alpha / 2)
    low, high = mean - half, mean + half
    return Look(len(diffs), alpha, mean, low, high, "favoured" if low >= -tolerance else "open")


def sequential(diffs: list[float], horizons: list[int], tolerance: float, tested: int = 1,
               futility: float = FUTILITY) -> tuple[list[Look], str]:
    """Every look over the seeds so far, and why the seeds stop ("" while they go on): the first look that is not open
    decides; at the last seed the horizon allows, an open look is inconclusive. ``tested``: how many candidates the
    confirmation holds against the baseline at once; each spends that share of the error (a union bound again), so the
    chance that any of them is confirmed while losing more than the tolerance stays within it. ``futility``: the level
    a look calls the pick worse at (``FUTILITY``; another only to replay the rule, ``benchmarks confirm-replay``)."""
    looks = []
    for n in range(2, len(diffs) + 1):
        seen = look(diffs[:n], look_alpha(n, horizons) / max(1, tested), tolerance, futility)
        looks.append(seen)
        if seen.says != "open":
            return looks, seen.says
    if len(diffs) >= horizons[-1]:
        return looks, "inconclusive"
    return looks, ""


def paired_points(values: list[float], opponent: str) -> Versus:
    """Mean, standard error and the 95% Student-t interval of per-seed differences (the comparison's own statistics,
    :func:`~siftcli.analysis.stats.paired`)."""
    p = paired(values)
    return Versus(opponent, p["mean"], p["se"], p["n"], (p["ci95"][0], p["ci95"][1]), values)


def random_subset(c: Candidate) -> str | None:
    """The random-subset opponent of a candidate that trains on a part of the pool."""
    if c.family in SUBSET_FAMILIES and c.pool_fraction is not None:
        return f"random-subset:fraction={round(c.pool_fraction, 4)}"
    return None


def seed_jobs(picks: list[Candidate], k: int, seed: int, baseline: bool) -> list[Job]:
    """The ``k``-th confirming seed's baseline (``baseline``), or the picks still being confirmed and their random
    subsets (one job for a random subset two picks share)."""
    first, second = confirm_phases(k)
    if baseline:
        return [Job(first, "baseline", 1.0, seed, "evaluation")]
    arms = dict.fromkeys(arm for c in picks for arm in filter(None, (c.arm, random_subset(c))))
    return [Job(second, arm, 1.0, seed, "evaluation") for arm in arms]


def confirmation(c: Candidate, seeds: list[int], results: dict[int, Result], metric: Any, tolerance: float,
                 horizons: list[int], tested: int = 1) -> Confirmation:
    """The candidate's paired differences against the baseline (and its random subset) over the seeds trained so far,
    the looks (at its share of the error where ``tested`` candidates are confirmed together), and why the seeds
    stopped."""
    def run(arm: str, s: int) -> RunMetrics | None:
        r = find(results, arm, 1.0, s, "evaluation")
        return r.run if r is not None else None

    def cost(arm: str) -> float:
        return sum(r.seconds for r in results.values() if r.job.split == "evaluation" and r.job.arm == arm)

    trained = [s for s in seeds if find(results, c.arm, 1.0, s, "evaluation") is not None]
    opponents = ["baseline", *filter(None, [random_subset(c)])]
    versus = [_versus(c.arm, o, trained, run, metric) for o in opponents]
    ok = [s for s in trained if run(c.arm, s) and run("baseline", s)]
    ratios = [paid_seconds(run(c.arm, s)) / max(1e-9, paid_seconds(run("baseline", s))) for s in ok]  # type: ignore[arg-type]
    ratio = statistics.fmean(ratios) if ratios else float("nan")
    pick = [final_value(run(c.arm, s)) if run(c.arm, s) else None for s in trained]  # type: ignore[arg-type]
    base = [final_value(run("baseline", s)) if run("baseline", s) else None for s in trained]  # type: ignore[arg-type]
    failed = len(ok) < len(trained)
    looks, stopped = sequential(versus[0].values, horizons, tolerance, tested) if not failed else ([], "failed")
    if stopped in ("", "inconclusive") and len(ratios) >= 2 and min(ratios) > FASTER:
        stopped = "slower"  # every seed took over FASTER of its baseline's time: whatever its accuracy, it cannot pay
    last = lean(versus[0].values, tolerance, tested) if stopped == "inconclusive" else None
    return Confirmation(c.arm, trained, pick, base, ratio, sum(cost(a) for a in opponents[1:] + [c.arm]), versus,
                        stopped == "within", looks, stopped, last)


def _versus(arm: str, opponent: str, seeds: list[int], run: Any, metric: Any) -> Versus:
    diffs = []
    for s in seeds:
        a, b = run(arm, s), run(opponent, s)
        d = diff_points(final_value(a), final_value(b), metric) if a and b else None
        if d is not None:
            diffs.append(d)
    return paired_points(diffs, opponent) if diffs else Versus(opponent, float("nan"), float("nan"), 0, (float("nan"),) * 2, [])
