"""``sweep-beta`` on Optuna: trials in their own processes, Hyperband pruning or a Pareto front, and the
baseline frontier every answer is held against.

The parent process owns the study (a journal file in the sweep folder by default, or any Optuna storage
URL), runs the baseline frontier once (the full baseline and baselines capped at fractions of its steps,
learning rate fully decayed in each), then asks Optuna for trials and runs each as
``python -m siftcli.sweep SWEEP_DIR NUMBER`` (``--jobs`` at a time). A trial reports every periodic
evaluation to Optuna and, in budget mode, stops at once when Hyperband prunes it; it leaves
``trial-N/trial.json`` and the parent tells the study. A trial process that crashes is a failed trial
(its error kept) and the sweep goes on; a killed sweep continues with ``--resume``: finished trials stay,
interrupted ones run again with the same parameters.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from siftcli.analysis import target_for, time_to_target
from siftcli.config import Recipe, load_recipe
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.runio import atomic_write_json, claim, read_json
from siftcli.space import SEARCHABLE, _distributions, apply_params, grid_points, parse_space  # noqa: F401  (public here too)

FRONTIER = (0.25, 0.5, 0.75, 1.0)
#: Trials are not pruned after this share of the run's raw batches.
LAST_PRUNE = 0.9
#: The trial process; tests may point it elsewhere to exercise crashes.
TRIAL_COMMAND = [sys.executable, "-m", "siftcli.sweep"]


@dataclass
class SweepSettings:
    """Everything a sweep needs to continue after a kill: saved as ``sweep_settings.json``."""

    mode: str = "budget"  # budget: one objective, Hyperband; pareto: (metric, wall-clock), no pruning
    trials: int = 12
    space: dict[str, dict[str, Any]] = field(default_factory=dict)
    grid: bool = False
    frontier: list[float] = field(default_factory=lambda: list(FRONTIER))
    max_time_ratio: float | None = None  # budget: trials slower than this share of the full baseline are infeasible
    prune: bool = True
    storage: str = ""  # Optuna storage URL; empty: a journal file in the sweep folder
    study: str = "siftcli-sweep"
    seed: int = 0
    enqueue: list[dict[str, Any]] = field(default_factory=list)  # parameter sets to try first (replays)


# -- the study ------------------------------------------------------------------------------------------
def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise SiftcliError('sweep-beta needs Optuna: pip install "siftcli[sweep]"') from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def storage_url(settings: SweepSettings, sweep_dir: Path) -> Any:
    _optuna()
    if settings.storage:
        return settings.storage
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    return JournalStorage(JournalFileBackend(str(sweep_dir / "optuna.journal")))


def pruner_for(settings: SweepSettings, max_resource: int) -> Any:
    """Hyperband over raw batches consumed (comparable across keep rates), from a ninth of the run to all of it."""
    optuna = _optuna()
    if settings.mode != "budget" or not settings.prune:
        return optuna.pruners.NopPruner()
    return optuna.pruners.HyperbandPruner(min_resource=max(1, max_resource // 9), max_resource=max_resource, reduction_factor=3)


def open_study(settings: SweepSettings, sweep_dir: Path, recipe: Recipe, max_resource: int) -> Any:
    optuna = _optuna()
    higher = _higher_is_better(recipe)
    # a grid is enqueued trial by trial (GridSampler stops the study itself, which only works inside optimize())
    constraints = None
    if settings.mode == "budget" and settings.max_time_ratio is not None:
        limit = settings.max_time_ratio
        constraints = lambda t: [t.user_attrs.get("time_ratio", 0.0) - limit]  # noqa: E731  (<= 0: feasible)
    sampler = optuna.samplers.TPESampler(seed=settings.seed, n_startup_trials=min(5, max(1, settings.trials // 3)),
                                         constraints_func=constraints)
    kwargs: dict[str, Any] = {"directions": ["maximize" if higher else "minimize", "minimize"]} if settings.mode == "pareto" \
        else {"direction": "maximize" if higher else "minimize"}
    return optuna.create_study(storage=storage_url(settings, sweep_dir), study_name=settings.study, sampler=sampler,
                               pruner=pruner_for(settings, max_resource), load_if_exists=True, **kwargs)


def _higher_is_better(recipe: Recipe) -> bool:
    from siftcli.tasks import TASKS

    return TASKS[recipe.task].higher_is_better


# -- one trial (in its own process) ---------------------------------------------------------------------
def run_trial(sweep_dir: Path, number: int) -> dict[str, Any]:
    """Train trial ``number`` of the sweep in ``sweep_dir``; report evaluations; stop when pruned."""

    optuna = _optuna()
    from siftcli.arms import SeedContext, run_one
    from siftcli.builders import build_workload

    settings = SweepSettings(**read_json(sweep_dir / "sweep_settings.json"))
    base = load_recipe(sweep_dir / "recipe.yaml")
    frontier = read_json(sweep_dir / "frontier.json")
    study = open_study(settings, sweep_dir, base, frontier["max_resource"])
    trial = _live_trial(study, number, optuna)
    params = trial.params
    recipe = apply_params(base, params)
    workload = build_workload(recipe)
    initial = copy.deepcopy(workload.model.state_dict())
    curve: list[dict[str, Any]] = []
    pruned_at: list[int] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind != "eval":
            return
        curve.append(data)
        value = data.get(workload.metric)
        raw_batches = math.ceil(data["raw_samples"] / recipe.batch_size)
        if value is not None and settings.mode == "budget" and math.isfinite(value):
            trial.report(value, raw_batches)
            # never in the last tenth of the run: stopping there saves nothing and throws a finished result away
            late = raw_batches >= LAST_PRUNE * frontier["max_resource"]
            if data.get("reason") != "final" and not late and trial.should_prune():
                pruned_at.append(raw_batches)
                raise optuna.TrialPruned()

    folder = sweep_dir / f"trial-{number}"
    try:
        metrics = run_one(SeedContext(recipe, workload, initial), "sifted", folder, on_event)
    except optuna.TrialPruned:
        last = curve[-1]
        result = {"state": "pruned", "pruned_at_raw_batch": pruned_at[0], "train_seconds": last["train_seconds"],
                  "optimizer_steps": last["step"], "final": {k: last.get(k) for k in ("loss", workload.metric)}}
    else:
        result = {"state": "complete", "train_seconds": metrics["train_seconds"], "optimizer_steps": metrics["optimizer_steps"],
                  "final": metrics["final"], "kept": (metrics.get("keep") or {}).get("achieved"),
                  "scoring_cost": metrics.get("scoring_cost")}
    result.update(number=number, params=params, metric=workload.metric, higher_is_better=workload.higher_is_better,
                  curve=[{k: p.get(k) for k in ("step", "raw_samples", "train_seconds", workload.metric)} for p in curve])
    atomic_write_json(folder / "trial.json", result)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m siftcli.sweep SWEEP_DIR NUMBER``: one trial (what the parent launches)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        run_trial(Path(argv[0]), int(argv[1]))
    except SiftcliError as exc:
        print(f"siftcli: error: {exc}", file=sys.stderr)
        return 2
    except RunInterrupted as exc:
        return exc.exit_code
    return 0


# -- the sweep (parent) ---------------------------------------------------------------------------------
def run_sweep(recipe: Recipe | None, settings: SweepSettings | None, *, output: str | None = None, resume: str | None = None,
              jobs: int = 1, on_event: Any = None) -> tuple[Path, dict[str, Any]]:
    """The whole sweep: frontier, trials (``jobs`` processes at a time; 0 runs them in this process), results."""
    from siftcli import parallel
    from siftcli.runner import prepare

    if parallel.launched():
        raise SiftcliError("sweep-beta runs its trials as processes of its own (--jobs, one GPU each); launch it without "
                           "torchrun")
    optuna = _optuna()
    emit = on_event or (lambda kind, data: None)
    if jobs < 0:
        raise SiftcliError(f"--jobs must be 0 or more, got {jobs}")
    if resume:
        sweep_dir = Path(resume)
        if not (sweep_dir / "sweep_settings.json").exists():
            raise SiftcliError(f"--resume {resume}: not a sweep folder (no sweep_settings.json)")
        claim(sweep_dir)
        settings = SweepSettings(**read_json(sweep_dir / "sweep_settings.json"))
        _optuna_storage_ok(settings)
        recipe = load_recipe(sweep_dir / "recipe.yaml")
        workload, initial = None, None
    else:
        assert recipe is not None and settings is not None
        if settings.trials < 1:
            raise SiftcliError(f"--trials must be at least 1, got {settings.trials}")
        if settings.grid:
            settings.trials = math.prod(len(s["values"]) for s in settings.space.values())
        settings.seed = recipe.seed
        _optuna_storage_ok(settings)
        workload, sweep_dir = prepare(recipe, output, "-sweep")
        initial = copy.deepcopy(workload.model.state_dict())
        atomic_write_json(sweep_dir / "sweep_settings.json", asdict(settings))
    started = time.perf_counter()
    previous = _on_sigterm()
    try:
        frontier = run_frontier(recipe, settings, sweep_dir, workload, initial, emit)
        study = open_study(settings, sweep_dir, recipe, frontier["max_resource"])
        _requeue_interrupted(study, optuna)
        if not resume:
            for params in settings.enqueue + grid_points(settings):
                study.enqueue_trial(params)
        _run_trials(study, settings, sweep_dir, frontier, jobs, emit, optuna)
    except (KeyboardInterrupt, RunInterrupted) as exc:
        signal = getattr(exc, "signal", "SIGINT")
        atomic_write_json(sweep_dir / "sweep.json", {"status": "interrupted"})
        raise RunInterrupted(str(sweep_dir), signal=signal,
                             resume_command=f"siftcli sweep-beta --resume {sweep_dir}") from None
    finally:
        if previous is not None:
            import signal as signals

            signals.signal(signals.SIGTERM, previous)
    result = summarise_sweep(study, settings, sweep_dir, frontier, time.perf_counter() - started, optuna)
    atomic_write_json(sweep_dir / "sweep.json", result)
    try:
        from siftcli.plots import write_sweep_plot

        result["plot"] = str(write_sweep_plot(sweep_dir, result))
    except ImportError:
        pass
    return sweep_dir, result


class _Terminated(KeyboardInterrupt):
    """SIGTERM met while the parent waits on its trials: unwound like Ctrl-C (the trials are stopped and waited for,
    the status written), reported as SIGTERM (exit code 143)."""

    signal = "SIGTERM"


def _on_sigterm() -> Any:
    """Handle SIGTERM like SIGINT for the sweep's lifetime (a batch scheduler's stop must not orphan trial processes);
    returns the previous handler, or None off the main thread, where no handler can be set."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        raise _Terminated()

    return signal.signal(signal.SIGTERM, stop)


