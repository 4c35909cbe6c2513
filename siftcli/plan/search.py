"""Candidates, a budget and the finished jobs in; the next phase's jobs and every candidate's trials out: successive
halving, cheap first.

The unit is one full baseline run, trained first (its clock, evaluation included, is the plan's yardstick). The cheap
rung trains every candidate for a third of its own schedule (``FIDELITY``), in an order that reaches each family's
cheapest member first, while the predicted cost stays under ``RUNG0_SHARE`` of the budget; the candidates within the
tolerance of the baseline at that fidelity (else the two best) are promoted, cheapest first, to the full schedule while
the budget lasts. A job is only queued when its prediction fits, so the search can exceed the budget only by jobs that
run over their prediction, and the record shows by how much.

Every function here is a decision on data (the record, the finished jobs); :mod:`siftcli.plan.trials` trains a job and
:mod:`siftcli.plan.study` shares them between processes, so several machines follow the same rules on the same study.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from siftcli.analysis.stats import diff_points
from siftcli.errors import RunInterrupted
from siftcli.plan.record import Candidate, PlannerNotes, PlanRecord, Trial
from siftcli.plan.study import Job, Result
from siftcli.recipe.schema import Recipe
from siftcli.training.record import final_value, paid_seconds

#: The cheap rung trains each candidate for this share of its own schedule.
FIDELITY = 1 / 3
#: The cheap rung may spend up to this share of the budget; the rest is for the full-schedule runs of the promoted.
RUNG0_SHARE = 0.6
#: At most this many candidates reach the full schedule.
PROMOTE = 3
#: The plan's phases, in order: the jobs of each are decided once the previous phase's have finished.
BASELINES, CHEAP, FULL, CONFIRM_BASELINES, CONFIRM = range(5)
SEARCH_PHASES = (BASELINES, CHEAP, FULL)


def at_fidelity(recipe: Recipe, fidelity: float) -> Recipe:
    """The recipe trained for ``fidelity`` of its epochs, schedule fully decayed there (one evaluation, at the end)."""
    if fidelity >= 1:
        return recipe
    return recipe.model_copy(update={
        "epochs": recipe.epochs * fidelity, "max_steps": None, "checkpoint_every_steps": None,
        "eval": recipe.eval.model_copy(update={"every_steps": None, "every_seconds": None, "per_epoch": False})})


def predicted_cost(candidate: Candidate, unit: float, fidelity: float) -> float:
    """Seconds a trial should take: its share of the pool plus its extra cost (the scoring forward of online sifting) of
    a baseline run, or, once a lower rung ran, that rung's measured seconds scaled up."""
    ran = [t for t in candidate.trials if t.status == "complete" and t.fidelity < fidelity]
    if ran:
        return ran[-1].seconds * fidelity / ran[-1].fidelity
    share = candidate.pool_fraction if candidate.pool_fraction is not None else 1.0
    return unit * fidelity * (share + candidate.extra_cost)


def breadth_first(candidates: list[Candidate], unit: float) -> list[Candidate]:
    """The cheap rung's order: each family's cheapest first, families by that cost, then each family's next, ... so a
    budget that runs out leaves every family represented rather than every setting of the cheapest one."""
    families: dict[str, list[Candidate]] = {}
    for c in sorted(candidates, key=lambda c: predicted_cost(c, unit, FIDELITY)):
        families.setdefault(c.family, []).append(c)
    order: list[Candidate] = []
    while any(families.values()):
        for members in families.values():
            if members:
                order.append(members.pop(0))
    return order


def within(value: float | None, baseline: float | None, tolerance_points: float, metric: Any) -> bool:
    """Whether ``value`` is no more than ``tolerance_points`` (in the metric's reporting unit) worse than ``baseline``."""
    gap = diff_points(value, baseline, metric)
    return gap is not None and gap >= -tolerance_points


def find(results: dict[int, Result], arm: str, fidelity: float, seed: int, split: str) -> Result | None:
    """The finished job of ``arm`` at ``fidelity`` for ``seed`` on ``split``."""
    return next((r for r in results.values() if r.job.arm == arm and r.job.fidelity == fidelity
                 and r.job.seed == seed and r.job.split == split), None)


def spent(results: dict[int, Result], phases: tuple[int, ...], extra: PlannerNotes) -> float:
    """What the jobs of ``phases`` cost (each process's seconds, summed), plus the planners' own work for the search."""
    own = sum(float(v) for v in extra.get("planner_seconds", {}).values()) if BASELINES in phases else 0.0
    return own + sum(r.seconds for r in results.values() if r.job.phase in phases)


# -- the phases' decisions -------------------------------------------------------------------------------------------
def search_baselines(seed: int) -> list[Job]:
    """The yardstick (the full baseline) and the baseline the cheap rung is held against."""
    return [Job(BASELINES, "baseline", 1.0, seed, "validation"), Job(BASELINES, "baseline", FIDELITY, seed, "validation")]


def cheap_jobs(record: PlanRecord, seed: int, spent_so_far: float) -> list[Job]:
    """Breadth first while the predicted cost stays under ``RUNG0_SHARE`` of the budget (the rest: over budget)."""
    unit = record.baseline_seconds or 0.0
    room = RUNG0_SHARE * record.budget * unit - spent_so_far
    jobs = []
    for c in breadth_first(record.candidates, unit):
        cost = predicted_cost(c, unit, FIDELITY)
        if cost <= room:
            room -= cost
            jobs.append(Job(CHEAP, c.arm, FIDELITY, seed, "validation"))
    return jobs


