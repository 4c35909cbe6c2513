"""Candidates, a budget and the finished jobs in; the next phase's jobs and every candidate's trials out: successive
halving by evidence, every family screened first, at a rung where the baseline has learned something.

The plan never trains a full-schedule run to choose: it screens every candidate as a small experiment (fully decayed,
on the validation half) beside two baselines at a small share of the schedule whose spread is the rung's noise, each
candidate trained to as many optimizer steps as that baseline (a subset over a larger share of its own schedule,
``STEP_MATCHED``); promotes the best families by their paired gap to that baseline on a continuous signal (the
validation loss for accuracy: :func:`signal_of`; ties, gaps within the noise, broken by the predicted time) to a second
rung when more than one is left; and hands the winner (with a runner-up it could not tell from it) to the confirmation
(:mod:`siftcli.plan.confirm`), which trains at the full schedule on fresh seeds. A family is dropped only when its gap
is beyond the tolerance *and* its noise, so a rung too short to tell two families apart keeps both.

A rung says something only where the baseline there has left the untrained level (the validation metric of the seed's
initial weights, or of always answering the commonest label): a model trained from scratch sits there for the first
part of its schedule, and every candidate ties with it. So the screen's rung starts at an eighth of the schedule and is
doubled (``PROBES``, one baseline each) while the baseline there has learned nothing and the budget keeps a third of
itself for the candidates; and a trial with fewer optimizer steps than the baseline had when it first learned is "too
short to tell" (:attr:`Trial.informative`) unless it beat that baseline, never dropped for it.

The unit of cost is one full baseline run: predicted from the first probe (its training clock scaled up to the whole
schedule) until the confirmation trains one, measured after. A job is queued only while its prediction fits the
budget; a candidate that does not fit is listed with its predicted cost, never left out silently; and a candidate's
job whose prediction (scaled by the most any finished job ran over its own: :func:`drift`) would take the search 10% beyond
its budget is not trained (``BUDGET_SLACK``), and says so.

Every function here is a decision on data (the record, the finished jobs); :mod:`siftcli.plan.trials` trains a job and
:mod:`siftcli.plan.study` shares them between processes, so several machines follow the same rules on the same study.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from siftcli.analysis.stats import diff_points
from siftcli.plan.costs import (
    budget_seconds,
    full_time,
    job_cost,
    measured_below,
    predicted_cost,
    steps_share,
)
from siftcli.plan.record import Candidate, PlannerNotes, PlanRecord, Trial
from siftcli.plan.strategies import SCORING_GUESS
from siftcli.plan.study import Job, Result
from siftcli.recipe.schema import Recipe
from siftcli.training.record import final_value

#: The first screening rung: the baseline trains this share of its schedule, fully decayed there; a candidate that
#: trains fewer steps by design (``STEP_MATCHED``) trains as many steps as it, a larger share of its own schedule.
SCREEN = 1 / 8
#: The families whose training is a share of the baseline's steps fixed by their data or their rule (a subset, online
#: sifting's kept share): a small experiment of theirs trains as many optimizer steps as the baseline it is held
#: against (a filter of a quarter of the pool: twice its own rung; its full schedule when that is reached), never
#: fewer. Held to the same rung share instead, a filter at a quarter trained a thirty-second of the baseline's steps,
#: scored below the untrained level and counted as evidence against it. Training less is the baseline at fewer steps:
#: at as many steps as the baseline it would be the baseline, so it stays at the rung (and is no evidence there).
STEP_MATCHED = ("filter", "dedup", "dedup+filter", "target-only", "online")
#: The search trains no candidate's job that its prediction says would take it beyond this share of its budget (jobs
#: run over their predictions: a busy machine, a unit predicted short); what it did not reach is listed as such.
BUDGET_SLACK = 1.1
#: What a search job not trained for want of budget records as its error (and the outcome says).
SKIPPED = "not run"
#: A trial is evidence only with at least this share of the optimizer steps the screen's baseline had when it first
#: left the untrained level (rounding, and online sifting's kept share varying around its target, take a few).
EVIDENCE_STEPS = 0.9
#: The rungs the screen's baseline is tried at, in turn, while it has not left the untrained level.
PROBES = (SCREEN, 1 / 4, 1 / 2)
#: A deeper probe is taken while it and the screen's noise baseline there leave the search this share of its budget
#: spent at most: a screen at a rung where the baseline learned nothing says nothing, so the budget goes to finding
#: one that learned before it goes to candidates, as long as a third of it is left for them.
DEEPEN_SHARE = 2 / 3
#: The second rung, for the families the screen could not tell apart (or could not tell at all: too short), is this
#: many times the screen's (its baseline may be a probe already trained); none when that reaches the full schedule
#: (the confirmation trains it).
PROMOTION_STEP = 2
#: The screen's second baseline trains from this seed (offset from the plan's; the confirmation's are seed + 1 ...).
NOISE_SEED = 1000
#: At most this many families reach the second rung (and at least half of those screened, rounded up, while they last).
PROMOTE = 3
#: Gaps within this many standard errors of the noise count as ties (ranked by predicted time) or as not yet worse.
Z = 2.0
#: At most this many families are confirmed together: the search's best and the runner-up its last rung could not tell
#: from it (:func:`contenders`); each is tested at this share's part of the confirmation's error.
CONFIRM_TIED = 2
#: Faster means at most this share of the baseline's time: a saving within a run's timing noise (a dedup of a pool
#: with hardly any near-copies, 0.99 of the time) is no reason to change a recipe.
FASTER = 0.95
#: Scoring from memory, a later epoch's scoring over the first's (which scores every sample: nothing is remembered
#: yet): the share of stale losses refreshed, as the strategies' guess has it (``SCORING_GUESS``).
MEMORY_SHARE = SCORING_GUESS["memory"] / SCORING_GUESS["fresh"]
#: The plan's search phases, in order (the first probe; the deeper probes, one phase each; the screen with its noise
#: baseline; rung 2); the confirmation's phases follow (two per seed: its baseline, then the pick).
BASELINES = 0
DEEPENING = tuple(range(1, len(PROBES)))
SCREENING = len(PROBES)
PROMOTION_BASELINE, PROMOTING = SCREENING + 1, SCREENING + 2
CONFIRMING = SCREENING + 3


def confirm_phases(k: int) -> tuple[int, int]:
    """The phases of the confirmation's ``k``-th seed: its baseline, then the pick (and its random subset)."""
    return CONFIRMING + 2 * k, CONFIRMING + 2 * k + 1


