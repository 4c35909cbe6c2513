"""Candidates, a budget and the finished jobs in; the next phase's jobs and every candidate's trials out: successive
halving by evidence, every family screened first.

The plan never trains a full-schedule run to choose: it screens every candidate at a small share of its own schedule
(``SCREEN``, fully decayed there, on the validation half), beside two baselines at the same rung whose spread is the
rung's noise; promotes the best families by their paired gap to that baseline (ties, gaps within the noise, broken by
the predicted time) to a second rung (``PROMOTION``) when more than one is left; and hands the winner to the
confirmation (:mod:`siftcli.plan.confirm`), which trains at the full schedule on fresh seeds. A family is dropped only
when its gap is beyond the tolerance *and* its noise, so a rung too short to tell two families apart keeps both.

The unit of cost is one full baseline run: predicted from the screen's baseline (its training clock scaled up to the
whole schedule) until the confirmation trains one, measured after. A job is queued only while its prediction fits the
budget; a candidate that does not fit is listed with its predicted cost, never left out silently.

Every function here is a decision on data (the record, the finished jobs); :mod:`siftcli.plan.trials` trains a job and
:mod:`siftcli.plan.study` shares them between processes, so several machines follow the same rules on the same study.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from siftcli.analysis.stats import diff_points
from siftcli.errors import RunInterrupted
from siftcli.plan.record import Candidate, PlannerNotes, PlanRecord, Trial
from siftcli.plan.study import Job, Result
from siftcli.recipe.schema import Recipe
from siftcli.training.record import RunMetrics, final_value, paid_seconds

#: The screening rung: every candidate trains this share of its own schedule (a filter at a quarter of the pool: a
#: thirty-second of the baseline's steps), schedule fully decayed there.
SCREEN = 1 / 8
#: The second rung, for the families the screen could not tell apart.
PROMOTION = 1 / 3
#: The screen's second baseline trains from this seed (offset from the plan's; the confirmation's are seed + 1 ...).
NOISE_SEED = 1000
#: At most this many families reach the second rung (and at least half of those screened, rounded up, while they last).
PROMOTE = 3
#: Gaps within this many standard errors of the noise count as ties (ranked by predicted time) or as not yet worse.
Z = 2.0
#: Faster means at most this share of the baseline's time: a saving within a run's timing noise (a dedup of a pool
#: with hardly any near-copies, 0.99 of the time) is no reason to change a recipe.
FASTER = 0.95
#: The least a search may spend, whatever ``--budget`` says in runs (:func:`budget_seconds`).
MIN_BUDGET_SECONDS = 10.0
#: The plan's search phases, in order; the confirmation's phases follow (two per seed: its baseline, then the pick).
BASELINES, SCREENING, PROMOTION_BASELINE, PROMOTING = range(4)
CONFIRMING = 4
RUNGS = (SCREEN, PROMOTION)


def confirm_phases(k: int) -> tuple[int, int]:
    """The phases of the confirmation's ``k``-th seed: its baseline, then the pick (and its random subset)."""
    return CONFIRMING + 2 * k, CONFIRMING + 2 * k + 1


def is_search(phase: int) -> bool:
    return phase < CONFIRMING


def at_fidelity(recipe: Recipe, fidelity: float) -> Recipe:
    """The recipe trained for ``fidelity`` of its epochs, schedule fully decayed there (one evaluation, at the end)."""
    if fidelity >= 1:
        return recipe
    return recipe.model_copy(update={
        "epochs": recipe.epochs * fidelity, "max_steps": None, "checkpoint_every_steps": None,
        "eval": recipe.eval.model_copy(update={"every_steps": None, "every_seconds": None, "per_epoch": False})})


# -- cost -----------------------------------------------------------------------------------------------------------
def unit_from(job_seconds: float, run: RunMetrics, fidelity: float) -> float:
    """A full baseline run's seconds, from a baseline job trained for ``fidelity`` of the schedule: its training clock
    scaled to the whole schedule, its setup and evaluation as they were."""
    return job_seconds + float(run["train_seconds"]) * (1 / fidelity - 1)


def budget_seconds(record: PlanRecord) -> float:
    """The search's budget in seconds: ``--budget`` baseline runs, and never less than ``MIN_BUDGET_SECONDS`` (on a
    recipe whose run takes a second, a job's setup and evaluation are most of its cost, and a budget in runs would
    screen nothing)."""
    return max(record.budget * (record.baseline_seconds or 0.0), MIN_BUDGET_SECONDS)


