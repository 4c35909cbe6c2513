"""The search's best candidates in, their confirmation on the evaluation split out: paired seeds against the full baseline
and a random subset of the same size.

Each seed is a fresh one (not the search's), with its own initial weights and data order shared by its arms; the rows
measured here were never used to choose. A candidate is confirmed when the 95% interval of its paired difference to the
baseline stays above minus the tolerance. The seeds' baselines train first (a phase of their own: training less derives
its steps from them), then the candidates and their random subsets.
"""

from __future__ import annotations

import statistics
from typing import Any

from siftcli.analysis.stats import diff_points, paired
from siftcli.plan.record import Candidate, Confirmation, Versus
from siftcli.plan.search import CONFIRM, CONFIRM_BASELINES, find
from siftcli.plan.study import Job, Result
from siftcli.training.record import RunMetrics, final_value, paid_seconds

#: Candidates that train on a part of the pool; the confirmation holds them against a random part of the same size.
SUBSET_FAMILIES = ("filter", "dedup", "dedup+filter")


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


def confirm_baselines(seeds: list[int]) -> list[Job]:
    return [Job(CONFIRM_BASELINES, "baseline", 1.0, s, "evaluation") for s in seeds]


def candidate_jobs(candidates: list[Candidate], seeds: list[int]) -> list[Job]:
    """Each candidate and, for a subset, its random subset, seed by seed."""
    jobs: list[Job] = []
    for s in seeds:
        for c in candidates:
            for arm in filter(None, (c.arm, random_subset(c))):
                job = Job(CONFIRM, arm, 1.0, s, "evaluation")
                if job not in jobs:
                    jobs.append(job)
    return jobs


def confirmation(c: Candidate, seeds: list[int], results: dict[int, Result], metric: Any, tolerance: float) -> Confirmation:
    """The candidate's paired differences against the baseline (and its random subset) over ``seeds``."""
    def run(arm: str, s: int) -> RunMetrics | None:
        r = find(results, arm, 1.0, s, "evaluation")
        return r.run if r is not None else None

    def cost(arm: str) -> float:
        return sum(r.seconds for r in results.values() if r.job.split == "evaluation" and r.job.arm == arm)

    opponents = ["baseline", *filter(None, [random_subset(c)])]
    versus = [_versus(c.arm, o, seeds, run, metric) for o in opponents]
    ok = [s for s in seeds if run(c.arm, s) and run("baseline", s)]
    ratio = statistics.fmean(paid_seconds(run(c.arm, s)) / max(1e-9, paid_seconds(run("baseline", s)))  # type: ignore[arg-type]
                             for s in ok) if ok else float("nan")
    pick = [final_value(run(c.arm, s)) if run(c.arm, s) else None for s in seeds]  # type: ignore[arg-type]
    base = [final_value(run("baseline", s)) if run("baseline", s) else None for s in seeds]  # type: ignore[arg-type]
    vs_base = versus[0]
    return Confirmation(c.arm, list(seeds), pick, base, ratio, sum(cost(a) for a in opponents[1:] + [c.arm]), versus,
                        vs_base.n > 1 and vs_base.ci95[0] >= -tolerance)


def _versus(arm: str, opponent: str, seeds: list[int], run: Any, metric: Any) -> Versus:
    diffs = []
    for s in seeds:
        a, b = run(arm, s), run(opponent, s)
        d = diff_points(final_value(a), final_value(b), metric) if a and b else None
        if d is not None:
            diffs.append(d)
    return paired_points(diffs, opponent) if diffs else Versus(opponent, float("nan"), float("nan"), 0, (float("nan"),) * 2, [])