def is_search(phase: int) -> bool:
    return phase < CONFIRMING


def trial_fidelity(c: Candidate, rung: float) -> float:
    """The share of its own schedule ``c`` trains when held against the baseline at ``rung``: as many optimizer steps as
    that baseline for the families that train a share of its steps (``STEP_MATCHED``), at most its whole schedule;
    the rung itself for the rest."""
    share = steps_share(c)
    if c.family not in STEP_MATCHED or share >= 1:
        return rung
    return min(1.0, rung / max(share, 1e-9))


def signal_of(run: Any, metric: Any) -> float | None:
    """The continuous signal a trial is ranked by, higher better: for a metric that counts hits (accuracy), minus the
    validation loss (the mean negative log-probability of the correct label: it moves with every row's confidence, where
    accuracy moves only when a row crosses the decision boundary, so a short run's ranking is less noisy); else the
    metric itself, which is continuous already."""
    if run is None:
        return None
    if metric.counts_correct:
        loss = final_value(run, "loss")
        return None if loss is None else -loss
    value = final_value(run)
    if value is None:
        return None
    return value * metric.scale if metric.higher_is_better else -value * metric.scale


def at_fidelity(recipe: Recipe, fidelity: float) -> Recipe:
    """The recipe trained for ``fidelity`` of its epochs, schedule fully decayed there (one evaluation, at the end)."""
    if fidelity >= 1:
        return recipe
    return recipe.model_copy(update={
        "epochs": recipe.epochs * fidelity, "max_steps": None, "checkpoint_every_steps": None,
        "eval": recipe.eval.model_copy(update={"every_steps": None, "every_seconds": None, "per_epoch": False})})