def predicted_cost(candidate: Candidate, unit: float, fidelity: float, reference_paid: bool = False,
                   setup: float = 0.0) -> float:
    """Seconds a trial should take: once a lower rung ran, that rung's measured training (its reference's build and the
    job's setup taken out) scaled up; before, its share of the pool plus its extra cost (a scoring forward) of a
    baseline run's training at ``fidelity``, plus its reference's build (the same at any rung) unless another candidate
    of this seed paid it; and a job's setup (``setup``: building the run, evaluating it)."""
    ran = [t for t in candidate.trials if t.status == "complete" and t.fidelity < fidelity]
    if ran:
        t = ran[-1]
        return setup + max(0.0, t.seconds - t.fixed_seconds - setup) * fidelity / t.fidelity
    share = candidate.pool_fraction if candidate.pool_fraction is not None else 1.0
    return setup + (unit - setup) * fidelity * (share + candidate.extra_cost) + \
        (0.0 if reference_paid else unit * candidate.fixed_cost)


def full_time(candidate: Candidate, unit: float) -> float:
    """Its predicted full-schedule seconds, the reference paid (what ties are broken by and what must beat the unit):
    the highest rung's time ratio scaled to the whole schedule, or before any rung its shares of a run."""
    ran = [t for t in candidate.trials if t.status == "complete" and t.predicted_ratio is not None]
    if ran:
        return unit * ran[-1].predicted_ratio  # type: ignore[operator]
    share = candidate.pool_fraction if candidate.pool_fraction is not None else 1.0
    return unit * (share + candidate.extra_cost + candidate.fixed_cost)


def breadth_first(candidates: list[Candidate], unit: float) -> list[Candidate]:
    """The screen's order: each family's cheapest first, families by that cost, then each family's next, ... so a
    budget that runs out leaves every family screened rather than every setting of the cheapest one."""
    families: dict[str, list[Candidate]] = {}
    for c in sorted(candidates, key=lambda c: predicted_cost(c, unit, SCREEN)):
        families.setdefault(c.family, []).append(c)
    order: list[Candidate] = []
    while any(families.values()):
        for members in families.values():
            if members:
                order.append(members.pop(0))
    return order


def spent(results: dict[int, Result], phases: Callable[[int], bool], extra: PlannerNotes) -> float:
    """What the jobs of the ``phases`` cost (each process's seconds, summed), plus the planners' own work for the
    search."""
    own = sum(float(v) for v in extra.get("planner_seconds", {}).values()) if phases(BASELINES) else 0.0
    return own + sum(r.seconds for r in results.values() if phases(r.job.phase))


# -- evidence --------------------------------------------------------------------------------------------------------
def find(results: dict[int, Result], arm: str, fidelity: float, seed: int, split: str) -> Result | None:
    """The finished job of ``arm`` at ``fidelity`` for ``seed`` on ``split``."""
    return next((r for r in results.values() if r.job.arm == arm and r.job.fidelity == fidelity
                 and r.job.seed == seed and r.job.split == split), None)


def rung_baselines(results: dict[int, Result], seed: int, fidelity: float) -> list[float]:
    """The baseline's validation metric at ``fidelity``, each seed that trained it there."""
    out = []
    for s in (seed, seed + NOISE_SEED):
        r = find(results, "baseline", fidelity, s, "validation")
        value = final_value(r.run) if r is not None and r.run else None
        if value is not None:
            out.append(value)
    return out


def noise_points(values: list[float], metric: Any, rows: int) -> float:
    """One run's noise at a rung, in metric points: the spread of the baselines' seeds there, never below what the
    validation rows alone allow (a proportion's binomial standard error, for a metric that counts hits)."""
    spread = statistics.stdev(values) * metric.scale if len(values) > 1 else 0.0
    floor = 0.0
    if metric.counts_correct and values and rows > 0:
        p = min(max(statistics.fmean(values), 0.0), 1.0)
        floor = math.sqrt(max(p * (1 - p), 1 / rows) / rows) * metric.scale
    return max(spread, floor)


def trial_at(c: Candidate, fidelity: float) -> Trial | None:
    return next((t for t in c.trials if t.fidelity == fidelity and t.status == "complete"), None)


def dropped(t: Trial, tolerance: float) -> bool:
    """Worse than the baseline at its rung by more than the tolerance and its noise together: the one way a family
    leaves the search on evidence."""
    return t.gap is None or t.gap < -(tolerance + Z * (t.noise or 0.0))


def order(candidates: list[Candidate], fidelity: float, unit: float) -> list[Candidate]:
    """Best first at a rung: those whose gap is within the noise of the best gap (ties), cheapest predicted time first,
    then the rest by gap."""
    scored = [(c, trial_at(c, fidelity)) for c in candidates]
    scored = [(c, t) for c, t in scored if t is not None and t.gap is not None]
    if not scored:
        return []
    top = max(t.gap for _, t in scored)  # type: ignore[type-var]
    tied = [c for c, t in scored if t.gap >= top - Z * (t.noise or 0.0)]  # type: ignore[operator]
    rest = sorted((c for c, _ in scored if c not in tied), key=lambda c: -trial_at(c, fidelity).gap)  # type: ignore[union-attr,operator]
    return sorted(tied, key=lambda c: full_time(c, unit)) + rest