def _optuna_storage_ok(settings: SweepSettings) -> None:
    """Open the storage before anything trains: the URL parses, its driver is installed, the server answers or the
    file's folder exists; an in-memory database (which trial processes cannot share) is refused."""
    url = settings.storage
    if not url:
        return
    if "://" not in url:
        raise SiftcliError(f"--storage {url!r}: expected an Optuna storage URL such as sqlite:///sweep.db "
                           "(leave it out for a journal file in the sweep folder)")
    try:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
    except Exception as exc:
        raise SiftcliError(f"--storage {url!r}: not a database URL ({str(exc).splitlines()[0][:120]})") from None
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:"):
            raise SiftcliError(f"--storage {url!r}: an in-memory database lives in one process and the trials run in "
                               "others; use a file, sqlite:///sweep.db")
        folder = Path(parsed.database).expanduser().resolve().parent
        if not folder.is_dir():
            raise SiftcliError(f"--storage {url!r}: folder {folder} does not exist")
    optuna = _optuna()
    try:
        optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True})
    except ImportError as exc:
        raise SiftcliError(f"--storage {url!r}: the database driver is not installed ({exc}); e.g. "
                           "pip install psycopg2-binary for postgresql://, pymysql for mysql+pymysql://") from None
    except Exception as exc:  # OperationalError and friends: no server, wrong password, no such database
        first = (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:200]
        raise SiftcliError(f"--storage {url!r}: cannot open it ({exc.__class__.__name__}: {first})") from None