# -- cost (the time model itself: siftcli.plan.costs) ------------------------------------------------------------
def breadth_first(candidates: list[Candidate], unit: float, fidelity: float = SCREEN,
                  epochs: float = 1.0) -> list[Candidate]:
    """The screen's order: each family's cheapest first, families by that cost, then each family's next, ... so a
    budget that runs out leaves every family screened rather than every setting of the cheapest one."""
    families: dict[str, list[Candidate]] = {}
    for c in sorted(candidates, key=lambda c: predicted_cost(c, unit, fidelity, epochs=epochs)):
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


def rung_runs(results: dict[int, Result], seed: int, fidelity: float) -> list[Any]:
    """The baseline's finished runs at ``fidelity``: the plan's seed's and the noise seed's, where each trained there."""
    return [r.run for s in (seed, seed + NOISE_SEED)
            if (r := find(results, "baseline", fidelity, s, "validation")) is not None and r.run]


def rung_baselines(results: dict[int, Result], seed: int, fidelity: float) -> list[float]:
    """The baseline's validation metric at ``fidelity``, each seed that trained it there."""
    return [v for run in rung_runs(results, seed, fidelity) if (v := final_value(run)) is not None]


def noise_points(values: list[float], metric: Any, rows: int) -> float:
    """One run's noise at a rung, in metric points: the spread of the baselines' seeds there, never below what the
    validation rows alone allow (a proportion's binomial standard error, for a metric that counts hits)."""
    spread = statistics.stdev(values) * metric.scale if len(values) > 1 else 0.0
    floor = 0.0
    if metric.counts_correct and values and rows > 0:
        p = min(max(statistics.fmean(values), 0.0), 1.0)
        floor = math.sqrt(max(p * (1 - p), 1 / rows) / rows) * metric.scale
    return max(spread, floor)


def learned(value: float | None, untrained: float | None, metric: Any, rows: int) -> bool:
    """Whether a run at ``value`` has left the untrained level: better than it by more than ``Z`` times the validation
    rows' own noise there (always, while the untrained level is not known)."""
    if untrained is None or value is None:
        return True
    return (diff_points(value, untrained, metric) or 0.0) > Z * noise_points([value], metric, rows)


def trial_at(c: Candidate, rung: float | None) -> Trial | None:
    """``c``'s finished trial held against the baseline at ``rung``."""
    return next((t for t in c.trials if (t.fidelity if t.rung is None else t.rung) == rung and t.status == "complete"),
                None)


def dropped(t: Trial, tolerance: float) -> bool:
    """Worse than the baseline at its rung by more than the tolerance and its noise together: the one way a family
    leaves the search on evidence (a trial too short to tell is no evidence)."""
    return t.gap is None or (t.informative and t.gap < -(tolerance + Z * (t.noise or 0.0)))


def ranking(t: Trial) -> tuple[float, float]:
    """What a trial is ranked by, and its noise: the continuous signal's gap (:func:`signal_of`) where it was measured,
    else the metric's (records written before the signal was)."""
    if t.signal_gap is not None:
        return t.signal_gap, t.signal_noise or 0.0
    return t.gap or 0.0, t.noise or 0.0