def ranked(record: PlanRecord, fidelity: float) -> list[Candidate]:
    """The families at a rung, each by its best member, best first (:func:`order`), those dropped on evidence and those
    not faster than the baseline (predicted over ``FASTER`` of its time) left out."""
    unit = record.baseline_seconds or 0.0
    alive = [c for c in record.candidates if (t := trial_at(c, fidelity)) is not None and not dropped(t, record.tolerance)
             and full_time(c, unit) <= FASTER * unit]
    families: dict[str, list[Candidate]] = {}
    for c in alive:
        families.setdefault(c.family, []).append(c)
    return order([order(members, fidelity, unit)[0] for members in families.values()], fidelity, unit)


def promoted(record: PlanRecord) -> list[Candidate]:
    """Successive halving after the screen: the better half of the families left (at most ``PROMOTE``), best first."""
    families = ranked(record, SCREEN)
    return families[:min(PROMOTE, max(1, math.ceil(len(families) / 2)))] if len(families) > 1 else []


def winner(record: PlanRecord) -> Candidate | None:
    """What the search hands to the confirmation: the best family at the highest rung it reached (a family left alone
    by the screen goes straight on), unless every family was dropped there on evidence. A gap below the tolerance but
    within its noise is not evidence against a family: the confirmation, at the full schedule, decides."""
    for fidelity in (PROMOTION, SCREEN):
        if fidelity == PROMOTION and not any(trial_at(c, PROMOTION) for c in record.candidates):
            continue
        best = ranked(record, fidelity)
        return best[0] if best else None
    return None


# -- the phases' decisions -------------------------------------------------------------------------------------------
def search_baselines(seed: int) -> list[Job]:
    """The baseline at the screen, from two seeds: the yardstick of every screened candidate and its noise."""
    return [Job(BASELINES, "baseline", SCREEN, s, "validation") for s in (seed, seed + NOISE_SEED)]


def screen_jobs(record: PlanRecord, seed: int, spent_so_far: float) -> tuple[list[Job], dict[str, float]]:
    """Breadth first while the predicted cost fits the budget, room kept for the second rung; and the predicted seconds
    of each candidate that did not fit."""
    unit, setup = record.baseline_seconds or 0.0, record.setup_seconds
    room = budget_seconds(record) - spent_so_far - (setup + (unit - setup) * PROMOTION) * 2
    jobs, over, paid = [], {}, set()
    for c in breadth_first(record.candidates, unit):
        cost = predicted_cost(c, unit, SCREEN, c.reference in paid, setup)
        if cost <= room:
            room -= cost
            jobs.append(Job(SCREENING, c.arm, SCREEN, seed, "validation"))
            paid.add(c.reference)
        else:
            over[c.arm] = cost
    return jobs, over


def promotion_jobs(record: PlanRecord, seed: int, spent_so_far: float) -> tuple[list[Job], list[str], dict[str, float]]:
    """The second rung, decided at once: its baseline and the promoted families, cheapest first, while their
    predictions fit; the rung is skipped (the screen decides) unless the baseline and two families fit. Returns the
    baseline's job, the arms to train after it, and the predicted seconds of those that did not fit."""
    unit, setup = record.baseline_seconds or 0.0, record.setup_seconds
    chosen = promoted(record)
    room = budget_seconds(record) - spent_so_far - (setup + (unit - setup) * PROMOTION)
    costs = {c.arm: predicted_cost(c, unit, PROMOTION, True, setup) for c in chosen}
    arms = []
    for arm, cost in costs.items():
        if cost <= room:
            room -= cost
            arms.append(arm)
    if len(arms) < 2:  # a rung of one family would compare it with itself: the screen decides
        return [], [], costs
    over = {arm: cost for arm, cost in costs.items() if arm not in arms}
    return [Job(PROMOTION_BASELINE, "baseline", PROMOTION, seed, "validation")], arms, over


