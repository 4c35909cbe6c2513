"""The ``siftcli`` command: a thin shell over :mod:`siftcli.commands`.

Heavy libraries (torch, transformers, datasets) are imported inside command bodies so
``siftcli --help`` stays instant.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

app = typer.Typer(
    name="siftcli",
    help="Train on the data that matters: online loss-based sifting for PyTorch fine-tunes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)

RecipeArg = Annotated[Optional[str], typer.Argument(help="Recipe YAML (default: the embedded offline recipe).")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="Override a recipe field: key.sub=value (repeatable).")]
OutputOpt = Annotated[Optional[str], typer.Option("--output", "-o", help="Run folder (default runs/<name>-<timestamp>/).")]
ReportToOpt = Annotated[Optional[str], typer.Option(
    "--report-to", help="Also log to experiment trackers: tensorboard, mlflow, wandb, trackio (comma-separated; all; "
                        "none). Overrides the recipe's report_to.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
TrustDataOpt = Annotated[bool, typer.Option("--trust-data", help="With --resume: continue although a data file changed "
                                                               "since the run started (your word that it does not matter).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout (the files' content), nothing else; "
                                                      "errors as a JSON object, exit code 2.")]
#: Set by a command given ``--json``: errors then print as a JSON object on stdout.
_OUTPUT = {"json": False}


def _emit_json(doc: Any) -> None:
    """Strict JSON (NaN and infinities become null, as in the files siftcli writes)."""
    import json

    from siftcli.runio import json_safe

    sys.stdout.write(json.dumps(json_safe(doc), default=str) + "\n")
    sys.stdout.flush()


def _say_error(message: str, code: int) -> None:
    """One line on stderr, or with ``--json`` one JSON object on stdout."""
    if _OUTPUT["json"]:
        _emit_json({"error": message, "exit_code": code})
    else:
        err_console.print(f"siftcli: error: {message}", markup=False, highlight=False, soft_wrap=True)


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one line on stderr and exit code 2; Ctrl-C says where the partial run is."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from siftcli import parallel
        from siftcli.errors import RunFault, RunInterrupted, SiftcliError

        _OUTPUT["json"] = bool(kwargs.get("json_"))
        parallel.on_wait = lambda line: err_console.print(f"siftcli: {line}", markup=False, highlight=False, soft_wrap=True)

        try:
            return fn(*args, **kwargs)
        except SiftcliError as exc:
            # under torchrun: rank 0 prints; another rank only an error of its own (never one every rank raised)
            if parallel.is_main() or (parallel.active() and not exc.main_only) or exc.own:
                who = "" if parallel.is_main() else f"[rank {parallel.rank()}] "
                _say_error(f"{who}{exc}", 2)
            raise typer.Exit(2) from None
        except RunFault as exc:
            if parallel.is_main():
                import shlex

                given = kwargs.get("recipe")
                _say_error(str(exc).replace(" <recipe>", f" {shlex.quote(given)}" if given else ""), exc.exit_code)
            raise typer.Exit(exc.exit_code) from None
        except RunInterrupted as exc:
            if not parallel.is_main():
                raise typer.Exit(exc.exit_code) from None
            command = None
            if exc.resumable:
                import shlex

                given = kwargs.get("recipe")  # the command a user can paste: the recipe they gave, or none (the default)
                command = exc.resume_command.replace(" <recipe>", f" {shlex.quote(given)}" if given else "")
                if " --resume " in command and command.startswith("siftcli train"):  # and what changed the recipe
                    command += _resume_options(kwargs)
                msg = (f"siftcli: interrupted ({exc.signal}); partial results kept in {exc.run_dir} (status 'interrupted'); "
                       f"continue with: {command}")
            elif exc.advice:
                msg = f"siftcli: interrupted ({exc.signal}); partial results kept in {exc.run_dir}; {exc.advice}"
            else:
                msg = f"siftcli: interrupted ({exc.signal}); partial results kept in {exc.run_dir}"
            if _OUTPUT["json"]:  # a script reading stdout learns what a person reads on stderr
                _emit_json({"status": "interrupted", "signal": exc.signal, "run_dir": str(exc.run_dir),
                            "resume": command if exc.resumable else None, "message": msg.removeprefix("siftcli: "),
                            "exit_code": exc.exit_code})
            err_console.print(msg, markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("siftcli: interrupted outside training (loading or writing); finished files are complete")
            raise typer.Exit(130) from None
        except OSError as exc:  # a full disk or a vanished folder while writing: files are written atomically
            where = f" ({exc.filename})" if exc.filename else ""
            _say_error(f"{exc.strerror or exc}{where}; files already written are complete, the one being written was not", 1)
            raise typer.Exit(1) from None
        finally:
            if "torch" in sys.modules:  # leave a process group cleanly (torchrun); never import torch for it
                parallel.shutdown()

    return wrapper


class _Progress:
    """Turns training events into a rich progress bar (epoch, step, loss, kept %)."""

    def __init__(self, enabled: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.enabled = enabled and sys.stderr.isatty() or enabled == "force"
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=err_console, transient=False, disable=not self.enabled,
        )
        self.task: Any = None
        self.arm = ""

    def __enter__(self) -> _Progress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.progress.__exit__(*exc)

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "warning":  # text, not markup: a message may hold brackets (siftcli[wandb])
            err_console.print(data["message"], style="yellow", markup=False, highlight=False, soft_wrap=True)
        elif kind == "arm":
            self.arm = f"{data['arm']} (seed {data['seed']})"
        elif kind == "start":
            total = data["max_steps"] or max(1, data["steps_per_epoch"] * data["epochs"])
            self.task = self.progress.add_task(self.arm or data["arm"], total=total, completed=data["step"], info="")
        elif kind in ("step", "tick") and self.task is not None:
            kept = data["trained_samples"] / max(1, data["raw_samples"])
            self.progress.update(self.task, completed=data["step"], info=f"loss {data['loss']:.3f} kept {100 * kept:.0f}%")
        elif kind == "eval" and self.task is not None:
            from siftcli.tasks import METRICS

            metric = next((k for k in METRICS if k in data), "loss")
            self.progress.update(self.task, info=f"epoch {data['epoch'] + 1} {metric} {data[metric]:.4f}")
        elif kind == "end" and self.task is not None:
            self.progress.update(self.task, total=data["optimizer_steps"], completed=data["optimizer_steps"])
        elif kind == "trial":
            params = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in data["params"].items())
            err_console.print(f"trial {data['number']}: {params}", highlight=False)
        elif kind == "trial_end":
            err_console.print(f"trial {data['number']}: {data['state'].lower()}", highlight=False)
        elif kind == "waiting":
            err_console.print(data["text"], highlight=False)


def _main() -> bool:
    """Whether this process prints: always, except on ranks other than 0 under torchrun."""
    from siftcli import parallel

    return parallel.is_main()


def _events(progress: _Progress) -> Any:
    """The progress bar on the printing process; nothing on the other ranks."""
    return progress if _main() else None


def _load(recipe: str | None, overrides: list[str] | None, report_to: str | None = None) -> Any:
    from siftcli.recipe.reader import load_recipe

    return load_recipe(recipe, [*(overrides or []), *([f"report_to={report_to}"] if report_to is not None else [])])


def _resume_options(kwargs: dict[str, Any]) -> str:
    """The options of an interrupted ``train`` a resume must be given again: every ``--set`` and ``--report-to`` (the
    resume holds the recipe they made against the saved one) and ``--no-sift``."""
    import shlex

    extra = [f" --set {shlex.quote(s)}" for s in kwargs.get("set_") or []]
    if kwargs.get("report_to"):
        extra.append(f" --report-to {shlex.quote(kwargs['report_to'])}")
    if kwargs.get("no_sift"):
        extra.append(" --no-sift")
    return "".join(extra)


def _trust_needs_resume(trust_data: bool, resume: str | None) -> None:
    if trust_data and not resume:
        from siftcli.errors import SiftcliError

        raise SiftcliError("--trust-data goes with --resume (it lets a resume continue on a data file that changed); "
                           "a new run reads its data as it is")


@app.command()
@_friendly
def train(
    recipe: Annotated[str, typer.Argument(help="Recipe YAML.")],
    set_: SetOpt = None,
    output: OutputOpt = None,
    no_sift: Annotated[bool, typer.Option("--no-sift", help="Train the baseline even if the recipe sifts.")] = False,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Continue an interrupted run folder.")] = None,
    trust_data: TrustDataOpt = False,
    report_to: ReportToOpt = None,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """One fine-tune, sifted when the recipe's sift.enabled is true."""
    from siftcli.commands import run_train
    from siftcli.report.tables import run_table

    _trust_needs_resume(trust_data, resume)
    if resume and output:
        from siftcli.errors import SiftcliError

        raise SiftcliError(f"--resume {resume} continues that folder; -o {output} names another: give one of them")
    cfg = _load(recipe, set_, report_to)  # with --resume, checked against the run folder's saved recipe
    with _Progress(not quiet and not json_) as progress:
        run_dir, metrics = run_train(cfg, output=output, sift=False if no_sift else None, on_event=_events(progress),
                                     resume=resume, trust_data=trust_data)
    if not _main():
        return
    if json_:
        _emit_json({"run_dir": str(run_dir), "metrics": metrics})
        return
    console.print(run_table(metrics, str(run_dir)))
    if (run_dir / "model").is_dir():
        console.print(f"[dim]model (save_pretrained; usable as model.source): {run_dir / 'model'}[/dim]")
    for plot in sorted(run_dir.glob("*.png")):
        console.print(f"[dim]plot: {plot}[/dim]")