def run_frontier(recipe: Recipe, settings: SweepSettings, sweep_dir: Path, workload: Any, initial: Any,
                 emit: Any) -> dict[str, Any]:
    """The full baseline, then baselines capped at fractions of its steps (fully decayed); each run once and kept."""

    import hashlib

    from siftcli.arms import SeedContext, run_one
    from siftcli.builders import build_workload
    from siftcli.config import recipe_to_yaml

    path = sweep_dir / "frontier.json"
    key = hashlib.sha256(recipe_to_yaml(recipe).encode()).hexdigest()
    done = read_json(path) if path.exists() else {"points": [], "recipe_sha256": key}
    if done.get("recipe_sha256") != key:  # a frontier is of one recipe: another's would price every trial wrong
        raise SiftcliError(f"{path}: this frontier was trained for another recipe; use a new -o folder for this one")
    have = {p["fraction"] for p in done["points"]}
    fractions = sorted(set(settings.frontier) | {1.0}, reverse=True)  # the full run first: it sets the steps
    for fraction in fractions:
        if fraction in have:
            continue
        if workload is None:
            workload = build_workload(recipe)
            initial = copy.deepcopy(workload.model.state_dict())
        full = next((p for p in done["points"] if p["fraction"] == 1.0), None)
        ctx = SeedContext(recipe.model_copy(update={"sift": recipe.sift.model_copy(update={"enabled": False})}), workload, initial)
        ctx.runs["baseline"] = full or {}
        arm = "baseline" if fraction == 1.0 else f"train-less:fraction={fraction:g}"
        m = run_one(ctx, arm, sweep_dir / f"baseline-{fraction:g}", emit)
        done["points"].append({"fraction": fraction, "train_seconds": m["train_seconds"], "optimizer_steps": m["optimizer_steps"],
                               "final": m["final"], "metric": m["metric"], "higher_is_better": m["higher_is_better"],
                               "raw_samples": m["raw_samples"], "curve": m["curve"]})
        done["max_resource"] = math.ceil(next(p for p in done["points"] if p["fraction"] == 1.0)["raw_samples"] / recipe.batch_size)
        atomic_write_json(path, done)
    done["points"].sort(key=lambda p: p["fraction"])
    return done


