"""Candidates and a budget in, every candidate's trials on the validation split out: successive halving, cheap first.

The unit is one full baseline run, measured first (its clock, evaluation included, is the plan's yardstick). Rung 0
trains the baseline and every candidate for a third of its own schedule (``FIDELITY``) in order of predicted cost, while
the search has spent less than ``RUNG0_SHARE`` of the budget; the candidates within the tolerance of the baseline at
that fidelity (else the two best) are promoted, cheapest first, to the full schedule while the budget lasts. A trial
is never started when its predicted cost would take the search past the budget; a trial that runs over its prediction
is the only way the search can exceed it, and the record shows by how much.

Every trial is a run folder (``search/<arm>/rung<k>/``); a plan resumed after an interruption reads the finished ones
back instead of training them again (training is deterministic per seed, so an interrupted trial simply runs again).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from siftcli.analysis.stats import diff_points
from siftcli.arms.context import SeedContext
from siftcli.arms.run import folder_name, run_one
from siftcli.arms.table import arm_row
from siftcli.errors import RunInterrupted
from siftcli.plan.record import Candidate, PlanRecord, Trial
from siftcli.recipe.schema import Recipe
from siftcli.runio import read_json
from siftcli.training.record import RunMetrics, final_value, paid_seconds

#: Rung 0 trains each candidate for this share of its own schedule.
FIDELITY = 1 / 3
#: Rung 0 may spend up to this share of the budget; the rest is for the full-schedule runs of the promoted.
RUNG0_SHARE = 0.6
#: At most this many candidates reach the full schedule.
PROMOTE = 3


@dataclass
class Clock:
    """The plan's own time: this process's seconds plus what earlier (interrupted) processes spent."""

    before: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    def spent(self) -> float:
        return self.before + time.perf_counter() - self.started


def cached_run(ctx: SeedContext, arm: str, folder: Path, on_event: Callable[[str, dict[str, Any]], None] | None) -> RunMetrics:
    """``run_one``, or the finished run this folder already holds (a resumed plan); an unfinished one starts again."""
    done = folder / "metrics.json"
    if done.exists():
        metrics = read_json(done)
        if metrics.get("status") == "completed":
            return metrics
    if folder.exists():
        shutil.rmtree(folder)
    return run_one(ctx, arm, folder, on_event)


def at_fidelity(recipe: Recipe, fidelity: float) -> Recipe:
    """The recipe trained for ``fidelity`` of its epochs, schedule fully decayed there (one evaluation, at the end)."""
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


@dataclass
class Search:
    """One seed's search on the validation split: the context per fidelity (its own baseline run), the record."""

    record: PlanRecord
    folder: Path
    make_context: Callable[[Recipe], SeedContext]
    recipe: Recipe
    clock: Clock
    on_event: Callable[[str, dict[str, Any]], None]
    save: Callable[[], None] = lambda: None  # writes the record: after every trial, so a killed plan keeps them
    contexts: dict[float, SeedContext] = field(default_factory=dict)

    def context(self, fidelity: float) -> SeedContext:
        """The seed's context at ``fidelity``, its baseline run first (what train-less derives from and each trial is held
        against). References are built once per seed and shared by every fidelity."""
        if fidelity not in self.contexts:
            ctx = self.make_context(at_fidelity(self.recipe, fidelity) if fidelity < 1 else self.recipe)
            if self.contexts:
                ctx._references = next(iter(self.contexts.values()))._references
            self.on_event("plan", {"phase": "search", "arm": "baseline", "fidelity": fidelity, "left": self.left()})
            ctx.runs["baseline"] = cached_run(ctx, "baseline", self.folder / "baseline" / _rung(fidelity), self.on_event)
            self.contexts[fidelity] = ctx
            self.record.search_seconds = self.clock.spent()
            self.save()
        return self.contexts[fidelity]

    def left(self) -> float | None:
        """Seconds left in the budget (None until the baseline set the unit)."""
        unit = self.record.baseline_seconds
        return None if unit is None else self.record.budget * unit - self.clock.spent()

    def trial(self, candidate: Candidate, fidelity: float) -> Trial:
        """Train ``candidate`` at ``fidelity`` (or read it back), recorded on the candidate."""
        ctx = self.context(fidelity)
        self.on_event("plan", {"phase": "search", "arm": candidate.arm, "fidelity": fidelity, "left": self.left()})
        base = ctx.runs["baseline"]
        try:
            run = cached_run(ctx, candidate.arm, self.folder / folder_name(candidate.arm) / _rung(fidelity), self.on_event)
        except RunInterrupted:  # Ctrl-C or SIGTERM inside the trial's training: the plan stops, resumable
            raise
        except Exception as exc:  # noqa: BLE001  (a candidate that cannot run is a result, not the plan's end)
            trial = Trial(candidate.arm, fidelity, 0.0, None, final_value(base), None, "failed", f"{type(exc).__name__}: {exc}")
        else:
            unit = paid_seconds(self.contexts[1.0].runs["baseline"])
            trial = Trial(candidate.arm, fidelity, run["total_seconds"], final_value(run), final_value(base),
                          paid_seconds(run) / max(1e-9, unit), "complete")
            if candidate.pool_fraction is None and run.get("subset"):
                candidate.pool_fraction = run["subset"]["samples"] / max(1, run["subset"]["of"])
        candidate.trials.append(trial)
        self.record.search_seconds = self.clock.spent()
        self.save()
        return trial


