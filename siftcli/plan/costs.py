"""A candidate's structure and the baseline's measured jobs in, its predicted seconds out: the plan's time model.

A strategy that trains a known share of the baseline's steps with nothing more per step (a subset, fewer epochs,
near-copies removed) is priced by that structure: its share of the baseline's training plus its measured work before
training (a reference's build, a near-copy search). One short screen job's seconds on a busy machine never decide it.
Online sifting is priced by structure too (:func:`online_ratio`): the rows it kept and the rows it scored, a scoring
forward priced against a training row within its own job (a load slows both alike). What is left (a teacher cache) is
priced from its measured jobs, scaled to the full schedule by what each part of the job pays once or per step
(:func:`full_seconds`). The unit is one full baseline run: predicted from the first probe until the confirmation
trains one, measured after.
"""

from __future__ import annotations

from collections.abc import Callable

from siftcli.errors import RunInterrupted
from siftcli.plan.record import Candidate, PlanRecord, Trial
from siftcli.training.record import RunMetrics, paid_seconds

#: The least a search may spend, whatever ``--budget`` says in runs (:func:`budget_seconds`).
MIN_BUDGET_SECONDS = 10.0


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
                   setup: float = 0.0, epochs: float = 1.0) -> float:
    """Seconds a trial should take: once a lower rung ran, that rung's measured training (its reference's build and the
    job's setup taken out) scaled up; before, its share of the pool plus its extra cost (a scoring forward) of a
    baseline run's training at ``fidelity``, plus its reference's build (the same at any rung) unless another candidate
    of this seed paid it; and a job's setup (``setup``: building the run, evaluating it)."""
    t = measured_below(candidate, fidelity)
    if t is not None:
        return setup + max(0.0, t.seconds - t.fixed_seconds - setup) * fidelity / t.fidelity
    share = steps_share(candidate)
    first = (unit - setup) * candidate.first_epoch_cost * min(fidelity, 1 / max(1.0, epochs))  # its first epoch's
    return setup + (unit - setup) * fidelity * (share + candidate.extra_cost) + unit * candidate.upfront_cost + \
        first + (0.0 if reference_paid else unit * candidate.fixed_cost)


def measured_below(candidate: Candidate, fidelity: float) -> Trial | None:
    """The candidate's last finished trial at a rung below ``fidelity``: what its prediction there is scaled from."""
    ran = [t for t in candidate.trials if t.status == "complete" and t.fidelity < fidelity]
    return ran[-1] if ran else None


def structural(candidate: Candidate) -> bool:
    """Whether a candidate's training cost follows from its structure: it trains a known share of the baseline's steps
    with nothing computed per step beyond them (a subset, fewer epochs, near-copies removed); only its work before
    training (a reference's build, a near-copy search) is measured. Its time is then that share of the baseline's, not
    one short job's seconds scaled up: a screen job of a few seconds on a busy machine once measured 1.45 of the
    baseline's for a strategy training a third of its steps, and the plan dropped the best strategy as slower."""
    return candidate.family in STRUCTURAL_FAMILIES and not candidate.extra_cost and not candidate.first_epoch_cost


#: The families whose training is a known share of the baseline's steps, with nothing computed per step beyond them.
STRUCTURAL_FAMILIES = ("fewer-epochs", "filter", "dedup", "dedup+filter", "target-only")


def full_time(candidate: Candidate, unit: float) -> float:
    """Its predicted full-schedule seconds, the reference paid (what ties are broken by and what must beat the unit):
    for a :func:`structural` candidate its share of the baseline's training plus its measured work before training;
    for an exact one (the teacher cache) the baseline's training less what it saves, measured on the baseline's own
    job (:func:`teacher_saving`); else the highest rung's time ratio scaled to the whole schedule, or before any rung
    its shares of a run."""
    if structural(candidate):
        return unit * (steps_share(candidate) + candidate.fixed_cost + candidate.upfront_cost)
    if candidate.exact:  # the baseline's training less what it saves (the teacher's forwards after the first epoch)
        return unit * (steps_share(candidate) + candidate.extra_cost + candidate.fixed_cost + candidate.upfront_cost)
    ran = [t for t in candidate.trials if t.status == "complete" and t.predicted_ratio is not None]
    if ran:
        return unit * ran[-1].predicted_ratio  # type: ignore[operator]
    return unit * (steps_share(candidate) + candidate.extra_cost + candidate.fixed_cost + candidate.upfront_cost)


def job_cost(record: PlanRecord, fidelity: float) -> float:
    """A baseline job's predicted seconds at ``fidelity``: its setup, and its share of a run's training."""
    unit, setup = record.baseline_seconds or 0.0, record.setup_seconds
    return setup + (unit - setup) * fidelity


def steps_share(c: Candidate) -> float:
    """The share of the baseline's steps a candidate trains on its full schedule (the part of the pool it keeps)."""
    return c.pool_fraction if c.pool_fraction is not None else 1.0