def _requeue_interrupted(study: Any, optuna: Any) -> None:
    """Trials left running by a killed sweep: failed (marked interrupted) and queued again with the same parameters."""
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        _live_trial(study, t.number, optuna).set_user_attr("interrupted", True)
        study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        study.enqueue_trial(t.params, skip_if_exists=False)


def _live_trial(study: Any, number: int, optuna: Any) -> Any:
    """The one place the sweep reaches past Optuna's public API: a live :class:`optuna.trial.Trial` for a trial number
    (the parent created the trial with ``ask``; its process reports to it and asks whether to prune). Optuna has no
    public lookup from number to a live trial; ``Trial(study, trial_id)`` is how its own ``ask`` builds one."""
    frozen = study.get_trials(deepcopy=False)[number]
    return optuna.trial.Trial(study, frozen._trial_id)


def _counted(study: Any, optuna: Any) -> int:
    finished = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    return sum(1 for t in study.get_trials(deepcopy=False, states=finished) if not t.user_attrs.get("interrupted"))


def _run_trials(study: Any, settings: SweepSettings, sweep_dir: Path, frontier: dict[str, Any], jobs: int, emit: Any,
                optuna: Any) -> None:
    distributions = _distributions(settings.space)
    full_seconds = next(p for p in frontier["points"] if p["fraction"] == 1.0)["train_seconds"]
    running: dict[int, tuple[Any, subprocess.Popen | None, float]] = {}
    slots = max(1, jobs)
    gpus = _gpu_count()
    try:
        while True:
            while len(running) < slots and _counted(study, optuna) + len(running) < settings.trials:
                trial = study.ask(distributions)
                emit("trial", {"number": trial.number, "params": trial.params})
                if jobs == 0:
                    running[trial.number] = (trial, None, time.perf_counter())
                    break
                env = dict(os.environ)
                if gpus > 1:
                    env["CUDA_VISIBLE_DEVICES"] = str(len(running) % gpus)
                folder = sweep_dir / f"trial-{trial.number}"
                folder.mkdir(parents=True, exist_ok=True)
                with open(folder / "stderr.txt", "wb") as err:
                    proc = subprocess.Popen([*TRIAL_COMMAND, str(sweep_dir), str(trial.number)], env=env,
                                            stdout=subprocess.DEVNULL, stderr=err)
                running[trial.number] = (trial, proc, time.perf_counter())
            if not running:
                return
            for number, (trial, proc, t0) in list(running.items()):
                if proc is None:  # in this process
                    try:
                        result = run_trial(sweep_dir, number)
                        code = 0
                    except Exception as exc:  # a failed trial is recorded, the sweep goes on
                        result, code = {"error": f"{type(exc).__name__}: {exc}"}, 1
                elif proc.poll() is None:
                    continue
                else:
                    code, result = proc.returncode, None
                del running[number]
                _tell(study, trial, sweep_dir, code, result, time.perf_counter() - t0, full_seconds, settings, optuna)
                emit("trial_end", {"number": number, "state": study.get_trials(deepcopy=False)[number].state.name})
            if running:
                time.sleep(0.2)  # poll the trial processes
    except BaseException:
        for _, proc, _ in running.values():
            if proc is not None and proc.poll() is None:
                proc.terminate()  # SIGTERM: the trial finishes its step and keeps what it did
        for _, proc, _ in running.values():
            if proc is not None:
                proc.wait()
        raise


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