def order(candidates: list[Candidate], fidelity: float, unit: float) -> list[Candidate]:
    """Best first at a rung, by the continuous signal (:func:`ranking`): those whose gap is within the noise of the best
    (ties), cheapest predicted time first, then the rest by gap, then those too short to tell, the most steps first
    (the likeliest to tell at the next rung)."""
    scored = [(c, trial_at(c, fidelity)) for c in candidates]
    scored = [(c, t) for c, t in scored if t is not None and t.gap is not None]
    known = [(c, t) for c, t in scored if t.informative]
    unknown = sorted((c for c, t in scored if not t.informative),
                     key=lambda c: (-(trial_at(c, fidelity).steps or 0), -steps_share(c), full_time(c, unit)))  # type: ignore[union-attr]
    if not known:
        return unknown
    top = max(ranking(t)[0] for _, t in known)
    tied = [c for c, t in known if ranking(t)[0] >= top - Z * ranking(t)[1]]
    rest = sorted((c for c, _ in known if c not in tied), key=lambda c: -ranking(trial_at(c, fidelity))[0])  # type: ignore[arg-type]
    return sorted(tied, key=lambda c: full_time(c, unit)) + rest + unknown


def ranked(record: PlanRecord, fidelity: float | None, evidence: bool = False) -> list[Candidate]:
    """The families at a rung, each by its best member, best first (:func:`order`), those dropped on evidence, those
    not faster than the baseline (predicted over ``FASTER`` of its time) and the exact ones (the baseline's training at
    another cost: nothing to choose or confirm, :func:`exact_pick`) left out; ``evidence``: those too short to tell
    left out too."""
    unit = record.baseline_seconds or 0.0
    if fidelity is None:
        return []
    families: dict[str, list[Candidate]] = {}
    for c in alive(record, fidelity, evidence):
        families.setdefault(c.family, []).append(c)
    return order([order(members, fidelity, unit)[0] for members in families.values()], fidelity, unit)


def alive(record: PlanRecord, fidelity: float, evidence: bool = False) -> list[Candidate]:
    """The candidates still in the search at a rung: trained there, not dropped on evidence, predicted faster than the
    baseline (at most ``FASTER`` of its time), not exact; ``evidence``: not too short to tell either."""
    unit = record.baseline_seconds or 0.0
    return [c for c in record.candidates if (t := trial_at(c, fidelity)) is not None and not dropped(t, record.tolerance)
            and full_time(c, unit) <= FASTER * unit and not c.exact and (t.informative or not evidence)]


def promoted(record: PlanRecord) -> list[Candidate]:
    """Successive halving after the screen: the better half of the families left (at most ``PROMOTE``), best first."""
    families = ranked(record, record.screen_fidelity)
    return families[:min(PROMOTE, max(1, math.ceil(len(families) / 2)))] if len(families) > 1 else []


def contenders(record: PlanRecord) -> list[Candidate]:
    """What the search hands to the confirmation: the best family at rung 2, or, where rung 2 left none (or did not
    run), the best at the screen of the families rung 2 did not try; and beside it the runner-up the rung could not
    tell from it (its signal within ``Z`` noises of the best), up to ``CONFIRM_TIED`` in all. A tie is broken by the
    predicted time, which says nothing of accuracy: confirming the cheaper one alone turned a right answer into
    "train on everything" when it was inconclusive (pretrained-relevance: the quarter n-gram filter tied with
    target-only at the screen and confirmed neither way over 5 seeds, where target-only was the truth). Where no other
    family tied with the best, a member of the best's own family that did is confirmed beside it (pretrained-clean:
    the screen tied memory sifting at beta 2 with the calibrated keep-half; the cheaper, confirmed alone, was worse,
    and the truth's pick was the other). Tied candidates share the confirmation's baselines, so the second costs its
    own runs only. None when every family was
    dropped on evidence or none said anything (a trial too short to tell is no reason to spend a confirmation on it),
    and none predicted slower than an exact candidate (:func:`exact_pick`: the baseline's results at its time). A gap
    below the tolerance but within its noise is not evidence against a family: the confirmation, at the full schedule,
    decides."""
    promotion, unit, exact = record.promotion_fidelity, record.baseline_seconds or 0.0, exact_pick(record)
    bar = full_time(exact, unit) if exact is not None else math.inf  # the exact one is as good as the baseline, and
    best = [c for c in ranked(record, promotion, evidence=True) if full_time(c, unit) < bar]  # a slower pick loses to it
    rung = promotion
    if not best:
        tried = {c.family for c in record.candidates if trial_at(c, promotion) is not None}
        best = [c for c in ranked(record, record.screen_fidelity, evidence=True)
                if c.family not in tried and full_time(c, unit) < bar]
        rung = record.screen_fidelity
    if not best:
        return []
    signals = [ranking(trial_at(c, rung)) for c in best]  # type: ignore[arg-type]
    top = max(value for value, _ in signals)
    tied = 1
    while tied < min(CONFIRM_TIED, len(best)) and signals[tied][0] >= top - Z * signals[tied][1]:
        tied += 1
    picks = best[:tied]
    if len(picks) < CONFIRM_TIED:  # no other family tied with the best: a member of its own family that did
        own = [c for c in alive(record, rung, evidence=True) if c.family == picks[0].family and c is not picks[0]
               and full_time(c, unit) < bar]
        for c in order(own, rung, unit):
            value, noise = ranking(trial_at(c, rung))  # type: ignore[arg-type]
            if len(picks) < CONFIRM_TIED and value >= top - Z * noise:
                picks.append(c)
    return picks


