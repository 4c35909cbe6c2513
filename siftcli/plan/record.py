"""The plan's typed records: what ``plan.json`` holds (every candidate tried, the confirmation, the decision)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from typing_extensions import TypedDict


class PlannerNotes(TypedDict, total=False):
    """What the phase planners learned that every process of a plan needs (one attribute of its study): the share of
    the pool each dedup or target-group candidate keeps, each reference's build in baseline runs, the planner's own
    seconds (on the plan's clock), and the predicted seconds of the candidates the budget could not reach."""

    pools: dict[str, float]  # arm -> share of the pool it trains on
    fixed: dict[str, float]  # arm -> its reference's build, in baseline runs (paid once per seed)
    upfront: dict[str, float]  # arm -> its own work before training (a near-duplicate search), in baseline runs
    planner_seconds: dict[str, float]  # phase -> seconds
    over_budget: dict[str, float]  # arm -> predicted seconds at the screen, which the budget could not pay
    promoted: list[str]  # the arms the second rung trains (none: the screen decides)
    over_budget_promotion: dict[str, float]  # arm -> predicted seconds at rung 2, which the budget could not pay
    untrained: float  # the validation metric of the seed's initial weights (or of always answering the commonest label)


@dataclass
class Trial:
    """One candidate at one fidelity on the validation split."""

    arm: str
    fidelity: float  # the share of the candidate's own schedule it trained (1: all of it)
    seconds: float  # its clock, reference and near-duplicate search paid in full
    metric: float | None  # on the validation split
    baseline_metric: float | None  # the baseline at the same fidelity (the mean of its seeds there)
    time_ratio: float | None  # its training clock (reference paid) over the baseline's at the same rung and seed
    status: str  # complete, failed, skipped (not trained: it would have taken the search past its budget and slack)
    error: str | None = None
    gap: float | None = None  # metric points over the baseline at the same rung (positive: better)
    noise: float | None = None  # the gap's standard error at the rung (the baselines' seeds, the rows)
    fixed_seconds: float = 0.0  # seconds this job spent building a reference (not scaled with the rung)
    predicted_ratio: float | None = None  # its full-schedule time over the baseline's, predicted from this rung
    informative: bool = True  # False: fewer optimizer steps than the baseline had when it first left the untrained
    #                           level (or, in records without step counts, at the untrained level after no more steps
    #                           than a baseline that had not learned yet): no evidence either way
    short: bool = False  # it or its baseline ran under SHORT_JOB_SECONDS: its time ratio is within the clock's noise
    rung: float | None = None  # the rung whose baseline it is held against (None: the share it trained, ``fidelity``);
    #                            a subset trains more of its own schedule there, to as many steps as that baseline
    steps: int | None = None  # optimizer steps it trained
    signal: float | None = None  # the continuous signal the screen ranks by (:func:`siftcli.plan.search.signal_of`)
    signal_gap: float | None = None  # that signal over the baseline's at the rung, in its own units (positive: better)
    signal_noise: float | None = None  # that gap's standard error at the rung


#: Below this many seconds a job's time ratio says little: process start, a busy machine's scheduling and the warm-up
#: move it by tens of percent (the same regression plan on a loaded machine gave three answers in three runs).
SHORT_JOB_SECONDS = 2.0


@dataclass
class Candidate:
    """A strategy the plan considered: an arm of the table, its family, and what became of it."""

    arm: str
    family: str  # everything, fewer-epochs, filter, dedup, dedup+filter, online, teacher-cache
    about: str
    pool_fraction: float | None  # share of the pool it trains on (None: decided while training)
    trials: list[Trial] = field(default_factory=list)
    extra_cost: float = 0.0  # predicted cost beyond its pool share, in runs of its schedule (a scoring forward)
    outcome: str = "waiting"  # screening, dropped at the screen, promoted, the search's pick, over budget, ...
    reference: str | None = None  # the reference it builds (paid once per seed, at any rung)
    fixed_cost: float = 0.0  # that reference's build, in baseline runs
    upfront_cost: float = 0.0  # its own work before training (a near-duplicate search), in baseline runs, every trial
    first_epoch_cost: float = 0.0  # extra cost in its first epoch only, in runs of that epoch (scoring every sample
    #                                afresh before any loss is remembered)
    exact: bool = False  # the baseline's training at another cost (the teacher's outputs cached): nothing to confirm


@dataclass
class Skipped:
    """A strategy that does not apply to this recipe, and why."""

    family: str
    why: str


@dataclass
class Versus:
    """Per-seed paired differences (pick minus opponent, in metric points): mean, standard error, 95% interval."""

    opponent: str
    mean: float
    se: float
    n: int
    ci95: tuple[float, float]
    values: list[float]


@dataclass
class Look:
    """One look of the sequential confirmation: after ``n`` paired seeds, the interval at the level the schedule
    spends there, and what it says."""

    n: int
    alpha: float  # the error this look spends (the looks' alphas sum to at most 5%)
    mean: float
    low: float
    high: float
    says: str  # within (the interval lies above -tolerance), worse (below it), open; the last seed's lean reading:
    #            favoured (its interval lies above -tolerance) or open


@dataclass
class Confirmation:
    """A candidate re-run on the evaluation split over paired seeds against the full baseline and a random subset."""

    arm: str
    seeds: list[int]
    metric: list[float | None]
    baseline_metric: list[float | None]
    time_ratio: float  # mean over seeds of its seconds over the baseline's (reference paid)
    seconds: float  # what confirming it cost
    versus: list[Versus]
    within_tolerance: bool  # a look's interval against the baseline lay above -tolerance
    looks: list[Look] = field(default_factory=list)
    stopped: str = ""  # why the seeds stopped: within, worse, slower (every seed over FASTER of the baseline's time),
    #                    failed, or inconclusive at the last seed
    lean: Look | None = None  # an inconclusive confirmation read at the futility interval (confirm.lean)

    @property
    def favoured(self) -> bool:
        """Inconclusive at the last seed, its seeds' ``1 - FUTILITY`` interval wholly within the tolerance."""
        return self.lean is not None and self.lean.says == "favoured"


@dataclass
class PlanRecord:
    """``plan.json``: the settings, every candidate, the confirmation and the decision with its cost and pay-back."""

    status: str  # running, completed, interrupted
    recipe: str
    metric: str
    budget: float  # in full baseline runs
    tolerance: float  # metric points
    seeds: int  # the confirmation's most paired seeds (extended by a resumed plan with more)
    baseline_seconds: float | None = None  # the unit: one full baseline run, predicted or measured (unit_source)
    baseline_metric: float | None = None  # validation, the screen's baseline (mean of its seeds)
    setup_seconds: float = 0.0  # a job's seconds beyond its training (building the run, evaluating it), measured
    seed_seconds: float = 0.0  # building a seed's workload (its model and data), paid by the first job of a new seed
    epochs: float = 1.0  # the recipe's: what is paid once, in the first epoch, is priced by it
    unit_source: str = ""  # predicted (from the screen's baseline) or measured (the confirmation's baselines)
    search_budget_seconds: float | None = None  # the search's budget in seconds as its last phase was decided (with
    #                                             the unit it knew then): what the progress lines and the record say
    screen_noise: float | None = None  # one run's noise at the screen, in metric points
    untrained_metric: float | None = None  # validation, before any training: what a rung must beat to say anything
    screen_fidelity: float = 0.125  # the share of the schedule the candidates were screened at (raised while the
    #                                 baseline there had learned nothing)
    promotion_fidelity: float | None = None  # rung 2's share (None: no rung 2, the screen was too close to a full run)
    probes: list[list[float]] = field(default_factory=list)  # [share of the schedule, validation metric] per probe
    screen_learned: bool = True  # the screen's baseline left the untrained level (else its gaps are no evidence)
    teacher_share: float | None = None  # of the baseline's paid seconds, its teacher's forwards (first probe): what the
    #                                     teacher cache saves after the first epoch, priced from structure
    horizons: list[int] = field(default_factory=list)  # --seeds at the start, then each extension
    validation_rows: int = 0
    evaluation_rows: int = 0
    candidates: list[Candidate] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    confirmations: list[Confirmation] = field(default_factory=list)
    search_seconds: float = 0.0
    confirm_seconds: float = 0.0
    pick: str = "baseline"
    pick_family: str = "everything"
    pick_time_ratio: float = 1.0
    pick_versus_baseline: Versus | None = None
    payback_runs: float | None = None  # training runs after which the plan has paid for itself
    answer: str = ""
    pick_evidence: str = ""  # confirmed; favoured (inconclusive, its seeds' interval leaning within: not confirmed);
    #                          exact (the teacher cache: the baseline's results); "" for training on everything
    recipe_out: str | None = None
    data_out: str | None = None
    storage: str = ""  # the Optuna storage URL shared with other machines ("": a journal file in the plan folder)
    study: str = ""  # the study's name in that storage
    workers: int = 1  # processes on this machine
    wall_seconds: float = 0.0  # this machine's wall-clock (search and confirmation cost are every process's seconds)


def load_record(data: dict[str, Any]) -> PlanRecord:
    """A ``plan.json`` back into its typed record (a resumed plan)."""
    def paired(p: dict[str, Any] | None) -> Versus | None:
        return None if p is None else Versus(**{**p, "ci95": tuple(p["ci95"])})

    candidates = [Candidate(**{**c, "trials": [Trial(**t) for t in c["trials"]]}) for c in data["candidates"]]
    confirmations = [Confirmation(**{**c, "versus": [paired(v) for v in c["versus"]],
                                     "looks": [Look(**k) for k in c.get("looks", [])],
                                     "lean": Look(**c["lean"]) if c.get("lean") else None})
                     for c in data["confirmations"]]
    return PlanRecord(**{**data, "candidates": candidates, "skipped": [Skipped(**k) for k in data["skipped"]],
                         "confirmations": confirmations, "pick_versus_baseline": paired(data.get("pick_versus_baseline"))})
