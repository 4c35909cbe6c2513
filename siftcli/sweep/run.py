"""``sweep-beta`` on Optuna: warm trial workers, Hyperband pruning or a Pareto front, the baseline frontier every
answer is held against, and one study shared by any number of machines.

The parent process joins the study (:mod:`siftcli.sweep.study`: a journal file in the sweep folder by default, or any
Optuna storage URL), gets the baseline frontier (the full baseline and baselines capped at fractions of its steps,
learning rate fully decayed in each; trained once per study), then asks Optuna for trials and hands each to a warm
worker (:mod:`siftcli.sweep.workers`, ``--jobs`` of them), which imports once and keeps the tokenized data between trials.
A trial reports every periodic evaluation to Optuna and, in budget mode, stops at once when Hyperband prunes it;
it leaves ``trial-N/trial.json`` and the parent tells the study. A crashed trial is a failed trial (its error kept),
its worker is replaced and the sweep goes on; a killed sweep continues with ``--resume``: finished trials stay,
interrupted ones run again with the same parameters. The same command on several machines with one ``--storage``
and ``--study`` works on one study: the trial count is the study's, and every machine's summary is the study's.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from siftcli import parallel, studies
from siftcli.analysis.stats import target_for, time_to_target
from siftcli.analysis.sweep import Frontier, FrontierRow, SweepResult, TrialRow, advice, full_point, non_dominated
from siftcli.arms.context import SeedContext, prepare
from siftcli.arms.run import run_one
from siftcli.errors import RunInterrupted, SiftcliError, first_line, restore_sigterm, sigterm_as_interrupt
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import Recipe
from siftcli.report.plots import plots_wanted, write_sweep_plot
from siftcli.runio import atomic_write_json, claim, read_json
from siftcli.sweep.settings import SweepSettings
from siftcli.sweep.space import distributions as space_distributions
from siftcli.sweep.space import grid_points
from siftcli.sweep.study import SHARED, open_study, shared_frontier
from siftcli.sweep.trial import run_trial
from siftcli.sweep.workers import Finished, Pool, WorkloadCache
from siftcli.tasks import metric
from siftcli.training.resume import same_sources
from siftcli.workload.build import build_workload

#: How often the parent refreshes its trials' liveness and looks at the other machines' (seconds).
TEND_EVERY = 5.0


# -- the sweep (parent) ---------------------------------------------------------------------------------
def run_sweep(recipe: Recipe | None, settings: SweepSettings | None, *, output: str | None = None, resume: str | None = None,
              jobs: int = 1, on_event: Any = None, trust_data: bool = False) -> tuple[Path, SweepResult]:
    """The whole sweep: frontier, trials (``jobs`` warm workers; 0 runs them in this process), results."""
    if parallel.launched():
        raise SiftcliError("sweep-beta runs its trials in worker processes of its own (--jobs, one GPU each); launch it "
                           "without torchrun")
    studies.optuna_module()
    emit = on_event or (lambda kind, data: None)
    if jobs < 0:
        raise SiftcliError(f"--jobs must be 0 or more, got {jobs}")
    if resume:
        sweep_dir = Path(resume)
        if not (sweep_dir / "sweep_settings.json").exists():
            raise SiftcliError(f"--resume {resume}: not a sweep folder (no sweep_settings.json)")
        claim(sweep_dir, "--resume")
        saved = read_json(sweep_dir / "sweep_settings.json")
        try:
            settings = SweepSettings(**saved)
        except (TypeError, ValueError) as exc:  # edited or torn: not a mapping, a key missing or unknown
            raise SiftcliError(f"--resume {resume}: {sweep_dir / 'sweep_settings.json'} is damaged ({first_line(exc, 100)}); "
                               "start the sweep again in a new -o folder") from None
        if not settings.storage:
            studies.check_journal(sweep_dir)
        studies.check_storage(settings.storage)
        recipe = load_recipe(sweep_dir / "recipe.yaml")
        same_sources(sweep_dir, recipe, trust_data)  # the finished trials were measured on the files as they were
        workload = None
    else:
        assert recipe is not None and settings is not None
        if settings.trials < 1:
            raise SiftcliError(f"--trials must be at least 1, got {settings.trials}")
        if settings.grid:
            settings.trials = math.prod(len(s["values"]) for s in settings.space.values())
        settings.seed = recipe.seed
        studies.check_storage(settings.storage, settings.study)
        workload, sweep_dir = prepare(recipe, output, "-sweep")
        atomic_write_json(sweep_dir / "sweep_settings.json", asdict(settings))
    started = time.perf_counter()
    previous = sigterm_as_interrupt()
    try:
        higher = metric(recipe.resolved_metric).higher_is_better
        study = open_study(settings, sweep_dir, higher, None)
        if studies.join(study, recipe, settings.shared(), SHARED):
            # the machine that started the study queues the grid and the replays, once, before the frontier: another
            # machine, which waits for the frontier, finds the queue full when it starts asking
            for params in settings.enqueue + grid_points(settings):
                studies.enqueue(study, params)
        frontier = run_frontier(recipe, settings, sweep_dir, workload, emit, study)
        study = open_study(settings, sweep_dir, higher, frontier["max_resource"])
        _run_trials(study, settings, sweep_dir, frontier, jobs, emit, resumed=bool(resume))
    except (KeyboardInterrupt, RunInterrupted) as exc:
        signal = getattr(exc, "signal", "SIGINT")
        atomic_write_json(sweep_dir / "sweep.json", {"status": "interrupted"})
        raise RunInterrupted(str(sweep_dir), signal=signal,
                             resume_command=f"siftcli sweep-beta --resume {sweep_dir}") from None
    finally:
        restore_sigterm(previous)
    result = summarise_sweep(study, settings, sweep_dir, frontier, time.perf_counter() - started)
    atomic_write_json(sweep_dir / "sweep.json", result)
    try:
        if plots_wanted():
            result["plot"] = str(write_sweep_plot(sweep_dir, result))
    except ImportError:
        pass
    return sweep_dir, result


def run_frontier(recipe: Recipe, settings: SweepSettings, sweep_dir: Path, workload: Any, emit: Any,
                 study: Any = None) -> Frontier:
    """The full baseline, then baselines capped at fractions of its steps (fully decayed): trained once per study
    (another machine's is read), each point kept as it finishes; ``frontier.json`` is this folder's copy."""
    import copy

    path = sweep_dir / "frontier.json"
    key = studies.recipe_sha256(recipe)
    local = read_json(path) if path.exists() else None
    # a frontier prices every trial: of one recipe only
    if local is not None and not studies.same_recipe(local.get("recipe_sha256"), local.get("recipe"), recipe):
        raise SiftcliError(f"{path}: this frontier was trained for another recipe; use a new -o folder for this one")

    def train(held: Frontier, publish: Any) -> Frontier:
        nonlocal workload
        done: Frontier = {"points": [], "recipe_sha256": key, "recipe": studies.recipe_dump(recipe), **(local or {}),
                          **{k: v for k, v in held.items() if k != "complete"}}
        have = {p["fraction"] for p in done["points"]}
        for fraction in sorted(set(settings.frontier) | {1.0}, reverse=True):  # the full run first: it sets the steps
            if fraction in have:
                continue
            if workload is None:
                workload = build_workload(recipe)
            initial = copy.deepcopy(workload.model.state_dict())
            full = next((p for p in done["points"] if p["fraction"] == 1.0), None)
            baseline = recipe.model_copy(update={"sift": recipe.sift.model_copy(update={"enabled": False})})
            ctx = SeedContext(baseline, workload, initial)
            ctx.runs["baseline"] = full or {}
            arm = "baseline" if fraction == 1.0 else f"train-less:fraction={fraction:g}"
            m = run_one(ctx, arm, sweep_dir / f"baseline-{fraction:g}", _alive(emit, publish, done))
            done["points"].append({"fraction": fraction, "train_seconds": m["train_seconds"],
                                   "optimizer_steps": m["optimizer_steps"], "final": m["final"], "metric": m["metric"],
                                   "higher_is_better": m["higher_is_better"], "raw_samples": m["raw_samples"],
                                   "curve": m["curve"]})
            full = full_point(done)
            done["max_resource"] = math.ceil(full["raw_samples"] / recipe.batch_size)
            atomic_write_json(path, done)
            publish(done)
        return done

    if study is None:  # no study to share it through (a caller's own use): this folder's copy alone
        done = train({}, lambda d: None)
    else:
        done = shared_frontier(study, studies.owner_of(sweep_dir), settings.stale_seconds, train,
                                       lambda text: emit("waiting", {"text": text}))
        done = {k: v for k, v in done.items() if k != "complete"}
        if not studies.same_recipe(done.get("recipe_sha256"), done.get("recipe"), recipe):
            raise SiftcliError(f"--study {settings.study}: its frontier was trained for another recipe; give another "
                           "--study name, or the recipe it was trained for")
    done["points"].sort(key=lambda p: p["fraction"])
    atomic_write_json(path, done)
    return done


def _alive(emit: Any, publish: Any, done: Frontier) -> Any:
    """The frontier run's events, refreshing its claim at most every TEND_EVERY seconds (so a waiting machine can
    tell a slow frontier from a dead one)."""
    last = [time.time()]

    def on_event(kind: str, data: dict[str, Any]) -> None:
        emit(kind, data)
        if time.time() - last[0] > TEND_EVERY:
            publish(done)
            last[0] = time.time()

    return on_event


def _run_trials(study: Any, settings: SweepSettings, sweep_dir: Path, frontier: Frontier, jobs: int, emit: Any,
                resumed: bool = False) -> None:
    """Ask, hand out and tell trials until the study has its count and none of its trials runs anywhere."""
    distributions = space_distributions(settings.space)
    full_seconds = full_point(frontier)["train_seconds"]
    me = studies.owner_of(sweep_dir)
    pool = Pool(sweep_dir, max(1, jobs), fresh=settings.fresh_processes, gpus=_gpu_count()) if jobs else None
    cache = WorkloadCache() if jobs == 0 else None
    studies.tend(study, [], me, settings.stale_seconds, resumed=resumed)
    tended = time.time()
    try:
        while True:
            count = studies.counted(study)
            busy = pool.busy() if pool else 0
            if pool is None or busy < pool.size:
                # a queued trial is always taken; a fresh one only while the count has room (a grid's are all queued)
                if count.waiting or (count.taken < settings.trials and not settings.grid):
                    trial = study.ask(distributions)
                    if studies.surplus(study, trial, settings.trials, settings.grid):
                        continue
                    trial.set_user_attr(studies.OWNER, me)
                    trial.set_user_attr(studies.ALIVE, time.time())
                    emit("trial", {"number": trial.number, "params": trial.params})
                    if pool is None:
                        began = time.time()
                        try:
                            result, code = run_trial(sweep_dir, trial.number, cache=cache, sent=began), 0
                        except RunInterrupted:  # Ctrl-C or SIGTERM inside the trial's training: the sweep stops too
                            raise
                        except Exception as exc:  # a failed trial is recorded, the sweep goes on
                            result, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
                        _tell(study, Finished(trial.number, code, result, time.time() - began), sweep_dir, full_seconds,
                              settings, emit)
                    else:
                        pool.start(trial.number)
                    continue
                if count.running == 0 and busy == 0:
                    return  # the study has its trials, and nothing runs anywhere
            for end in pool.wait(1.0) if pool else []:
                _tell(study, end, sweep_dir, full_seconds, settings, emit)
            if pool is None and count.running:
                time.sleep(1.0)  # in-process mode waiting on other machines' trials
            if time.time() - tended > TEND_EVERY:
                studies.tend(study, pool.running() if pool else [], me, settings.stale_seconds)
                tended = time.time()
    except BaseException:
        if pool is not None:  # SIGTERM to the workers: each finishes its step and keeps what it did
            for end in pool.stop():
                _tell(study, replace(end, code=end.code or 143), sweep_dir, full_seconds, settings, emit)
        raise


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def _tell(study: Any, end: Finished, sweep_dir: Path, full_seconds: float, settings: SweepSettings, emit: Any) -> None:
    """Tell the study how trial ``number`` ended, with what the summary needs as its attributes (every machine
    summarises from the study, so its trial folders need not be shared)."""
    optuna, number = studies.optuna_module(), end.number
    try:
        _record(study, studies.live_trial(study, number), end, sweep_dir, full_seconds, settings)
    except optuna.exceptions.UpdateFinishedTrialError:  # another machine took it as stale and queued it again
        emit("warning", {"message": f"trial {number} was taken over by another machine (silent over "
                                    f"{settings.stale_seconds:g} s); its result here is kept in {sweep_dir}/trial-{number}"})
    emit("trial_end", {"number": number, "state": study.get_trials(deepcopy=False)[number].state.name})


def _record(study: Any, trial: Any, end: Finished, sweep_dir: Path, full_seconds: float, settings: SweepSettings) -> None:
    optuna = studies.optuna_module()
    number, code, reply, seconds = trial.number, end.code, end.reply, end.seconds
    path = sweep_dir / f"trial-{number}" / "trial.json"
    result = read_json(path) if code == 0 and path.exists() else None
    trial.set_user_attr("process_seconds", seconds)
    if reply and reply.get("startup_seconds") is not None:
        trial.set_user_attr("startup_seconds", reply["startup_seconds"])
    if code != 0 or not result or "state" not in result:
        err = sweep_dir / f"trial-{number}" / "stderr.txt"
        tail = err.read_text(errors="replace").strip().splitlines()[-3:] if err.exists() else []
        reason = (reply or {}).get("error") or (" | ".join(tail) if tail else f"exit code {code}")
        if reply is None and code not in (0, 130, 143):
            reason = f"exit code {code}: {reason}" if tail else reason
        if code in (130, 143):
            studies.requeue(study, trial, f"interrupted: {reason}")
        else:
            trial.set_user_attr("error", reason[-500:])
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
    else:
        value = (result["final"] or {}).get(result["metric"])
        for k in ("train_seconds", "kept", "curve", "pruned_at_raw_batch"):
            if result.get(k) is not None:
                trial.set_user_attr(k, result[k])
        trial.set_user_attr("value", value)
        trial.set_user_attr("time_ratio", result["train_seconds"] / full_seconds if full_seconds else None)
        if result["state"] == "pruned":
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif value is None or not math.isfinite(value):
            trial.set_user_attr("error", "no final metric")
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, [value, result["train_seconds"]] if settings.mode == "pareto" else value)


# -- the answer -----------------------------------------------------------------------------------------
def summarise_sweep(study: Any, settings: SweepSettings, sweep_dir: Path, frontier: Frontier,
                    seconds: float) -> SweepResult:
    """Rows for every trial, the non-dominated ones, the frontier and the cheapest point reaching the target: all from
    the study, so every machine working on it gives the same answer (``sweep_seconds`` is this machine's)."""
    optuna = studies.optuna_module()
    recipe = load_recipe(sweep_dir / "recipe.yaml")
    full = full_point(frontier)
    target = target_for(full, recipe.eval.target_drop)  # type: ignore[arg-type]  (a point has a run's final and metric)
    higher = full["higher_is_better"]
    rows: list[TrialRow] = []
    for t in study.get_trials(deepcopy=False):
        if t.state in (optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING) or t.user_attrs.get(studies.INTERRUPTED) \
                or t.user_attrs.get(studies.SURPLUS):
            continue
        a = t.user_attrs
        run = {"metric": full["metric"], "higher_is_better": higher, "curve": a.get("curve", [])}
        rows.append({"number": t.number, "state": t.state.name.lower(), "params": t.params, "value": a.get("value"),
                     "train_seconds": a.get("train_seconds"), "time_ratio": a.get("time_ratio"),
                     "time_to_target": time_to_target(run, target), "pruned_at_raw_batch": a.get("pruned_at_raw_batch"),
                     "error": a.get("error"), "process_seconds": a.get("process_seconds"),
                     "startup_seconds": a.get("startup_seconds"), "kept": a.get("kept"), "owner": a.get(studies.OWNER)})
    complete = [r for r in rows if r["state"] == "complete"]
    front = non_dominated(complete, higher)
    points: list[FrontierRow] = [{"kind": "baseline", "fraction": p["fraction"], "value": (p["final"] or {}).get(p["metric"]),
               "train_seconds": p["train_seconds"], "optimizer_steps": p.get("optimizer_steps")}
              for p in frontier["points"]]
    feasible = [r for r in complete if settings.max_time_ratio is None or (r["time_ratio"] or 0) <= settings.max_time_ratio]
    candidates = [{"kind": "trial", **r} for r in feasible] + points
    reached = [c for c in candidates if c["value"] is not None and target is not None
               and (c["value"] >= target - 1e-12 if higher else c["value"] <= target + 1e-12)]
    best = min(reached, key=lambda c: c["train_seconds"]) if reached else None
    startups = sorted(r["startup_seconds"] for r in rows if r["startup_seconds"] is not None)
    return {"status": "completed", "mode": settings.mode, "space": settings.space, "grid": settings.grid,
            "metric": full["metric"], "higher_is_better": higher, "target": target, "target_drop": recipe.eval.target_drop,
            "trials": rows, "front": [r["number"] for r in front], "frontier": points, "recommendation": advice(best, full),
            "counts": {s: sum(1 for r in rows if r["state"] == s) for s in ("complete", "pruned", "fail")},
            "trial_process_seconds": sum(r["process_seconds"] or 0 for r in rows),
            "startup_seconds": {"median": startups[len(startups) // 2] if startups else None,
                                "max": startups[-1] if startups else None},
            "sweep_seconds": seconds, "storage": settings.storage or str(sweep_dir / "optuna.journal"),
            "study": settings.study}