@app.command()
@_friendly
def compare(
    targets: Annotated[Optional[list[str]], typer.Argument(help="A recipe (default: embedded), or two finished run folders.")] = None,
    set_: SetOpt = None,
    output: OutputOpt = None,
    seeds: Annotated[int, typer.Option("--seeds", help="Repeat every arm over this many seeds (each its own initial weights); "
                                                  "5 or more for a claim.")] = 1,
    arm: Annotated[Optional[list[str]], typer.Option(
        "--arm", help="Arms to run (repeatable): baseline, sifted, equal-time, random-keep, static-filter, target-only, or "
                      "sifted:key=value,... (default: the honest opponents; see docs/measuring.md).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Baseline and sifted only: no opponents, no verdict on them.")] = False,
    json_: JsonOpt = False,
    equal_time: Annotated[bool, typer.Option("--equal-time", help="Alias of --arm equal-time.")] = False,
    random_keep: Annotated[bool, typer.Option("--random-keep", help="Alias of --arm random-keep.")] = False,
    report_to: ReportToOpt = None,
    quiet: QuietOpt = False,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Continue an interrupted comparison folder (its "
                                                  "finished arms are kept).")] = None,
    trust_data: TrustDataOpt = False,
) -> None:
    """The sifted run against the honest opponents (a baseline given the same time, the same fraction kept at random,
    a static filter where a reference ranks), then what sifting bought and what to do instead."""
    from siftcli.analysis.compare import compare_run_dirs
    from siftcli.commands import run_compare
    from siftcli.errors import SiftcliError
    from siftcli.report.tables import compare_view

    targets = targets or []
    _trust_needs_resume(trust_data, resume)
    if resume:
        given = [f"--{name}" for name, value in (("set", set_), ("output", output), ("arm", arm), ("report-to", report_to))
                 if value] + [flag for flag, on in (("--quick", quick), ("--equal-time", equal_time),
                                                    ("--random-keep", random_keep), ("--seeds", seeds != 1)) if on]
        if targets or given:
            raise SiftcliError("--resume continues the comparison with its saved recipe, arms and seeds; "
                               f"{', '.join(([targets[0]] if targets else []) + given)} would be ignored: leave "
                               "them out, or start a new comparison")
        with _Progress(not quiet and not json_) as progress:
            run_dir, result = run_compare(None, resume=resume, trust_data=trust_data, on_event=_events(progress))
        if _main():
            _emit_json({"run_dir": str(run_dir), **result}) if json_ else console.print(compare_view(result, str(run_dir)))
        return
    if len(targets) == 2:
        from pathlib import Path

        recipes = [t for t in targets if Path(t).suffix.lower() in (".yaml", ".yml") and Path(t).is_file()]
        if recipes:
            other = next(t for t in targets if t != recipes[0])
            raise SiftcliError(f"compare takes one recipe or two finished run folders; {recipes[0]} is a recipe, so "
                               f"{other} would be ignored: siftcli compare {recipes[0]} (the arms are trained), or "
                               "siftcli compare RUN_A RUN_B (two runs compared)")
        result = compare_run_dirs(targets[0], targets[1])
        _emit_json(result) if json_ else console.print(compare_view(result))
        return
    if len(targets) > 2:
        raise SiftcliError(f"compare takes a recipe or two run folders, got {len(targets)} arguments: siftcli compare "
                           "r.yaml, or siftcli compare RUN_A RUN_B")
    cfg = _load(targets[0] if targets else None, set_, report_to)
    arms = list(arm or []) + (["equal-time"] if equal_time else []) + (["random-keep"] if random_keep else [])
    if arms and quick:
        raise SiftcliError("--quick runs baseline and sifted only; give it or --arm, not both")
    if arms:  # run_compare refuses an unknown or unrunnable arm in one line, before anything trains
        from siftcli.arms.table import subject_of

        subject = subject_of(arms)
        arms = ["baseline", subject, *[a for a in arms if a not in ("baseline", subject)]]
    with _Progress(not quiet and not json_) as progress:
        run_dir, result = run_compare(cfg, output=output, seeds=seeds, arms=arms or None, quick=quick,
                                      on_event=_events(progress))
    if _main():
        _emit_json({"run_dir": str(run_dir), **result}) if json_ else console.print(compare_view(result, str(run_dir)))


