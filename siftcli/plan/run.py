"""A recipe, a budget and a tolerance in; ``plan.json``, ``plan.yaml`` (and the filtered data it trains on) out.

The evaluation rows are split once, seeded apart from any training seed: half is the validation split the search ranks
candidates on, half the evaluation split the confirmation reports on, so the rows the final numbers come from never
chose anything. (A recipe's holdout is not used for ranking: the cheap references are built from it, so it would favour
the filters they drive.)
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from siftcli.arms.context import evaluation_warning, prepare
from siftcli.arms.table import arm_row
from siftcli.errors import RunInterrupted, SiftcliError, first_line, restore_sigterm, sigterm_as_interrupt
from siftcli.plan import confirm as confirming
from siftcli.plan import search as searching
from siftcli.plan.record import Candidate, Confirmation, Look, PlannerNotes, PlanRecord, Skipped, Trial, Versus
from siftcli.plan.strategies import online_recipe, reference_cost, strategies
from siftcli.plan.study import DEFAULT_STUDY, Job, PlanStudy, Result
from siftcli.plan.trials import Trials
from siftcli.plan.view import plan_html, screen_note
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import Recipe, ReferenceSpec, recipe_to_yaml
from siftcli.runio import Event, atomic_write_json, atomic_write_text, claim, read_json, write_table
from siftcli.tasks import metric
from siftcli.training.record import final_value
from siftcli.training.resume import same_sources
from siftcli.workload.build import build_workload

#: Seeds the split of the evaluation rows into validation and evaluation halves (apart from every training seed).
SPLIT_SEED = 15_485_863
#: How often a process with nothing to train looks at the study again (another process or machine is training).
POLL_SECONDS = 2.0


def split_eval(n: int) -> tuple[list[int], list[int]]:
    """Validation and evaluation halves of ``n`` evaluation rows (seeded, the same for every seed and resume)."""
    if n < 4:
        raise SiftcliError(f"siftcli plan: the evaluation data has {n} rows; it needs at least 4 to set half aside for "
                           "choosing (raise data.eval_fraction or give data.eval_source)")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    return sorted(order[: n // 2]), sorted(order[n // 2:])


def _decidable(workload: Any) -> None:
    """Evaluation rows a plan can decide on, checked before its folder exists: enough to halve, of more than one class
    (on one, every strategy that predicts it ties, and no budget would decide)."""
    split_eval(len(workload.eval_data))
    coarse = evaluation_warning(workload)
    if coarse is not None and "one class only" in coarse:
        raise SiftcliError(f"siftcli plan: {coarse}")


@dataclass(frozen=True)
class PlanSettings:
    """What a plan may spend and how it decides, with ``siftcli plan``'s defaults: the budget in full baseline runs, the
    tolerance in metric points, the confirmation's paired seeds, the processes on this machine, and a study shared
    with other machines (``storage``/``study``; none: a journal file in the plan's folder)."""

    budget: float = 2.0
    tolerance: float = 1.0
    seeds: int = 5
    workers: int = 1
    storage: str = ""
    study: str | None = None

    def __post_init__(self) -> None:
        """One line for each bad option, when the settings are made (before anything loads), as ``SweepSettings``
        checks its own; the storage is opened by :func:`run_plan`, through the study layer's one check."""
        budget, tolerance, seeds, workers, storage, study = (self.budget, self.tolerance, self.seeds, self.workers,
                                                             self.storage, self.study)
        if not budget == budget or not 1 < budget <= 100:
            raise SiftcliError(f"--budget {budget}: expected a number of full baseline runs above 1 and at most 100")
        if not tolerance == tolerance or not 0 <= tolerance <= 100:
            raise SiftcliError(f"--tolerance {tolerance}: expected metric points from 0 to 100 (how far below the "
                               "baseline a cheaper strategy may end and still be picked)")
        if not 2 <= seeds <= 50:
            raise SiftcliError(f"--seeds {seeds}: the confirmation needs 2 to 50 paired seeds (5 for an accuracy claim)")
        if not 1 <= workers <= 64:
            raise SiftcliError(f"--workers {workers}: expected 1 to 64 processes on this machine")
        if study is not None and not study.strip():
            raise SiftcliError("--study: expected a name shared by every machine of the plan")
        if study is not None and not storage:
            raise SiftcliError("--study names a study in a shared --storage; give --storage too (without it the plan's "
                               "study is a journal file in its folder)")


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
        searching.fill_search(record, jobs, done, extra, self.recipe.seed, self.metric)
        record.search_seconds = searching.spent(done, searching.is_search, extra)
        record.confirm_seconds = searching.spent(done, lambda phase: not searching.is_search(phase), {})
        pick = self.pick(done)
        if pick is not None:
            pick.outcome = "the search's pick"
        record.confirmations = [] if pick is None or not any(
            r.job.arm == pick.arm and r.job.split == "evaluation" for r in done.values()) else [
            confirming.confirmation(pick, self.confirm_seeds, done, self.metric, record.tolerance, record.horizons)]
        return done, pending

    def pick(self, done: dict[int, Result]) -> Candidate | None:
        """The search's pick, once the search has finished (the same on every process: a rule on the finished jobs
        ``done``, of the record :meth:`refresh` filled from them)."""
        if self.study.phases_queued() <= searching.PROMOTING:
            return None
        if not all(i in done for i, j in enumerate(self.study.jobs()) if searching.is_search(j.phase)):
            return None
        return searching.winner(self.record)

    def settled(self, phase: int) -> bool:
        """Whether the plan has no more jobs from ``phase`` on: the search found nothing to confirm, or the confirmation's
        seeds stopped (within, worse, inconclusive at the last seed, a failed run)."""
        if searching.is_search(phase) or (phase - searching.CONFIRMING) % 2:
            return False
        done, _ = self.refresh()
        if self.pick(done) is None:
            return True
        k = (phase - searching.CONFIRMING) // 2
        conf = self.record.confirmations[0] if self.record.confirmations else None
        return k >= self.record.seeds or (conf is not None and conf.stopped != "")

    def left(self) -> float | None:
        """Seconds left in the search's budget, as its phases were decided (negative: over it; None until the screen's
        baseline set the unit). The confirmation has no share of it: its lines show none."""
        budget = self.record.search_budget_seconds
        return None if budget is None else budget - self.record.search_seconds

    def decide(self, phase: int) -> tuple[list[Any], PlannerNotes]:
        """The jobs of ``phase``, from the finished ones (run by the one process that claims the phase)."""
        t0 = time.perf_counter()
        done, _ = self.refresh()
        record, seed, extra = self.record, self.recipe.seed, self.study.extra()
        if searching.is_search(phase) and record.baseline_seconds is not None:  # the budget the search decides with
            record.search_budget_seconds = searching.budget_seconds(record)
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

            pools, fixed, upfront = searching.measure(
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
            return [Job(phase, arm, record.promotion_fidelity, seed, "validation")  # type: ignore[arg-type]
                    for arm in extra.get("promoted", [])], {}
        pick = self.pick(done)
        k, pick_phase = divmod(phase - searching.CONFIRMING, 2)
        return (confirming.seed_jobs(pick, k, self.confirm_seeds[k], baseline=not pick_phase) if pick else []), {}

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

            self.study.queue_phase(phase, lambda: self.decide(phase), lambda: waiting("the next phase's jobs"))
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
        done, _ = self.study.results()
        base = searching.find(done, "baseline", job.fidelity, job.seed, job.split)
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


def _rows(n: int) -> dict[str, list[int]]:
    val, ev = split_eval(n)
    return {"validation": val, "evaluation": ev}


def _threads(workers: int) -> None:
    """Each of ``workers`` processes on this machine trains on its share of the cores, the baseline included, so that
    time ratios compare runs under the same conditions."""
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def run_plan(recipe: Recipe | None, settings: PlanSettings | None = None, *, output: str | None = None,
             resume: str | None = None, on_event: Event | None = None,
             extend_seeds: int | None = None, trust_data: bool = False) -> tuple[Path, PlanRecord]:
    """Search, confirm and decide; every finished job is in the plan's study and ``plan.json`` is rewritten after each,
    so an interrupted plan resumes where it stopped (``resume``: with the settings it was started with;
    ``extend_seeds``: a confirmation left inconclusive goes on up to that many seeds, on the alpha its schedule kept
    for an extension)."""
    from siftcli import studies
    from siftcli.studies import check_journal, recipe_sha256

    emit = on_event or (lambda kind, data: None)
    t0 = time.perf_counter()
    if resume:
        folder = Path(resume)
        if not (folder / "plan.json").exists():
            raise SiftcliError(f"--resume {resume}: not a plan folder (no plan.json)")
        claim(folder, "--resume")
        saved = read_json(folder / "plan.json")
        try:
            record = load_record(saved)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            what = f"lacks {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {first_line(exc, 100)}"
            raise SiftcliError(f"--resume {resume}: {folder / 'plan.json'} is damaged ({what}: not what siftcli wrote); "
                               "start the plan again in a new -o folder") from None
        if not record.storage:
            check_journal(folder)
        if not record.study or "screen_fidelity" not in saved:
            raise SiftcliError(f"--resume {resume}: this plan was written by an earlier siftcli whose search ran other "
                               "phases; run the plan again")
        record.horizons = record.horizons or [record.seeds]  # a plan written before confirmations stopped early
        if extend_seeds is not None:
            _extend(record, extend_seeds, resume)
        recipe = load_recipe(folder / "recipe.yaml")
        same_sources(folder, recipe, trust_data)  # the finished jobs were measured on the files as they were
        built = time.perf_counter()
        first = build_workload(recipe)
        record.seed_seconds = record.seed_seconds or time.perf_counter() - built
    else:
        assert recipe is not None
        s = settings or PlanSettings()
        studies.check_storage(s.storage, s.study or DEFAULT_STUDY)  # a server that does not answer: now, not later
        candidates, skipped = strategies(recipe)  # before the folder: a recipe it cannot plan leaves none
        built = time.perf_counter()
        first, folder = prepare(recipe, output, "-plan", check=_decidable)
        record = PlanRecord("running", recipe.name, first.metric, s.budget, s.tolerance, s.seeds, candidates=candidates,
                            skipped=skipped, storage=s.storage, study=s.study or DEFAULT_STUDY, workers=s.workers,
                            horizons=[s.seeds], seed_seconds=time.perf_counter() - built, epochs=recipe.epochs)
    _threads(record.workers)
    rows = _rows(len(first.eval_data))
    record.validation_rows, record.evaluation_rows = len(rows["validation"]), len(rows["evaluation"])
    wall_before = record.wall_seconds
    ps = PlanStudy(record.storage, folder, record.study, metric(record.metric).higher_is_better)
    if resume and ps.recorded_recipe() not in (None, recipe_sha256(recipe)):
        raise SiftcliError(f"--resume {resume}: {folder / 'recipe.yaml'} changed since the plan started (the plan's "
                           "finished jobs were trained on the recipe it had); put the original back, or start a new plan "
                           "with the edited recipe")
    if extend_seeds is not None:
        ps.extend(record.seeds)
    ps.join(recipe_sha256(recipe), {"budget": record.budget, "tolerance": record.tolerance, "seeds": record.seeds})
    ps.recover(resumed=bool(resume))
    coarse = evaluation_warning(first)
    if coarse is not None:
        emit("warning", {"message": coarse})
    plan = Plan(recipe, folder, ps, Trials(recipe, rows, {recipe.seed: first}), record, metric(record.metric), emit)

    def save() -> None:
        plan.refresh()
        record.wall_seconds = wall_before + time.perf_counter() - t0
        atomic_write_json(folder / "plan.json", dataclasses.asdict(record))

    stop_beat = ps.heartbeat()
    helpers: list[subprocess.Popen] = []
    previous = sigterm_as_interrupt()  # between jobs too: a stop leaves plan.json saying interrupted, never running
    try:
        save()
        helpers = [_spawn(folder, i) for i in range(1, record.workers)]
        plan.work(after_job=save)
        plan.refresh()
        _decide(record)
        _write_recipe(record, recipe, plan, folder)
        record.status = "completed"
        save()
        atomic_write_text(folder / "report.html", plan_html(record))
        _join(helpers)
    except (KeyboardInterrupt, RunInterrupted) as exc:
        _join(helpers, stop=True)
        record.status = "interrupted"
        save()
        raise RunInterrupted(str(folder), signal=getattr(exc, "signal", "SIGINT"),
                             resume_command=f"siftcli plan --resume {folder}") from None
    except BaseException:
        _join(helpers, stop=True)
        raise
    finally:
        restore_sigterm(previous)
        stop_beat()
    return folder, record


def _extend(record: PlanRecord, seeds: int, folder: str) -> None:
    """More confirming seeds for a resumed plan: only more than it has, only while its confirmation is undecided."""
    if not record.seeds < seeds <= 50:
        raise SiftcliError(f"--seeds {seeds} with --resume {folder}: the plan confirms up to {record.seeds} seeds already; "
                           f"give more (at most 50) to extend it, or leave --seeds out to resume it as it was")
    decided = [c for c in record.confirmations if c.stopped in ("within", "worse", "slower", "failed")]
    if decided:
        raise SiftcliError(f"--seeds {seeds} with --resume {folder}: the confirmation already stopped ({decided[0].arm}: "
                           f"{decided[0].stopped} after {len(decided[0].seeds)} seeds); more seeds would not change it")
    if record.status == "completed" and not record.confirmations:
        raise SiftcliError(f"--seeds {seeds} with --resume {folder}: the search found nothing to confirm; more seeds "
                           "would not change the answer")
    record.horizons = [*(record.horizons or [record.seeds]), seeds]
    record.seeds = seeds
    record.status = "running"


# -- the other processes of this machine -------------------------------------------------------------------------------
def _spawn(folder: Path, index: int) -> subprocess.Popen:
    """One more process taking jobs from the plan's study (``python -m siftcli.plan.run FOLDER``), started the study
    layer's way; its output goes to ``workers/worker-N.log``."""
    from siftcli.studies import spawn

    return spawn(["-m", "siftcli.plan.run", str(folder)], folder / "workers" / f"worker-{index}.log",
                 env={"SIFTCLI_PLAN_WORKER": str(index)})


def _join(helpers: list[subprocess.Popen], stop: bool = False) -> None:
    """Wait for the helpers to end (they stop when the confirmation's jobs are done); ``stop``: SIGTERM first (a
    training one saves, gives its job back to the study and exits)."""
    for p in helpers:
        if stop and p.poll() is None:
            p.terminate()
    for p in helpers:
        try:
            p.wait(timeout=None if not stop else 60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def worker_main(folder: Path) -> int:
    """A helper process: the plan's recipe and study from its folder, then jobs until the confirmation's are done. It
    writes no record (the process that started it does)."""
    from siftcli.studies import die_with_parent

    die_with_parent()
    record = load_record(read_json(folder / "plan.json"))
    recipe = load_recipe(folder / "recipe.yaml")
    _threads(record.workers)
    first = build_workload(recipe)
    ps = PlanStudy(record.storage, folder, record.study, metric(record.metric).higher_is_better)
    plan = Plan(recipe, folder, ps, Trials(recipe, _rows(len(first.eval_data)), {recipe.seed: first}), record,
                metric(record.metric), lambda kind, data: None)
    stop_beat = ps.heartbeat()
    try:
        plan.work()
    except RunInterrupted as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    finally:
        stop_beat()
    return 0


def _decide(record: PlanRecord) -> None:
    """The confirmed pick when it is faster, or training on everything, with why; its cost, and after how many runs the
    plan pays."""
    ok = [c for c in record.confirmations if c.within_tolerance and c.time_ratio <= searching.FASTER]
    cost = record.search_seconds + record.confirm_seconds
    exact = searching.exact_pick(record)
    unit = record.baseline_seconds or 0.0
    if exact is not None and (not ok or searching.full_time(exact, unit) < ok[0].time_ratio * unit):
        ratio = searching.full_time(exact, unit) / unit if unit else 1.0
        record.pick, record.pick_family, record.pick_time_ratio, record.pick_versus_baseline = \
            exact.arm, exact.family, ratio, None
        saving = unit * (1 - ratio)
        record.payback_runs = cost / saving if saving > 0 else None
        also = (f" (faster than {ok[0].arm}, confirmed at {ok[0].time_ratio:.2f} of the time)" if ok else
                f" ({_confirmed(record)})" if record.confirmations else "")
        record.answer = (f"{exact.family}: {exact.arm}, the baseline's training at {ratio:.2f} of its time (predicted "
                         f"from the screen); its results are the baseline's, so there is nothing to confirm{also}")
        return
    if not ok:
        record.pick, record.pick_family, record.pick_time_ratio, record.pick_versus_baseline = "baseline", "everything", 1.0, None
        record.payback_runs = None
        screened = [c for c in record.candidates if c.trials]
        if not screened and not record.confirmations:
            record.answer = (f"train on everything, untested: the budget of {record.budget:g} baseline runs paid for the "
                             f"baselines only, so none of the {len(record.candidates)} strategies was screened; raise "
                             "--budget to compare them")
            return
        if not record.confirmations:
            told = [c for c in screened if any(t.informative for t in c.trials if t.status == "complete")]
            if not told:
                record.answer = (f"train on everything, undecided: no screened strategy said anything ({len(screened)} of "
                                 f"{len(record.candidates)} screened, each too short to tell: {screen_note(record)})")
                return
            record.answer = ("train on everything: no strategy was within the tolerance of the baseline at less time on "
                             f"the validation split ({len(screened)} of {len(record.candidates)} screened, "
                             f"{len(screened) - len(told)} of them too short to tell)")
            return
        record.answer = f"train on everything: {_confirmed(record)}"
        return
    best = ok[0]
    family = next(c.family for c in record.candidates if c.arm == best.arm)
    record.pick, record.pick_family, record.pick_time_ratio = best.arm, family, best.time_ratio
    record.pick_versus_baseline = best.versus[0]
    saving = (record.baseline_seconds or 0.0) * (1 - best.time_ratio)
    record.payback_runs = cost / saving if saving > 0 else None
    record.answer = (f"{family}: {best.arm} at {best.time_ratio:.2f} of the baseline's time, "
                     f"{best.versus[0].mean:+.2f} ± {best.versus[0].se:.2f} points against it, confirmed after "
                     f"{len(best.seeds)} seeds")


def _confirmed(record: PlanRecord) -> str:
    """What the confirmation found, in a line."""
    c = record.confirmations[0]
    v = c.versus[0]
    said = (f"{c.arm}: {v.mean:+.2f} ± {v.se:.2f} points over {v.n} seeds at {c.time_ratio:.2f} of the time"
            if v.n else f"{c.arm}: no paired seed")
    why = {"worse": "worse than the tolerance", "failed": "a confirming run failed",
           "slower": f"not faster: every seed took over {searching.FASTER:g} of its baseline's time",
           "within": f"within the tolerance but not faster ({c.time_ratio:.2f} of the time, over "
                     f"{searching.FASTER:g})"}.get(
        c.stopped, f"inconclusive after {len(c.seeds)} seeds: neither within nor beyond the tolerance; "
                   f"`siftcli plan --resume DIR --seeds {min(50, len(c.seeds) + 3)}` adds seeds")
    return f"the confirmation found {said}, {why}"


def _write_recipe(record: PlanRecord, recipe: Recipe, plan: Plan, folder: Path) -> None:
    """``plan.yaml``: the chosen recipe; a filter or dedup pick also writes its rows (``train.csv``, ``eval.csv``)."""
    family = record.pick_family
    out = recipe
    if family == "fewer-epochs":
        done, _ = plan.study.results()
        base = searching.find(done, "baseline", 1.0, plan.confirm_seeds[0], "evaluation")
        steps = max(1, round(float(record.pick.partition("=")[2]) * base.run["optimizer_steps"]))  # type: ignore[union-attr,index]
        out = recipe.model_copy(update={"max_steps": steps})
    elif family in ("online", "teacher-cache"):
        out = online_recipe(recipe, record.pick) if family == "online" else recipe.model_copy(update={
            "distill": recipe.distill.model_copy(update={"cache": True}) if recipe.distill else None})
    elif family in confirming.SUBSET_FAMILIES:
        ctx = plan.trials.context(recipe.seed, "validation", 1.0)
        chosen = arm_row(record.pick).derive(ctx, record.pick).subset or []
        w = ctx.workload
        if w.source_rows is None or not hasattr(w.source_rows, "to_csv") or w.task == "image-classification":
            record.answer += "; the rows were not written (image data): run `siftcli filter` with the same settings"
        else:
            train, evald = folder / "train.csv", folder / "eval.csv"
            rows = w.source_rows.select([w.source_index[i] for i in chosen])
            write_table(rows, train)
            write_table(w.eval_source_rows, evald)
            data = recipe.data.model_copy(update={"source": str(train.resolve()), "eval_source": str(evald.resolve()),
                                                  "format": "csv", "eval_split": None, "train_split": "train"})
            out = recipe.model_copy(update={"data": data, "sift": recipe.sift.model_copy(update={
                "enabled": False, "reference": ReferenceSpec()})})
            record.data_out = str(train)
    if family != "online":
        out = out.model_copy(update={"sift": out.sift.model_copy(update={"enabled": False})})
    path = folder / "plan.yaml"
    atomic_write_text(path, f"# siftcli plan: {record.answer}\n" + recipe_to_yaml(out))
    record.recipe_out = str(path)


def load_record(data: dict[str, Any]) -> PlanRecord:
    """A ``plan.json`` back into its typed record (a resumed plan)."""
    def paired(p: dict[str, Any] | None) -> Versus | None:
        return None if p is None else Versus(**{**p, "ci95": tuple(p["ci95"])})

    candidates = [Candidate(**{**c, "trials": [Trial(**t) for t in c["trials"]]}) for c in data["candidates"]]
    confirmations = [Confirmation(**{**c, "versus": [paired(v) for v in c["versus"]],
                                     "looks": [Look(**k) for k in c.get("looks", [])]}) for c in data["confirmations"]]
    return PlanRecord(**{**data, "candidates": candidates, "skipped": [Skipped(**k) for k in data["skipped"]],
                         "confirmations": confirmations, "pick_versus_baseline": paired(data.get("pick_versus_baseline"))})


if __name__ == "__main__":
    raise SystemExit(worker_main(Path(sys.argv[1])))
