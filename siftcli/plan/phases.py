"""A plan's study in, its jobs trained out: :class:`Plan`, one process's view of a plan, which decides each phase's jobs
(the search's, then the confirmation's), takes them from the study every process and machine shares, and trains them
until the confirmation's seeds stop."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from siftcli.arms.table import arm_row
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.plan import confirm as confirming
from siftcli.plan import costs, evidence
from siftcli.plan import search as searching
from siftcli.plan.record import Candidate, PlannerNotes, PlanRecord
from siftcli.plan.strategies import reference_cost
from siftcli.plan.study import PlanStudy, Result
from siftcli.plan.trials import Trials
from siftcli.recipe.schema import Recipe
from siftcli.runio import Event
from siftcli.training.record import final_value

#: How often a process with nothing to train looks at the study again (another process or machine is training).
POLL_SECONDS = 2.0


@dataclass
class Plan:
    """One process's view of a plan: the study it shares, its own contexts, the recipe and the settings."""

    recipe: Recipe
    folder: Path
    study: PlanStudy
    trials: Trials
    record: PlanRecord
    metric: Any
    emit: Event

    @property
    def confirm_seeds(self) -> list[int]:
        return [self.recipe.seed + 1 + i for i in range(self.record.seeds)]

    def refresh(self) -> tuple[dict[int, Result], int]:
        """The record from the study: every candidate's trials, the unit, the costs, and the confirmation so far."""
        record, jobs, extra = self.record, self.study.jobs(), self.study.extra()
        done, pending = self.study.results()
        bases = [r.run for r in done.values() if not searching.is_search(r.job.phase) and r.job.arm == "baseline" and r.run]
        if bases:  # the confirmation trained the full schedule: the unit is measured now
            record.baseline_seconds = sum(float(b["total_seconds"]) for b in bases) / len(bases)
            record.unit_source = "measured"
        evidence.fill_search(record, jobs, done, extra, self.recipe.seed, self.metric)
        record.search_seconds = searching.spent(done, searching.is_search, extra)
        record.confirm_seconds = searching.spent(done, lambda phase: not searching.is_search(phase), {})
        picks = self.picks(done)
        for i, pick in enumerate(picks):
            pick.outcome = "the search's pick" if not i else "the search's pick's tie, confirmed beside it"
        record.confirmations = [
            confirming.confirmation(pick, self.confirm_seeds, done, self.metric, record.tolerance, record.horizons,
                                    len(picks))
            for pick in picks if any(r.job.arm == pick.arm and r.job.split == "evaluation" for r in done.values())]
        return done, pending

    def picks(self, done: dict[int, Result]) -> list[Candidate]:
        """The search's picks (its best and a runner-up tied with it: :func:`~siftcli.plan.search.contenders`), once
        the search has finished (the same on every process: a rule on the finished jobs ``done``, of the record
        :meth:`refresh` filled from them)."""
        if self.study.phases_queued() <= searching.PROMOTING:
            return []
        if not all(i in done for i, j in enumerate(self.study.jobs()) if searching.is_search(j.phase)):
            return []
        return searching.contenders(self.record)

    def open_picks(self, done: dict[int, Result]) -> list[Candidate]:
        """The picks whose confirming seeds go on: not yet trained, or trained and not stopped."""
        stopped = {c.arm for c in self.record.confirmations if c.stopped}
        return [c for c in self.picks(done) if c.arm not in stopped]

    def settled(self, phase: int) -> bool:
        """Whether the plan has no more jobs from ``phase`` on: the search found nothing to confirm, or the confirmation's
        seeds stopped (within, worse, inconclusive at the last seed, a failed run)."""
        if searching.is_search(phase) or (phase - searching.CONFIRMING) % 2:
            return False
        done, _ = self.refresh()
        if not self.picks(done):
            return True
        k = (phase - searching.CONFIRMING) // 2
        return k >= self.record.seeds or not self.open_picks(done)

    def left(self) -> float | None:
        """Seconds left in the search's budget, as its phases were decided (negative: over it; None until the screen's
        baseline set the unit). The confirmation has no share of it: its lines show none."""
        budget = self.record.search_budget_seconds
        return None if budget is None else budget - self.record.search_seconds

    @staticmethod
    def guarded(job: Any) -> bool:
        """Whether the budget's guard reads ``job``: a candidate's search job (baselines always train: the rungs need
        them; the confirmation has no share of the search's budget)."""
        return job.arm != "baseline" and searching.is_search(job.phase)

    def over_budget(self, job: Any, done: dict[int, Result]) -> str | None:
        """Why a :meth:`guarded` job is not trained (None: it is), the record just refreshed from the finished jobs
        ``done``: with its predicted seconds (:func:`~siftcli.plan.search.job_prediction`) the search would spend more
        than ``searching.BUDGET_SLACK`` of its budget (its jobs ran over their predictions: a busy machine, a unit
        predicted short). Checking what was spent before a job let one job take the search to 1.16 of its budget. The
        candidates not reached are listed as such, never dropped silently."""
        budget, spent = self.record.search_budget_seconds, self.record.search_seconds
        if budget is None:
            return None
        predicted = searching.job_prediction(self.record, done, job)
        if spent + predicted <= searching.BUDGET_SLACK * budget:
            return None
        return (f"{searching.SKIPPED}: the search's budget would be spent ({spent:.0f} s of {budget:.0f} s spent, "
                f"{predicted:.0f} s predicted for it)")

    def phase_jobs(self, phase: int) -> tuple[list[Any], PlannerNotes]:
        """The jobs of ``phase``, from the finished ones (run by the one process that claims the phase)."""
        t0 = time.perf_counter()
        done, _ = self.refresh()
        record, seed, extra = self.record, self.recipe.seed, self.study.extra()
        if searching.is_search(phase) and record.baseline_seconds is not None:  # the budget the search decides with
            record.search_budget_seconds = costs.budget_seconds(record)
        if phase == searching.BASELINES:
            return searching.search_baselines(seed), {}
        if phase in searching.DEEPENING:
            notes: PlannerNotes = {}
            untrained, own = extra.get("untrained"), 0.0
            if "untrained" not in extra:  # measured once, by the planner of the first deeper probe
                untrained = self.trials.untrained(seed)
                own = time.perf_counter() - t0
                notes = {"untrained": untrained,  # type: ignore[typeddict-item]
                         "planner_seconds": {**extra.get("planner_seconds", {}), "untrained": own}}
            return searching.deepen_jobs(record, done, seed, phase, untrained, self.metric,
                                         record.search_seconds + own), notes
        if phase == searching.SCREENING:
            ctx = self.trials.context(seed, "validation", record.screen_fidelity)
            ctx.runs["baseline"] = searching.find(done, "baseline", record.screen_fidelity, seed, "validation").run  # type: ignore[union-attr]
            w = ctx.workload

            def derive(arm: str) -> tuple[list[int] | None, float]:
                chosen = arm_row(arm).derive(ctx, arm)
                return chosen.subset, sum(chosen.upfront.values())

            pools, fixed, upfront = costs.measure(
                record.candidates, derive, len(w.train_data),
                lambda kind: reference_cost(self.recipe, kind, len(w.holdout_data or []), len(w.train_data)),
                record.baseline_seconds or 0.0)
            for c in record.candidates:
                c.pool_fraction, c.fixed_cost = pools.get(c.arm, c.pool_fraction), fixed.get(c.arm, c.fixed_cost)
                c.upfront_cost = upfront.get(c.arm, c.upfront_cost)
            own = time.perf_counter() - t0
            jobs, over = searching.screen_jobs(record, seed, record.search_seconds + own)
            return jobs, {"pools": pools, "fixed": fixed, "upfront": upfront, "over_budget": over,
                          "planner_seconds": {**extra.get("planner_seconds", {}), "screen": own}}
        if phase == searching.PROMOTION_BASELINE:
            jobs, arms, over = searching.promotion_jobs(record, done, seed, record.search_seconds)
            return jobs, {"promoted": arms, "over_budget_promotion": over}
        if phase == searching.PROMOTING:
            arms = {c.arm: c for c in record.candidates}
            jobs = [searching.promotion_job(arms[arm], record, seed) for arm in extra.get("promoted", [])]
            return [j for j in jobs if j is not None], {}
        picks = self.open_picks(done)
        k, pick_phase = divmod(phase - searching.CONFIRMING, 2)
        return (confirming.seed_jobs(picks, k, self.confirm_seeds[k], baseline=not pick_phase) if picks else []), {}

    def work(self, after_job: Callable[[], None] = lambda: None) -> None:
        """Take and train jobs phase by phase until the confirmation's seeds stop: what every process of a plan runs."""
        phase = 0
        while not self.settled(phase):
            told = False

            def waiting(what: str) -> None:
                nonlocal told
                if not told:
                    self.emit("plan", {"phase": "wait", "arm": what,
                                       "left": self.left() if searching.is_search(phase) else None})
                    told = True

            self.study.queue_phase(phase, lambda: self.phase_jobs(phase), lambda: waiting("the next phase's jobs"))
            while True:
                taken = self.study.take()
                if taken is not None:
                    self._train(*taken)
                    after_job()
                    continue
                done, _ = self.study.results()
                if all(i in done for i, j in enumerate(self.study.jobs()) if j.phase == phase):
                    break
                waiting("jobs other processes are training")
                time.sleep(POLL_SECONDS)  # another process trains this phase's last jobs; nothing else to do here
            if phase == searching.BASELINES:
                self._check_baseline()
            phase += 1

    def _train(self, trial: Any, index: int) -> None:
        job = self.study.jobs()[index]
        # a search job reads what every process spent first: the guard decides on it, the progress line says it
        done, _ = self.refresh() if searching.is_search(job.phase) else self.study.results()
        over = self.over_budget(job, done) if self.guarded(job) else None
        if over is not None:  # not trained: it would take the search past its budget and its slack
            self.study.finish(trial, Result(job, 0.0, None, over), None)
            return
        rung = {searching.SCREENING: self.record.screen_fidelity,
                searching.PROMOTING: self.record.promotion_fidelity}.get(job.phase, job.fidelity)
        base = searching.find(done, "baseline", rung, job.seed, job.split)  # the baseline it is held against
        where = {"fidelity": job.fidelity} if job.split == "validation" else {"seed": job.seed}
        try:
            self.emit("plan", {"phase": "search" if job.split == "validation" else "confirm", "arm": job.arm, **where,
                               "left": self.left() if job.split == "validation" else None})
            result = self.trials.run(job, self.folder, base.run if base is not None else None, self.emit)
        except (KeyboardInterrupt, RunInterrupted):
            self.study.give_back(trial, "interrupted: its plan was stopped")
            raise
        self.study.finish(trial, result, final_value(result.run) if result.run else None)  # type: ignore[arg-type]

    def _check_baseline(self) -> None:
        done, _ = self.study.results()
        base = searching.find(done, "baseline", searching.SCREEN, self.recipe.seed, "validation")
        if base is None or base.run is None:
            raise SiftcliError(f"siftcli plan: the baseline run failed ({base.error if base else 'not run'}); see "
                               f"{self.folder / 'search' / 'baseline'}")