#: What ``sweep-beta --resume`` may be given beside it; any other option would be ignored, and is refused.
RESUME_ACCEPTS = ("recipe", "resume", "jobs", "quiet", "json_", "trust_data")


@app.command("sweep-beta")
@_friendly
def sweep_beta(
    recipe: Annotated[Optional[str], typer.Argument(help="Recipe YAML (not with --resume).")] = None,
    trials: Annotated[Optional[int], typer.Option("--trials", help="Trials to run, 12 unless given (a --betas grid runs each "
                                                  "value once).")] = None,
    mode: Annotated[Optional[str], typer.Option("--mode", help="budget (the default): final metric, Hyperband pruning; pareto: "
                                                "metric and wall-clock.")] = None,
    betas: Annotated[Optional[str], typer.Option("--betas", help="A plain grid of betas, e.g. 0.5,1,2 (instead of searching).")] = None,
    beta_range: Annotated[Optional[str], typer.Option("--beta-range", help="Searched beta range, log scale (0.25:8).")] = None,
    param: Annotated[Optional[list[str]], typer.Option(
        "--param", help="Also search a sift key: key=LOW:HIGH[:log] or key=a,b (repeatable).")] = None,
    frontier: Annotated[Optional[str], typer.Option("--frontier", help="Baseline frontier: fractions of the full schedule "
                                                    "(0.25,0.5,0.75,1).")] = None,
    max_time_ratio: Annotated[Optional[float], typer.Option(
        "--max-time-ratio", help="budget: trials slower than this share of the baseline are infeasible.")] = None,
    no_prune: Annotated[bool, typer.Option("--no-prune", help="budget: run every trial to the end.")] = False,
    jobs: Annotated[int, typer.Option("--jobs", help="Warm worker processes training trials at a time (one GPU each "
                                      "when there are several); 0 trains them in this process.")] = 1,
    storage: Annotated[Optional[str], typer.Option(
        "--storage", help="Optuna storage URL (default: a journal file in the sweep folder); postgresql://... shared by "
        "several machines, each running this command with the same --study.")] = None,
    study: Annotated[Optional[str], typer.Option("--study", help="Study name in --storage (default: RECIPE-NAME-sweep).")] = None,
    fresh_processes: Annotated[bool, typer.Option(
        "--fresh-processes", help="A new process per trial instead of warm workers (slower; for comparisons).")] = False,
    stale_seconds: Annotated[Optional[float], typer.Option(
        "--stale-seconds", help="Another machine's trial silent this long (120 s) is failed and queued again.")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Continue a killed sweep folder.")] = None,
    trust_data: TrustDataOpt = False,
    set_: SetOpt = None,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Tune beta (and more) on Optuna against the baseline frontier; the answer is the cheapest point reaching the target."""
    given_options = {k: v for k, v in locals().items() if k not in RESUME_ACCEPTS}
    from siftcli.errors import SiftcliError
    from siftcli.report.tables import sweep_view
    from siftcli.sweep.run import run_sweep
    from siftcli.sweep.settings import SweepSettings, resume_conflicts

    options = {"trials": trials, "mode": mode, "betas": betas, "beta_range": beta_range, "params": param, "frontier": frontier,
               "max_time_ratio": max_time_ratio, "prune": False if no_prune else None, "storage": storage, "study": study,
               "fresh_processes": fresh_processes or None, "stale_seconds": stale_seconds}
    _trust_needs_resume(trust_data, resume)
    if resume:
        if recipe is not None:
            raise SiftcliError("--resume continues the sweep with its saved recipe and settings; give no RECIPE")
        given = resume_conflicts(**given_options)
        if given:
            raise SiftcliError(f"--resume continues the sweep with its saved settings; {', '.join(given)} would be ignored: "
                               "leave them out, or start a new sweep")
        cfg, settings = None, None
    else:
        cfg = _load(recipe, set_)
        settings = SweepSettings.from_options(cfg, **options)
    with _Progress(not quiet and not json_) as progress:
        run_dir, result = run_sweep(cfg, settings, output=output, resume=resume, jobs=jobs, on_event=None if json_ else progress,
                                    trust_data=trust_data)
    _emit_json({"run_dir": str(run_dir), **result}) if json_ else console.print(sweep_view(result, str(run_dir)))


@app.command("plan")
@_friendly
def plan(
    recipe: Annotated[Optional[str], typer.Argument(help="Recipe YAML (not with --resume).")] = None,
    budget: Annotated[Optional[float], typer.Option("--budget", help="What the search may spend deciding, in full "
                                                    "baseline runs (default 2).")] = None,
    tolerance: Annotated[Optional[float], typer.Option("--tolerance", help="Metric points a strategy may lose to the full "
                                                       "baseline and still count (default 1).")] = None,
    seeds: Annotated[Optional[int], typer.Option("--seeds", help="The most paired seeds confirming the pick (default 5; "
                                                 "it stops sooner when the interval knows). With --resume: extend an "
                                                 "inconclusive confirmation to this many.")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Continue an interrupted plan folder.")] = None,
    trust_data: TrustDataOpt = False,
    workers: Annotated[Optional[int], typer.Option("--workers", help="Processes on this machine taking the plan's jobs "
                                                   "(each trains on its share of the cores; default 1).")] = None,
    storage: Annotated[Optional[str], typer.Option("--storage", help="Optuna storage URL shared by several machines "
                                                   "(postgresql://..., sqlite:///plan.db); default: a journal file in the "
                                                   "plan folder.")] = None,
    study: Annotated[Optional[str], typer.Option("--study", help="The study's name in --storage: the same on every "
                                                 "machine of one plan.")] = None,
    set_: SetOpt = None,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
    json_: JsonOpt = False,
) -> None:
    """Find which strategy pays on this data within a budget, confirm it over paired seeds, and write its recipe.

    Screens every strategy that applies (training less, static filters by cheap references, near-duplicate removal,
    online sifting, the target group alone, the teacher cache) at a small share of its schedule on a validation half of
    the evaluation data; promotes the best by their gap to the baseline; confirms the pick on the other half against the
    full baseline, a seed at a time until the interval knows; writes plan.json and plan.yaml.
    """
    import dataclasses

    from siftcli.errors import SiftcliError
    from siftcli.plan.run import PlanSettings, run_plan
    from siftcli.plan.view import plan_view

    _trust_needs_resume(trust_data, resume)
    if resume and recipe is not None:
        raise SiftcliError("--resume continues the plan with its saved recipe and settings; give no RECIPE")
    given = [f"--{name}" for name, value in (("budget", budget), ("tolerance", tolerance), ("workers", workers),
                                             ("storage", storage), ("study", study), ("set", set_),
                                             ("output", output)) if value is not None and value != []]
    if resume and given:
        raise SiftcliError(f"--resume continues the plan with its saved settings; {', '.join(given)} would be ignored: "
                           "leave them out, or start a new plan")
    settings = PlanSettings(**{name: value for name, value in (("budget", budget), ("tolerance", tolerance), ("seeds", seeds),
                                                               ("workers", workers), ("storage", storage), ("study", study))
                               if value is not None})
    cfg = None if resume else _load(recipe, set_)
    with _Progress(not quiet and not json_) as progress:
        def events(kind: str, data: dict[str, Any]) -> None:
            if kind == "plan" and not quiet and not json_:
                left = data.get("left")
                where = f"rung {data['fidelity']:.2f}" if "fidelity" in data else \
                    f"seed {data['seed']}" if "seed" in data else "another process is training"
                budget = "" if left is None else f", {left:.0f} s left in the search's budget" if left >= 0 else \
                    f", the search's budget spent, {-left:.0f} s over"
                err_console.print(f"plan: {data['phase']} {data['arm']} ({where}{budget})", highlight=False)
            elif kind != "plan":
                progress(kind, data)

        folder, record = run_plan(cfg, None if resume else settings, output=output, resume=resume,
                                  on_event=None if json_ else events, extend_seeds=seeds if resume else None,
                                  trust_data=trust_data)
    _emit_json({"run_dir": str(folder), **dataclasses.asdict(record)}) if json_ else console.print(plan_view(record, str(folder)))


@app.command("filter")
@_friendly
def filter_(
    recipe: Annotated[str, typer.Argument(help="Recipe YAML (its sift.reference ranks the rows for --keep).")],
    output: Annotated[str, typer.Option("--output", "-o", help="File to write the kept rows to (.csv, .tsv or .jsonl).")],
    keep: Annotated[float | None, typer.Option("--keep", help="Fraction to keep: the lowest reference loss.")] = None,
    dedup: Annotated[bool, typer.Option("--dedup", help="Drop near-copies first (keep the first of each).")] = False,
    similarity: Annotated[Optional[float], typer.Option("--similarity", help="--dedup: Jaccard similarity of token "
                                                        "bigrams that makes a near-copy (1 = exact copies only; default "
                                                        "0.7).")] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Processes (or Dask workers) to use; default: every "
                                                                  "core.")] = None,
    engine: Annotated[str, typer.Option("--engine", help="Where the chunks run: processes (this machine) or dask "
                                                         "(siftcli[dask]; a local cluster of --workers unless "
                                                         "--scheduler).")] = "processes",
    scheduler: Annotated[str | None, typer.Option("--scheduler", help="--engine dask: the address of a running Dask "
                                                                      "scheduler (tcp://host:8786).")] = None,
    stream: Annotated[bool, typer.Option("--stream", help="Read the training source as a stream, twice (a hub dataset "
                                                          "is never downloaded whole); needs data.eval_source or "
                                                          "eval_split.")] = False,
    dedup_by: Annotated[str, typer.Option("--dedup-by", help="--dedup: what makes a near-copy: minhash (shared token "
                                                             "bigrams) or semantic (a sentence encoder's embeddings, "
                                                             "SemDeDup; --similarity is then a cosine, default 0.9).")] = "minhash",
    encoder: Annotated[str, typer.Option("--encoder", help="--dedup-by semantic: the sentence encoder (builtin:minilm, a "
                                                           "model folder or a hub id).")] = "builtin:minilm",
    work_dir: Annotated[str | None, typer.Option("--work-dir", help="Keep the chunk files (tokens, embeddings) in this "
                                                                 "folder: run again, a semantic filter reads back the "
                                                                 "embeddings it made.")] = None,
    report: Annotated[str | None, typer.Option("--report", help="Also write why each row was kept or removed, one row "
                                                                "per input row (.parquet or .jsonl), with a summary "
                                                                "and a histogram PNG beside it.")] = None,
    set_: SetOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Filter once, before training: drop near-copies (--dedup), keep what the reference finds learnable and on
    target (--keep F), or both; point a recipe's data.source at the file written.

    The static opponents of a comparison (dedup, static-filter) as a path of their own, for where they win. Text pools
    ranked by an ngram or naive-bayes reference (or only deduplicated) stream in chunks over every core, or a Dask
    cluster; the rest are built in memory.
    """
    import dataclasses
    import os

    from siftcli.commands import run_filter
    from siftcli.curate.dedup import DEFAULT_SIMILARITY
    from siftcli.curate.engines import Engine
    from siftcli.errors import SiftcliError

    if similarity is not None and not dedup:
        raise SiftcliError(f"--similarity {similarity:g} sets what --dedup calls a near-copy; give --dedup too")
    if dedup_by not in ("minhash", "semantic"):
        raise SiftcliError(f"--dedup-by {dedup_by}: expected minhash or semantic")
    if dedup_by == "semantic" and not dedup:
        raise SiftcliError("--dedup-by semantic: give --dedup too (near-copies by meaning are a kind of --dedup)")
    semantic = dedup_by == "semantic"
    cfg = _load(recipe, set_)
    where = Engine(kind=engine, workers=workers if workers is not None else (os.cpu_count() or 1), scheduler=scheduler)
    if dedup and similarity is None:
        from siftcli.curate.semantic import DEFAULT_COSINE

        similarity = DEFAULT_COSINE if semantic else DEFAULT_SIMILARITY
    result = run_filter(cfg, keep, output, similarity if dedup else None, engine=where, stream=stream, report=report,
                        encoder=encoder if semantic else None, work_dir=work_dir)
    if json_:
        _emit_json(dataclasses.asdict(result))
        return
    groups = "; ".join(f"{g} {100 * v:.0f}%" for g, v in (result.groups or {}).items())
    line = f"kept {result.kept} of {result.of} rows ({100 * result.keep:.1f}%) -> {result.output}"
    if result.dedup_similarity is not None:
        line += f"; near-copies dropped at {'cosine ' if result.dedup_by == 'semantic' else ''}similarity " \
                f"{result.dedup_similarity:g}: {result.of - (result.dedup_kept or 0)}"
        if result.dedup_search is not None and result.dedup_by != "semantic":
            line += f" ({result.dedup_search.checked / max(1, result.of):.2f} pairs a row checked exactly)"
    if result.reference_kind:
        line += f"; ranked by the {result.reference_kind} reference"
    if groups:
        line += f"; groups among kept: {groups}"
    steps = ", ".join(f"{k} {v:.1f}" for k, v in result.phases.items())
    line += f"; {result.seconds:.1f} s ({steps}) on {result.engine}" + \
        (f" x{result.workers}" if result.engine != "in-memory" else "")
    console.print(line)
    if result.summary is not None:
        from siftcli.report.tables import filter_summary_lines

        for text in filter_summary_lines(result.summary):
            console.print(text, markup=False, highlight=False)


@app.command()
@_friendly
def validate(
    recipe: Annotated[str, typer.Argument(help="Recipe YAML.")],
    set_: SetOpt = None,
    offline_only: Annotated[bool, typer.Option("--schema-only", help="Check the schema only; load no data or model.")] = False,
) -> None:
    """Check a recipe without training: schema, then whether its data columns and model resolve."""
    from siftcli.commands import validate_recipe_sources

    cfg = _load(recipe, set_)
    lines = [f"[green]ok[/green] {recipe}: schema valid (task {cfg.task}, model {cfg.model.source}, data {cfg.data.source})"]
    if not offline_only:
        lines += validate_recipe_sources(cfg)  # a problem is one line on stderr, with no half-printed report before it
    for line in lines:
        console.print(line)


def main() -> None:
    """The console script. A reader that closes the pipe early (``siftcli ... | head``) ends the output, not in an
    error: the rest is dropped quietly and the exit code is 0, as for ``cat``. (Rich meets the closed pipe by pointing
    stdout at the null device and exiting with 1; click, by wrapping stdout and exiting with 1: both are taken back.)"""
    import os
    import sys

    def pipe_closed() -> bool:
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":  # click's, or the copy typer vendors
            return True
        try:
            now, null = os.fstat(sys.stdout.fileno()), os.stat(os.devnull)
        except (OSError, ValueError):
            return False
        return (now.st_dev, now.st_ino) == (null.st_dev, null.st_ino)

    was_null = pipe_closed()  # stdout sent to the null device by the user: an exit code 1 stays 1
    try:
        app()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout at exit: let that go nowhere
        sys.exit(0)
    except SystemExit as exc:
        if exc.code == 1 and not was_null and pipe_closed():
            sys.exit(0)
        raise