# -- the record, from the finished jobs ------------------------------------------------------------------------------
def fill_search(record: PlanRecord, jobs: list[Job], results: dict[int, Result], extra: PlannerNotes, seed: int,
                metric: Any) -> None:
    """Every candidate's trials and outcome, the unit and the screen's baseline, from the study (the same on every
    process)."""
    base = find(results, "baseline", SCREEN, seed, "validation")
    if base is not None and base.run is not None:
        record.setup_seconds = max(0.0, base.seconds - float(base.run["train_seconds"]))
        if record.unit_source != "measured":
            record.baseline_seconds = unit_from(base.seconds, base.run, SCREEN)
            record.unit_source = "predicted"
    screen = rung_baselines(results, seed, SCREEN)
    record.baseline_metric = statistics.fmean(screen) if screen else None
    record.screen_noise = noise_points(screen, metric, record.validation_rows) if screen else None
    queued = {(j.arm, j.fidelity) for j in jobs if j.phase in (SCREENING, PROMOTING)}
    pools, fixed = extra.get("pools", {}), extra.get("fixed", {})
    rungs = {}  # per rung, what every candidate there is held against: the baselines' mean, its noise, its clock
    for fidelity in RUNGS:
        values = rung_baselines(results, seed, fidelity)
        b = find(results, "baseline", fidelity, seed, "validation")
        noise = noise_points(values if len(values) > 1 else screen, metric, record.validation_rows)
        rungs[fidelity] = (statistics.fmean(values) if values else None, noise * math.sqrt(1 + 1 / max(1, len(values))),
                           paid_seconds(b.run) if b is not None and b.run else None)  # type: ignore[arg-type]
    for c in record.candidates:
        c.pool_fraction = pools.get(c.arm, c.pool_fraction)
        c.fixed_cost = fixed.get(c.arm, c.fixed_cost)
        c.trials = []
        for fidelity in RUNGS:
            r = find(results, c.arm, fidelity, seed, "validation")
            if r is None:
                continue
            low, noise, base_paid = rungs[fidelity]
            if r.run is None:
                c.trials.append(Trial(c.arm, fidelity, r.seconds, None, low, None, "failed", r.error))
                continue
            value = final_value(r.run)
            ref = r.run.get("reference") or {}
            build = float(ref.get("build_seconds") or 0.0)
            paid = paid_seconds(r.run)  # type: ignore[arg-type]
            ratio = paid / base_paid if base_paid else None
            full = (paid - build + build * fidelity) / base_paid if base_paid else None
            c.trials.append(Trial(c.arm, fidelity, r.seconds, value, low, ratio, "complete",
                                  gap=diff_points(value, low, metric), noise=noise,
                                  fixed_seconds=float(ref.get("seconds") or 0.0), predicted_ratio=full))
            subset = r.run.get("subset")
            if c.pool_fraction is None and subset:
                c.pool_fraction = subset["samples"] / max(1, subset["of"])
        c.outcome = _outcome(c, record, queued, extra)


def _outcome(c: Candidate, record: PlanRecord, queued: set, extra: PlannerNotes) -> str:
    over = {**extra.get("over_budget", {})}
    unit = record.baseline_seconds or 0.0
    if not c.trials:
        if c.arm in over:
            return f"over budget: predicted {over[c.arm]:.0f} s at the screen"
        if (c.arm, SCREEN) in queued:
            return "screening"
        return "waiting"
    failed = next((t for t in c.trials if t.status == "failed"), None)
    if failed is not None:
        return "failed"
    last = c.trials[-1]
    rung = "screen" if last.fidelity == SCREEN else "rung 2"
    if dropped(last, record.tolerance):
        return f"dropped at the {rung}: worse beyond the tolerance and its noise"
    if full_time(c, unit) > FASTER * unit:
        return f"stopped at the {rung}: not faster than the baseline (predicted over {FASTER:g} of its time)"
    if last.fidelity == SCREEN and c.arm in extra.get("promoted", []):
        return "promoted: rung 2"
    if last.fidelity == SCREEN and c.arm in extra.get("over_budget_promotion", {}):
        return (f"promoted, over budget at rung 2 (predicted {extra['over_budget_promotion'][c.arm]:.0f} s): the screen "
                "decides")
    return f"stopped at the {rung}"


def measure(candidates: list[Candidate], derive: Callable[[str], list[int] | None], n: int,
            reference_cost: Callable[[str], float]) -> tuple[dict[str, float], dict[str, float]]:
    """What the plan can know before any candidate trains, on the planner's clock: the share of the pool each dedup
    and target-group candidate keeps (a near-duplicate search takes seconds), and each reference's build in runs."""
    pools, fixed = {}, {}
    for c in candidates:
        if c.reference is not None:
            fixed[c.arm] = reference_cost(c.reference)
        if c.pool_fraction is None and c.family in ("dedup", "dedup+filter", "target-only"):
            try:
                subset = derive(c.arm)
            except RunInterrupted:
                raise
            except Exception:  # noqa: BLE001  (the trial will fail the same way and record why)
                continue
            if subset is not None:
                pools[c.arm] = len(subset) / max(1, n)
    return pools, fixed