def _rung(fidelity: float) -> str:
    return "full" if fidelity >= 1 else f"fidelity{fidelity:.2f}"


def _measure_pools(s: Search, candidates: list[Candidate]) -> None:
    """The share of the pool a dedup candidate keeps, found before any of them trains (the near-duplicate search takes
    seconds, on the plan's clock), so its predicted cost is its real size and not the whole pool's."""
    ctx = s.contexts[1.0]
    n = max(1, len(ctx.workload.train_data))
    for c in candidates:
        if c.pool_fraction is None and c.family in ("dedup", "dedup+filter") and not c.trials:
            try:
                subset = arm_row(c.arm).derive(ctx, c.arm).subset
            except RunInterrupted:
                raise
            except Exception:  # noqa: BLE001  (the trial will fail the same way and record why)
                continue
            if subset is not None:
                c.pool_fraction = len(subset) / n


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


def search(s: Search, candidates: list[Candidate], metric: Any) -> list[Candidate]:
    """Run the rungs; returns the candidates that finished the full schedule within the tolerance on validation, cheapest
    (time ratio) first."""
    record = s.record
    full = s.context(1.0)
    base = full.runs["baseline"]
    record.baseline_seconds = base["total_seconds"]
    record.baseline_metric = final_value(base)
    budget = record.budget * record.baseline_seconds
    tol = record.tolerance

    _measure_pools(s, candidates)
    rung0 = breadth_first(candidates, record.baseline_seconds)
    low_base = None
    for c in rung0:
        done = [t for t in c.trials if t.fidelity == FIDELITY]
        if done:
            continue
        if s.clock.spent() + predicted_cost(c, record.baseline_seconds, FIDELITY) + \
                (0 if low_base is not None else record.baseline_seconds * FIDELITY) > RUNG0_SHARE * budget:
            c.outcome = "over budget (cheap rung)"
            continue
        low_base = s.context(FIDELITY)
        s.trial(c, FIDELITY)

    def ok_low(c: Candidate) -> bool:
        t = next((t for t in c.trials if t.fidelity == FIDELITY and t.status == "complete"), None)
        return t is not None and within(t.metric, t.baseline_metric, tol, metric)

    tried = [c for c in candidates if any(t.fidelity == FIDELITY and t.status == "complete" for t in c.trials)]
    promoted = sorted([c for c in tried if ok_low(c)], key=lambda c: predicted_cost(c, record.baseline_seconds, 1.0))
    if not promoted:  # nothing held up at the cheap rung: give the two best a full schedule all the same
        promoted = sorted(tried, key=lambda c: _low_metric(c) * (1 if metric.higher_is_better else -1), reverse=True)[:2]
    for c in tried:
        if c not in promoted[:PROMOTE]:
            c.outcome = "stopped at the cheap rung" + ("" if ok_low(c) else ": worse")
    for c in promoted[:PROMOTE]:
        if any(t.fidelity == 1.0 for t in c.trials):
            continue
        if s.clock.spent() + predicted_cost(c, record.baseline_seconds, 1.0) > budget:
            c.outcome = "over budget (full)"
            continue
        s.trial(c, 1.0)
    winners = []
    for c in candidates:
        t = next((t for t in c.trials if t.fidelity == 1.0), None)
        if t is None:
            continue
        if t.status != "complete":
            c.outcome = "failed"
        elif not within(t.metric, record.baseline_metric, tol, metric):
            c.outcome = "full: worse"
        elif t.time_ratio is None or t.time_ratio >= 1:
            c.outcome = "full: not faster"
        else:
            c.outcome = "full: within tolerance, faster"
            winners.append(c)
    return sorted(winners, key=lambda c: next(t.time_ratio for t in c.trials if t.fidelity == 1.0) or 1.0)


def _low_metric(c: Candidate) -> float:
    t = next((t for t in c.trials if t.fidelity == FIDELITY and t.status == "complete" and t.metric is not None), None)
    return t.metric if t is not None else float("-inf")