def exact_pick(record: PlanRecord) -> Candidate | None:
    """The fastest exact candidate (the baseline's training at another cost, such as the teacher's outputs cached)
    predicted at most ``FASTER`` of the baseline's time: the answer where no confirmed strategy is faster, with nothing
    to confirm (its results are the baseline's). Its price is the baseline's structure (the teacher's share of the
    baseline's own job, :func:`~siftcli.plan.costs.teacher_share`), so it needs no trial of its own, nor a rung where
    the baseline learned: on a model that learns late the screen says nothing of any family's accuracy, and this one's
    accuracy is the baseline's by construction (the teacher regime: "undecided", its cache not reached by the budget,
    where the truth is the cache at 0.74 of the time)."""
    unit = record.baseline_seconds or 0.0
    fast = [c for c in record.candidates if c.exact and record.teacher_share is not None
            and full_time(c, unit) <= FASTER * unit]
    return min(fast, key=lambda c: full_time(c, unit)) if fast else None


# -- the phases' decisions -------------------------------------------------------------------------------------------
def search_baselines(seed: int) -> list[Job]:
    """The baseline at the first probe: the unit's first prediction, and the first look at whether the rung learns."""
    return [Job(BASELINES, "baseline", SCREEN, seed, "validation")]


def probe_values(results: dict[int, Result], seed: int) -> list[tuple[float, float]]:
    """The baseline's validation metric at each probe that ran for ``seed``, in probe order."""
    out = []
    for r in sorted(results.values(), key=lambda r: r.job.fidelity):
        if r.job.phase in (BASELINES, *DEEPENING) and r.job.seed == seed and r.run is not None and \
                (value := final_value(r.run)) is not None:
            out.append((r.job.fidelity, value))
    return out


def screen_rung(probes: list[tuple[float, float]], untrained: float | None, metric: Any, rows: int) -> float:
    """The screen's rung: the first probe (:func:`probe_values`) whose baseline learned, else the deepest that ran."""
    for fidelity, value in probes:
        if learned(value, untrained, metric, rows):
            return fidelity
    return probes[-1][0] if probes else SCREEN


def deepen_jobs(record: PlanRecord, results: dict[int, Result], seed: int, phase: int, untrained: float | None,
                metric: Any, spent_so_far: float) -> list[Job]:
    """The next probe, when the deepest one so far has not left the untrained level and the budget, after it and the
    screen's noise baseline there, keeps a third of itself for the candidates (``DEEPEN_SHARE``)."""
    fidelity = PROBES[DEEPENING.index(phase) + 1]
    probes = probe_values(results, seed)
    if not probes or probes[-1][0] != PROBES[DEEPENING.index(phase)] or \
            learned(probes[-1][1], untrained, metric, record.validation_rows):
        return []
    if spent_so_far + 2 * job_cost(record, fidelity) + record.seed_seconds > budget_seconds(record) * DEEPEN_SHARE:
        return []
    return [Job(phase, "baseline", fidelity, seed, "validation")]