def full_seconds(run: RunMetrics, fidelity: float, epochs: float, memory: float | None = None) -> float:
    """A rung's run scaled to the full schedule: its training by the rung's inverse, its reference's build once, a
    cached teacher's forwards as the first epoch's only (a rung inside the first epoch ran them on every step; one past
    it ran them once), and, scoring from memory (``memory``: a later epoch's scoring over the first's), the first
    epoch's scoring of every sample once and the later epochs' refreshes at that share."""
    ref = run.get("reference") or {}
    phases = run.get("phases", {})
    build = float(ref.get("build_seconds") or 0.0)
    teacher = float(phases.get("teacher", 0.0)) if (run.get("teacher") or {}).get("cached") else 0.0
    scoring = float(phases.get("scoring", 0.0)) if memory is not None else 0.0
    rest = paid_seconds(run) - build - teacher - scoring
    ran = fidelity * epochs  # epochs this rung trained
    if scoring:  # the first epoch's scoring, from what the rung's epochs paid (the first in full, the rest at the share)
        first = scoring / (min(1.0, ran) + max(0.0, ran - 1) * memory)  # type: ignore[operator]
        scoring = first * (1 + max(0.0, epochs - 1) * memory)  # type: ignore[operator]
    return rest / fidelity + build + teacher / min(1.0, ran) + scoring


def online_ratio(run: RunMetrics, fidelity: float, epochs: float, memory: float | None) -> float | None:
    """Online sifting's full-schedule training in runs of the baseline's, from the structure its job measured: the share
    of rows it kept (each a training step's share, at the baseline's price per row), plus the rows it scores over the
    schedule times a scoring forward's price **relative to its own training row, both measured in that one job**: a
    busy machine slows the two alike, so the ratio holds where the job's seconds do not (``None``: nothing trained).

    Scoring afresh scores the share of raw rows the job scored; from memory (``memory``: a later epoch's refreshes
    over the first's, the strategies' guess) the first epoch scores every row and later ones refresh that share, or the
    share the job itself refreshed where it ran past its first epoch."""
    trained, raw, scored = run.get("samples_trained") or 0, run.get("raw_samples") or 0, run.get("samples_scored") or 0
    if not trained or not raw:
        return None
    ref = run.get("reference") or {}
    phases = run.get("phases", {})
    scoring = float(phases.get("scoring", 0.0))
    teacher = float(phases.get("teacher", 0.0)) if (run.get("teacher") or {}).get("cached") else 0.0
    training = paid_seconds(run) - float(ref.get("build_seconds") or 0.0) - scoring - teacher
    if training <= 0:
        return None
    forward = (scoring / scored) / (training / trained) if scored else 0.0  # a scoring forward, in training rows
    if memory is None:
        share = scored / raw
    else:
        ran = fidelity * epochs
        first = raw / ran if ran > 1 else raw  # the rows of its first epoch, all scored
        refresh = (scored - first) / (raw - first) if ran > 1 else memory
        share = (1 + max(0.0, epochs - 1) * min(max(refresh, 0.0), 1.0)) / max(1.0, epochs)
    return trained / raw + forward * share


def measure(candidates: list[Candidate], derive: Callable[[str], tuple[list[int] | None, float]], n: int,
            reference_cost: Callable[[str], float], unit: float) -> tuple[dict[str, float], ...]:
    """What the plan can know before any candidate trains, on the planner's clock: the share of the pool each dedup
    and target-group candidate keeps and the seconds its own work took (a near-duplicate search, which each of its
    trials pays again, on its clock), in runs of ``unit`` seconds; and each reference's build in runs."""
    pools, fixed, upfront = {}, {}, {}
    for c in candidates:
        if c.reference is not None:
            fixed[c.arm] = reference_cost(c.reference)
        if c.pool_fraction is None and c.family in ("dedup", "dedup+filter", "target-only"):
            try:
                subset, seconds = derive(c.arm)
            except RunInterrupted:
                raise
            except Exception:  # noqa: BLE001  (the trial will fail the same way and record why)
                continue
            if subset is not None:
                pools[c.arm] = len(subset) / max(1, n)
            upfront[c.arm] = seconds / unit if unit > 0 else 0.0
    return pools, fixed, upfront


def teacher_share(run: RunMetrics) -> float | None:
    """The share of a distilling run's paid seconds its teacher's forwards took (None: no teacher, or one cached
    already): measured on the baseline's own job, it prices the teacher cache without training it."""
    teacher = (run.get("phases") or {}).get("teacher")
    if not run.get("teacher") or (run.get("teacher") or {}).get("cached") or teacher is None:
        return None
    paid = paid_seconds(run)
    return float(teacher) / paid if paid > 0 else None


def teacher_saving(share: float, epochs: float) -> float:
    """What caching the teacher saves, in runs of the baseline: its forwards on every epoch after the first."""
    return share * (1 - 1 / max(1.0, epochs))