def _tell(study: Any, trial: Any, sweep_dir: Path, code: int, result: dict[str, Any] | None, seconds: float,
          full_seconds: float, settings: SweepSettings, optuna: Any) -> None:
    path = sweep_dir / f"trial-{trial.number}" / "trial.json"
    if result is None and code == 0 and path.exists():
        result = read_json(path)
    trial.set_user_attr("process_seconds", seconds)
    if code != 0 or not result or "state" not in result:
        err = sweep_dir / f"trial-{trial.number}" / "stderr.txt"
        tail = err.read_text(errors="replace").strip().splitlines()[-3:] if err.exists() else []
        reason = (result or {}).get("error") or (" | ".join(tail) if tail else f"exit code {code}")
        trial.set_user_attr("error", reason[-500:])
        if code in (130, 143):
            trial.set_user_attr("interrupted", True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return
    value = (result["final"] or {}).get(result["metric"])
    trial.set_user_attr("train_seconds", result["train_seconds"])
    trial.set_user_attr("time_ratio", result["train_seconds"] / full_seconds if full_seconds else None)
    if result["state"] == "pruned":
        trial.set_user_attr("pruned_at_raw_batch", result["pruned_at_raw_batch"])
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
    elif value is None or not math.isfinite(value):
        trial.set_user_attr("error", "no final metric")
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(trial, [value, result["train_seconds"]] if settings.mode == "pareto" else value)


# -- the answer -----------------------------------------------------------------------------------------
def summarise_sweep(study: Any, settings: SweepSettings, sweep_dir: Path, frontier: dict[str, Any], seconds: float,
                    optuna: Any) -> dict[str, Any]:
    """Rows for every trial, the non-dominated ones, the frontier and the cheapest point reaching the target."""
    from siftcli.config import load_recipe

    recipe = load_recipe(sweep_dir / "recipe.yaml")
    full = next(p for p in frontier["points"] if p["fraction"] == 1.0)
    target = target_for(full, recipe.eval.target_drop)
    higher = full["higher_is_better"]
    rows = []
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("interrupted") and t.state != optuna.trial.TrialState.COMPLETE:
            continue
        path = sweep_dir / f"trial-{t.number}" / "trial.json"
        detail = read_json(path) if path.exists() else {}
        run = {"metric": full["metric"], "higher_is_better": higher, "curve": detail.get("curve", [])}
        rows.append({"number": t.number, "state": t.state.name.lower(), "params": t.params,
                     "value": (detail.get("final") or {}).get(full["metric"]), "train_seconds": t.user_attrs.get("train_seconds"),
                     "time_ratio": t.user_attrs.get("time_ratio"), "time_to_target": time_to_target(run, target),
                     "pruned_at_raw_batch": t.user_attrs.get("pruned_at_raw_batch"), "error": t.user_attrs.get("error"),
                     "process_seconds": t.user_attrs.get("process_seconds"), "kept": detail.get("kept")})
    complete = [r for r in rows if r["state"] == "complete"]
    front = non_dominated(complete, higher)
    points = [{"kind": "baseline", "fraction": p["fraction"], "value": (p["final"] or {}).get(p["metric"]),
               "train_seconds": p["train_seconds"]} for p in frontier["points"]]
    feasible = [r for r in complete if settings.max_time_ratio is None or (r["time_ratio"] or 0) <= settings.max_time_ratio]
    candidates = [{"kind": "trial", **r} for r in feasible] + points
    reached = [c for c in candidates if c["value"] is not None and target is not None
               and (c["value"] >= target - 1e-12 if higher else c["value"] <= target + 1e-12)]
    best = min(reached, key=lambda c: c["train_seconds"]) if reached else None
    return {"status": "completed", "mode": settings.mode, "space": settings.space, "grid": settings.grid,
            "metric": full["metric"], "higher_is_better": higher, "target": target, "target_drop": recipe.eval.target_drop,
            "trials": rows, "front": [r["number"] for r in front], "frontier": points, "recommendation": _advice(best, full),
            "counts": {s: sum(1 for r in rows if r["state"] == s) for s in ("complete", "pruned", "fail")},
            "trial_process_seconds": sum(r["process_seconds"] or 0 for r in rows), "sweep_seconds": seconds,
            "storage": settings.storage or str(sweep_dir / "optuna.journal"), "study": settings.study}


def non_dominated(rows: list[dict[str, Any]], higher: bool) -> list[dict[str, Any]]:
    """Rows no other row beats on both the metric and the wall-clock."""
    def better_or_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
        good = a["value"] >= b["value"] if higher else a["value"] <= b["value"]
        return good and a["train_seconds"] <= b["train_seconds"]

    return [r for r in rows if not any(o is not r and better_or_equal(o, r) and
                                       (o["value"] != r["value"] or o["train_seconds"] != r["train_seconds"]) for o in rows)]


def _advice(best: dict[str, Any] | None, full: dict[str, Any]) -> dict[str, Any]:
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


if __name__ == "__main__":
    raise SystemExit(main())