def screen_jobs(record: PlanRecord, seed: int, spent_so_far: float) -> tuple[list[Job], dict[str, float]]:
    """The screen's second baseline (its noise), then the candidates breadth first while the predicted cost fits the
    budget, room kept for the second rung where it can be paid; and the predicted seconds of each candidate that did
    not fit."""
    unit, setup, fidelity = record.baseline_seconds or 0.0, record.setup_seconds, record.screen_fidelity
    room = budget_seconds(record) - spent_so_far - job_cost(record, fidelity) - record.seed_seconds  # a new seed
    reserve = 2 * job_cost(record, record.promotion_fidelity) if record.promotion_fidelity else 0.0
    room = screen_room(room, reserve)
    jobs, over, paid = [Job(SCREENING, "baseline", fidelity, seed + NOISE_SEED, "validation")], {}, set()
    for c in breadth_first(record.candidates, unit, fidelity, record.epochs):
        own = trial_fidelity(c, fidelity)
        cost = predicted_cost(c, unit, own, c.reference is not None and c.reference in paid, setup, record.epochs)
        if cost <= room:
            room -= cost
            jobs.append(Job(SCREENING, c.arm, own, seed, "validation"))
            paid.add(c.reference)
        else:
            over[c.arm] = cost
    return jobs, over


def drift(record: PlanRecord, results: dict[int, Result]) -> float:
    """The most any of the search's finished jobs ran over what the plan predicts for it (:func:`planned_seconds`, a
    reference's build left out of both), never below 1: the unit is predicted from the first probe, and where it
    underestimates a run (*long*: 11.2 s predicted, 14.0 s measured), or the machine is busier than when the probe
    ran, every prediction is short alike. The most, not the mean: with candidate jobs taking three times their
    predictions, a mean over the baselines' ratios near 1 and the first candidate's 3 let the next candidate start and
    took the search to 1.104 of its budget (1.003 with the most)."""
    ratios = []
    for r in results.values():
        if not is_search(r.job.phase) or not r.run:
            continue
        predicted = planned_seconds(record, r.job, True)
        build = float((r.run.get("reference") or {}).get("build_seconds") or 0.0)
        if predicted > 0:
            ratios.append(max(0.0, r.seconds - build) / predicted)
    return max([1.0, *ratios])


def planned_seconds(record: PlanRecord, job: Job, reference_paid: bool) -> float:
    """A search job's seconds as the plan predicts them: a baseline's from the unit, a candidate's from its trials
    below this rung or its structure (:func:`predicted_cost`)."""
    if job.arm == "baseline":
        return job_cost(record, job.fidelity)
    c = next((c for c in record.candidates if c.arm == job.arm), None)
    if c is None:
        return 0.0
    return predicted_cost(c, record.baseline_seconds or 0.0, job.fidelity, reference_paid, record.setup_seconds,
                          record.epochs)


def job_prediction(record: PlanRecord, results: dict[int, Result], job: Job) -> float:
    """A search job's predicted seconds, as the budget's guard reads them before training it: the plan's prediction
    (its reference paid once another candidate's job built it, or at rung 2) scaled by :func:`drift`, unless it comes
    from the candidate's own trial at a lower rung (measured on this machine as it is: scaled again it would count the
    over-run twice)."""
    c = next((c for c in record.candidates if c.arm == job.arm), None)
    paid = c is None or c.reference is None or job.phase != SCREENING or any(
        o.arm != c.arm and o.reference == c.reference and any(t.status == "complete" for t in o.trials)
        for o in record.candidates)
    measured = c is not None and measured_below(c, job.fidelity) is not None
    return planned_seconds(record, job, paid) * (1.0 if measured else drift(record, results))


