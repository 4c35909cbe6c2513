"""The plan's typed records: what ``plan.json`` holds (every candidate tried, the confirmation, the decision)."""

from __future__ import annotations

from dataclasses import dataclass, field

from typing_extensions import TypedDict


class PlannerNotes(TypedDict, total=False):
    """What the phase planners learned that every process of a plan needs (one attribute of its study): each dedup
    candidate's share of the pool, the planner's own seconds (on the plan's clock), the candidates the cheap rung's
    prediction put over the budget at full fidelity, and the candidates chosen for the confirmation."""

    pools: dict[str, float]  # arm -> share of the pool it trains on
    planner_seconds: dict[str, float]  # phase -> seconds
    over_budget_full: list[str]
    confirm: list[str]


@dataclass
class Trial:
    """One candidate at one fidelity on the validation split."""

    arm: str
    fidelity: float  # the share of the candidate's own schedule it trained (1: all of it)
    seconds: float  # its clock, reference and near-duplicate search paid in full
    metric: float | None  # on the validation split
    baseline_metric: float | None  # the baseline at the same fidelity
    time_ratio: float | None  # seconds over the full baseline's
    status: str  # complete, failed
    error: str | None = None


@dataclass
class Candidate:
    """A strategy the plan considered: an arm of the table, its family, and what became of it."""

    arm: str
    family: str  # everything, fewer-epochs, filter, dedup, dedup+filter, online, teacher-cache
    about: str
    pool_fraction: float | None  # share of the pool it trains on (None: decided while training)
    trials: list[Trial] = field(default_factory=list)
    extra_cost: float = 0.0  # predicted cost beyond its pool share, in runs of its schedule (a scoring forward)
    outcome: str = "waiting"  # promoted, stopped at rung 0, within tolerance, worse than tolerance, over budget, ...


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
class Confirmation:
    """A candidate re-run on the evaluation split over paired seeds against the full baseline and a random subset."""

    arm: str
    seeds: list[int]
    metric: list[float | None]
    baseline_metric: list[float | None]
    time_ratio: float  # mean over seeds of its seconds over the baseline's (reference paid)
    seconds: float  # what confirming it cost
    versus: list[Versus]
    within_tolerance: bool  # the 95% interval against the baseline stays above -tolerance


@dataclass
class PlanRecord:
    """``plan.json``: the settings, every candidate, the confirmation and the decision with its cost and pay-back."""

    status: str  # running, completed, interrupted
    recipe: str
    metric: str
    budget: float  # in full baseline runs
    tolerance: float  # metric points
    seeds: int
    baseline_seconds: float | None = None
    baseline_metric: float | None = None  # validation
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
    recipe_out: str | None = None
    data_out: str | None = None
    storage: str = ""  # the Optuna storage URL shared with other machines ("": a journal file in the plan folder)
    study: str = ""  # the study's name in that storage
    workers: int = 1  # processes on this machine
    wall_seconds: float = 0.0  # this machine's wall-clock (search and confirmation cost are every process's seconds)
