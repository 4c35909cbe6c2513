"""A recipe, a budget and a tolerance in; ``plan.json``, ``plan.yaml`` (and the filtered data it trains on) out.

The orchestration: a new plan's record (or a resumed one's, checked against its folder), the study every process
shares, the helpers (:mod:`.workers`), the phases (:class:`~siftcli.plan.phases.Plan`), ``plan.json`` after every
job, and the verdict (:mod:`.verdict`) at the end; an interrupt leaves ``plan.json`` saying so, resumable.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
from pathlib import Path

from siftcli.arms.context import evaluation_warning, prepare
from siftcli.errors import RunFault, RunInterrupted, SiftcliError, first_line, restore_sigterm, sigterm_as_interrupt
from siftcli.plan.phases import Plan
from siftcli.plan.record import PlanRecord, load_record
from siftcli.plan.settings import MAX_SEEDS, PlanSettings, decidable, eval_rows
from siftcli.plan.strategies import strategies
from siftcli.plan.study import DEFAULT_STUDY, PlanStudy
from siftcli.plan.trials import Trials, drop_forks, machine_fault
from siftcli.plan.verdict import conclude, write_recipe
from siftcli.plan.view import plan_html
from siftcli.plan.workers import join, spawn, threads
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import Recipe
from siftcli.runio import Event, atomic_write_json, atomic_write_text, claim, read_json
from siftcli.tasks import metric
from siftcli.training.resume import same_sources
from siftcli.workload.build import build_workload

__all__ = ["PlanSettings", "load_record", "run_plan"]


def run_plan(recipe: Recipe | None, settings: PlanSettings | None = None, *, output: str | None = None,
             resume: str | None = None, on_event: Event | None = None,
             extend_seeds: int | None = None, trust_data: bool = False) -> tuple[Path, PlanRecord]:
    """Search, confirm and decide; every finished job is in the plan's study and ``plan.json`` is rewritten after each,
    so an interrupted plan resumes where it stopped (``resume``: with the settings it was started with;
    ``extend_seeds``: a confirmation left inconclusive goes on up to that many seeds, on the alpha its schedule kept
    for an extension)."""
    from siftcli import studies
    from siftcli.studies import check_journal

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
        first, folder = prepare(recipe, output, "-plan", check=decidable)
        record = PlanRecord("running", recipe.name, first.metric, s.budget, s.tolerance, s.seeds, candidates=candidates,
                            skipped=skipped, storage=s.storage, study=s.study or DEFAULT_STUDY, workers=s.workers,
                            horizons=[s.seeds], seed_seconds=time.perf_counter() - built, epochs=recipe.epochs)
    threads(record.workers)
    rows = eval_rows(len(first.eval_data))
    record.validation_rows, record.evaluation_rows = len(rows["validation"]), len(rows["evaluation"])
    wall_before = record.wall_seconds
    ps = PlanStudy(record.storage, folder, record.study, metric(record.metric).higher_is_better)
    if resume and not ps.started_with(recipe):
        raise SiftcliError(f"--resume {resume}: {folder / 'recipe.yaml'} changed since the plan started (the plan's "
                           "finished jobs were trained on the recipe it had); put the original back, or start a new plan "
                           "with the edited recipe")
    if resume and extend_seeds is None:  # plan.json edited since the plan started: said as such, not as a study clash
        started = ps.started_settings()
        edited = [f"{k} {getattr(record, k):g} (started with {started[k]:g})" for k in ("budget", "tolerance", "seeds")
                  if k in started and started[k] != getattr(record, k)]
        if edited:
            raise SiftcliError(f"--resume {resume}: {folder / 'plan.json'} says {', '.join(edited)}: it was edited since "
                               "the plan started, and its finished jobs were decided with the settings it started with; "
                               f"put those back (to confirm over more seeds: --resume {resume} --seeds N)")
    if extend_seeds is not None:
        ps.extend(record.seeds)
    ps.join(recipe, {"budget": record.budget, "tolerance": record.tolerance, "seeds": record.seeds})
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
        helpers = [spawn(folder, i) for i in range(1, record.workers)]
        plan.work(after_job=save)
        plan.refresh()
        conclude(record)
        write_recipe(record, recipe, plan, folder)
        record.status = "completed"
        save()
        drop_forks(folder)
        atomic_write_text(folder / "report.html", plan_html(record))
        join(helpers)
    except (KeyboardInterrupt, RunInterrupted) as exc:
        join(helpers, stop=True)
        record.status = "interrupted"
        save()
        raise RunInterrupted(str(folder), signal=getattr(exc, "signal", "SIGINT"),
                             resume_command=f"siftcli plan --resume {folder}") from None
    except (OSError, RunFault) as exc:
        join(helpers, stop=True)
        if not machine_fault(exc):
            raise
        record.status = "interrupted"
        try:  # on a full disk this may fail too: the record of the last finished job stands
            save()
        except OSError:
            pass
        what = f"{exc.strerror or exc} ({exc.filename or folder})" if isinstance(exc, OSError) else first_line(exc)
        raise RunFault(f"{what}: the plan stopped; every finished job is kept "
                       f"in {folder}; free space (or make it writable), then continue with: siftcli plan --resume "
                       f"{folder}") from None
    except BaseException:
        join(helpers, stop=True)
        raise
    finally:
        restore_sigterm(previous)
        stop_beat()
    return folder, record


def _extend(record: PlanRecord, seeds: int, folder: str) -> None:
    """More confirming seeds for a resumed plan: only more than it has, only while its confirmation is undecided."""
    if not record.seeds < seeds <= MAX_SEEDS:
        raise SiftcliError(f"--seeds {seeds} with --resume {folder}: the plan confirms up to {record.seeds} seeds already; "
                           f"give more (at most {MAX_SEEDS}) to extend it, or leave --seeds out to resume it as it was")
    decided = [c for c in record.confirmations if c.stopped in ("within", "worse", "slower", "failed")]
    if decided and len(decided) == len(record.confirmations):
        raise SiftcliError(f"--seeds {seeds} with --resume {folder}: the confirmation already stopped ({decided[0].arm}: "
                           f"{decided[0].stopped} after {len(decided[0].seeds)} seeds); more seeds would not change it")
    if record.status == "completed" and not record.confirmations:
        raise SiftcliError(f"--seeds {seeds} with --resume {folder}: the search found nothing to confirm; more seeds "
                           "would not change the answer")
    record.horizons = [*(record.horizons or [record.seeds]), seeds]
    record.seeds = seeds
    record.status = "running"