def screen_room(room: float, reserve: float) -> float:
    """What the screen's candidates may spend of the search's ``room`` when a second rung would cost ``reserve``: the
    reserve comes out of the room only beyond twice itself, so the screen keeps at least ``min(room, 2 * reserve)``,
    the whole reserve is kept from ``3 * reserve`` of room on, and more room never screens fewer candidates.

    The rule before kept the whole reserve once it was at most half the room, and none below: a search with 44 s of
    room screened with 23 where one with 41 would have screened with all 41. *pretrained-clean*, run twice at the same
    budget of 2 runs, screened 5 of 7 candidates once and 3 the next time (its measured run 31.6 s, then 27.2 s), the
    second leaving out the truth's pick (the calibrated keep-half) with 22.8 s of its budget unspent, as rung 2 did not
    run (one family said anything)."""
    return room - min(reserve, max(0.0, room - 2 * reserve))


def promotion_jobs(record: PlanRecord, results: dict[int, Result], seed: int,
                   spent_so_far: float) -> tuple[list[Job], list[str], dict[str, float]]:
    """The second rung, decided at once: its baseline and the promoted families, cheapest first, while their
    predictions fit; the rung is skipped (the screen decides) unless the baseline and two families fit. Returns the
    baseline's job, the arms to train after it, and the predicted seconds of those that did not fit."""
    unit, setup, fidelity = record.baseline_seconds or 0.0, record.setup_seconds, record.promotion_fidelity
    if fidelity is None:
        return [], [], {}
    chosen = promoted(record)
    known = find(results, "baseline", fidelity, seed, "validation") is not None  # a probe trained it already
    room = budget_seconds(record) - spent_so_far - (0.0 if known else job_cost(record, fidelity))
    costs = {c.arm: 0.0 if trained_whole(c, record) else  # its whole schedule ran at the screen: held again, not rerun
             predicted_cost(c, unit, trial_fidelity(c, fidelity), True, setup, record.epochs) for c in chosen}
    arms = []
    for arm, cost in costs.items():
        if cost <= room:
            room -= cost
            arms.append(arm)
    if len(arms) < 2:  # a rung of one family would compare it with itself: the screen decides
        return [], [], costs
    over = {arm: cost for arm, cost in costs.items() if arm not in arms}
    return [] if known else [Job(PROMOTION_BASELINE, "baseline", fidelity, seed, "validation")], arms, over


def trained_whole(c: Candidate, record: PlanRecord) -> bool:
    """Whether ``c``'s screen trial trained its whole schedule (a small subset, step-matched): rung 2 holds that run
    against its own baseline, nothing is trained again."""
    t = trial_at(c, record.screen_fidelity)
    return t is not None and t.fidelity >= 1


def promotion_job(c: Candidate, record: PlanRecord, seed: int) -> Job | None:
    """``c``'s job at rung 2 (none where its screen trial trained its whole schedule already)."""
    if record.promotion_fidelity is None or trained_whole(c, record):
        return None
    return Job(PROMOTING, c.arm, trial_fidelity(c, record.promotion_fidelity), seed, "validation")


def held(results: dict[int, Result], c: Candidate, rung: float, screen: float, seed: int) -> Result | None:
    """``c``'s finished job held against the baseline at ``rung``: the one at its step-matched share of its schedule
    (:func:`trial_fidelity`), or, at rung 2, its screen job where that trained its whole schedule."""
    own = trial_fidelity(c, rung)
    if rung != screen and own == trial_fidelity(c, screen):  # its screen job again (its whole schedule): held at
        if find(results, "baseline", rung, seed, "validation") is None:  # rung 2 once that rung's baseline ran
            return None
    return find(results, c.arm, own, seed, "validation")
