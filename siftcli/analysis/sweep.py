"""A sweep's trials and baseline frontier in, its answer out (``sweep.json``): typed rows for every trial, the
non-dominated ones, the frontier, and the cheapest point that reaches the target with the reason it was chosen.

The records are ``TypedDict``s, as the run record is: ``sweep.json``, the study's frontier attribute and the
benchmarks read back as the same types."""

from __future__ import annotations

from typing import Any

from typing_extensions import NotRequired, TypedDict

from siftcli.training.record import CurvePoint

#: One point of a sweep's space: a value per searched key (what Optuna suggests, or a grid point).
Params = dict[str, float | int | str]


class BaselinePoint(TypedDict):
    """One baseline of the frontier as trained: capped at ``fraction`` of the full run's steps, fully decayed."""

    fraction: float
    train_seconds: float
    optimizer_steps: int
    final: dict[str, float]  # the run's final metrics (RunMetrics.final)
    metric: str
    higher_is_better: bool
    raw_samples: int
    curve: list[CurvePoint]


class Frontier(TypedDict):
    """The baseline frontier of one recipe (``frontier.json``; shared by every machine of a study)."""

    points: list[BaselinePoint]
    recipe_sha256: str
    recipe: NotRequired[dict[str, Any]]  # the recipe it was trained for, every field (``siftcli.studies.same_recipe``)
    max_resource: NotRequired[int]  # raw batches of the full run: the pruner's ceiling
    complete: NotRequired[bool]  # in the study only: every point trained


class TrialRow(TypedDict):
    """One trial of the sweep, as the study holds it."""

    number: int
    state: str  # complete, pruned or fail
    params: Params  # the trial's sift settings
    value: float | None
    train_seconds: float | None
    time_ratio: float | None  # train_seconds over the full baseline's
    time_to_target: float | None
    pruned_at_raw_batch: int | None
    error: str | None
    process_seconds: float | None
    startup_seconds: float | None
    kept: float | None
    owner: str | None  # the sweep folder (machine) that trained it


class FrontierRow(TypedDict):
    """A frontier point in the answer: what the table and the plot show of it."""

    kind: str  # "baseline"
    fraction: float
    value: float | None
    train_seconds: float
    optimizer_steps: int | None


class Advice(TypedDict, total=False):
    """The recommendation: the cheapest point that reached the target (a trial or a baseline), or none."""

    kind: str | None  # "trial", "baseline", or None: nothing reached the target
    text: str
    number: int  # the trial's
    params: Params  # the trial's
    fraction: float  # the baseline's
    time_ratio: float


class Startup(TypedDict):
    median: float | None
    max: float | None


class SweepResult(TypedDict):
    """``sweep.json``: the whole answer, the same from every machine of a study (``sweep_seconds`` is this machine's)."""

    status: str
    mode: str
    space: dict[str, Any]  # the searched space, as SweepSettings has it
    grid: bool
    metric: str
    higher_is_better: bool
    target: float | None
    target_drop: float
    trials: list[TrialRow]
    front: list[int]  # the non-dominated trials' numbers
    frontier: list[FrontierRow]
    recommendation: Advice
    counts: dict[str, int]  # trials by state: complete, pruned, fail
    trial_process_seconds: float
    startup_seconds: Startup
    sweep_seconds: float
    storage: str
    study: str | None
    plot: NotRequired[str]  # the plot's path, where matplotlib is installed


def full_point(frontier: Frontier) -> BaselinePoint:
    """The frontier's full baseline (fraction 1)."""
    return next(p for p in frontier["points"] if p["fraction"] == 1.0)


def non_dominated(rows: list[TrialRow], higher: bool) -> list[TrialRow]:
    """Rows no other row beats on both the metric and the wall-clock."""
    def better_or_equal(a: TrialRow, b: TrialRow) -> bool:
        good = a["value"] >= b["value"] if higher else a["value"] <= b["value"]  # type: ignore[operator]
        return good and a["train_seconds"] <= b["train_seconds"]  # type: ignore[operator]

    return [r for r in rows if not any(o is not r and better_or_equal(o, r) and
                                       (o["value"] != r["value"] or o["train_seconds"] != r["train_seconds"]) for o in rows)]


def advice(best: Any, full: BaselinePoint) -> Advice:
    """What to do, from the cheapest point that reached the target (a trial row or a frontier row; None: none did)."""
    if best is None:
        return {"kind": None, "text": "nothing reached the target; train the full baseline"}
    ratio = best["train_seconds"] / full["train_seconds"] if full["train_seconds"] else float("nan")
    if best["kind"] == "baseline":
        text = ("train the full baseline: no cheaper point reached the target" if best["fraction"] == 1.0 else
                f"Train less: the baseline at {best['fraction']:g} of its steps reached the target in {ratio:.2f}x the full "
                f"baseline's time, cheaper than every sifted trial that did")
        return {"kind": "baseline", "fraction": best["fraction"], "time_ratio": ratio, "text": text}
    params = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in best["params"].items())
    return {"kind": "trial", "number": best["number"], "params": best["params"], "time_ratio": ratio,
            "text": f"sift with {params} (trial {best['number']}): it reached the target in {ratio:.2f}x the full baseline's "
                    f"time, cheaper than every baseline on the frontier"}