def promoted(record: PlanRecord, metric: Any) -> list[Candidate]:
    """The cheap rung's survivors, cheapest predicted first: within the tolerance of the baseline at that fidelity, or,
    when none is, the two best."""
    tried = [c for c in record.candidates if _cheap(c) is not None]
    ok = sorted([c for c in tried if _ok_cheap(c, record.tolerance, metric)],
                key=lambda c: predicted_cost(c, record.baseline_seconds or 0.0, 1.0))
    if ok:
        return ok[:PROMOTE]
    def goodness(c: Candidate) -> float:
        value = _cheap(c).metric  # type: ignore[union-attr]
        return float("-inf") if value is None else value if metric.higher_is_better else -value
    return sorted(tried, key=goodness, reverse=True)[:2]


def full_jobs(record: PlanRecord, seed: int, metric: Any, spent_so_far: float) -> tuple[list[Job], list[str]]:
    """The promoted at the full schedule while their predictions fit the budget; and those that did not fit."""
    room = record.budget * (record.baseline_seconds or 0.0) - spent_so_far
    jobs, over = [], []
    for c in promoted(record, metric):
        cost = predicted_cost(c, record.baseline_seconds or 0.0, 1.0)
        if cost <= room:
            room -= cost
            jobs.append(Job(FULL, c.arm, 1.0, seed, "validation"))
        else:
            over.append(c.arm)
    return jobs, over


def winners(record: PlanRecord) -> list[Candidate]:
    """Full-schedule candidates within the tolerance of the full baseline and faster, cheapest first."""
    won = [c for c in record.candidates if c.outcome == "full: within tolerance, faster"]
    return sorted(won, key=lambda c: next(t.time_ratio for t in c.trials if t.fidelity == 1.0) or 1.0)


# -- the record, from the finished jobs ------------------------------------------------------------------------------
def fill_search(record: PlanRecord, jobs: list[Job], results: dict[int, Result], extra: PlannerNotes, seed: int,
                metric: Any) -> None:
    """Every candidate's trials and outcome, and the baseline's numbers, from the study (the same on every process)."""
    base = find(results, "baseline", 1.0, seed, "validation")
    if base is not None and base.run is not None:
        record.baseline_seconds = base.run["total_seconds"]
        record.baseline_metric = final_value(base.run)  # type: ignore[arg-type]
    unit = paid_seconds(base.run) if base is not None and base.run is not None else None  # type: ignore[arg-type]
    queued = {(j.arm, j.fidelity) for j in jobs if j.phase in (CHEAP, FULL)}
    phases = {j.phase for j in jobs}
    pools = extra.get("pools", {})
    for c in record.candidates:
        c.pool_fraction = pools.get(c.arm, c.pool_fraction)
        c.trials = []
        for fidelity in (FIDELITY, 1.0):
            r = find(results, c.arm, fidelity, seed, "validation")
            if r is None:
                continue
            low = find(results, "baseline", fidelity, seed, "validation")
            low_metric = final_value(low.run) if low is not None and low.run else None  # type: ignore[arg-type]
            if r.run is None:
                c.trials.append(Trial(c.arm, fidelity, r.seconds, None, low_metric, None, "failed", r.error))
                continue
            c.trials.append(Trial(c.arm, fidelity, r.seconds, final_value(r.run), low_metric,  # type: ignore[arg-type]
                                  paid_seconds(r.run) / max(1e-9, unit or 1.0), "complete"))  # type: ignore[arg-type]
            subset = r.run.get("subset")
            if c.pool_fraction is None and subset:
                c.pool_fraction = subset["samples"] / max(1, subset["of"])
        c.outcome = _outcome(c, record, queued, phases, extra, metric)


def _outcome(c: Candidate, record: PlanRecord, queued: set, phases: set[int], extra: PlannerNotes, metric: Any) -> str:
    full = next((t for t in c.trials if t.fidelity == 1.0), None)
    if full is not None:
        if full.status != "complete":
            return "failed"
        if not within(full.metric, record.baseline_metric, record.tolerance, metric):
            return "full: worse"
        if full.time_ratio is None or full.time_ratio >= 1:
            return "full: not faster"
        return "full: within tolerance, faster"
    if (c.arm, 1.0) in queued:
        return "running (full)"
    if CHEAP in phases and (c.arm, FIDELITY) not in queued:
        return "over budget (cheap rung)"
    cheap = _cheap(c)
    if cheap is None:
        failed = next((t for t in c.trials if t.status == "failed"), None)
        return "failed" if failed is not None else ("running (cheap rung)" if CHEAP in phases else "waiting")
    if FULL not in phases:
        return "cheap rung done"
    if c.arm in extra.get("over_budget_full", []):
        return "over budget (full)"
    return "stopped at the cheap rung" + ("" if _ok_cheap(c, record.tolerance, metric) else ": worse")


def _cheap(c: Candidate) -> Trial | None:
    return next((t for t in c.trials if t.fidelity == FIDELITY and t.status == "complete"), None)


def _ok_cheap(c: Candidate, tolerance: float, metric: Any) -> bool:
    t = _cheap(c)
    return t is not None and within(t.metric, t.baseline_metric, tolerance, metric)


def measure_pools(candidates: list[Candidate], derive: Callable[[str], list[int] | None], n: int) -> dict[str, float]:
    """The share of the pool each dedup candidate keeps, found before any of them trains (the near-duplicate search
    takes seconds, on the planner's clock), so its predicted cost is its real size and not the whole pool's."""
    pools = {}
    for c in candidates:
        if c.pool_fraction is None and c.family in ("dedup", "dedup+filter"):
            try:
                subset = derive(c.arm)
            except RunInterrupted:
                raise
            except Exception:  # noqa: BLE001  (the trial will fail the same way and record why)
                continue
            if subset is not None:
                pools[c.arm] = len(subset) / max(1, n)
    return pools
