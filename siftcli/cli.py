"""The ``siftcli`` command: a thin shell over :mod:`siftcli.runner`.

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
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one line on stderr and exit code 2; Ctrl-C says where the partial run is."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from siftcli.errors import RunInterrupted, SiftcliError

        try:
            return fn(*args, **kwargs)
        except SiftcliError as exc:
            err_console.print(f"siftcli: error: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except RunInterrupted as exc:
            if exc.resumable:
                msg = (f"siftcli: interrupted ({exc.signal}); partial results kept in {exc.run_dir} (metrics.json status 'interrupted'); "
                       f"continue with: siftcli train <recipe> --resume {exc.run_dir}")
            else:
                msg = (f"siftcli: interrupted ({exc.signal}); finished arms kept in {exc.run_dir} (status 'interrupted'); "
                       "run the command again to start over")
            err_console.print(msg, markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("siftcli: interrupted outside training (loading or writing); finished files are complete")
            raise typer.Exit(130) from None
        except OSError as exc:  # a full disk or a vanished folder while writing: files are written atomically
            where = f" ({exc.filename})" if exc.filename else ""
            err_console.print(f"siftcli: error: {exc.strerror or exc}{where}; files already written are complete, "
                              "the one being written was not", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

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
        if kind == "warning":
            err_console.print(f"[yellow]{data['message']}[/yellow]")
        elif kind == "arm":
            self.arm = f"{data['arm']} (seed {data['seed']})"
        elif kind == "start":
            total = data["max_steps"] or max(1, data["steps_per_epoch"] * data["epochs"])
            self.task = self.progress.add_task(self.arm or data["arm"], total=total, completed=data["step"], info="")
        elif kind in ("step", "tick") and self.task is not None:
            kept = data["trained_samples"] / max(1, data["raw_samples"])
            self.progress.update(self.task, completed=data["step"], info=f"loss {data['loss']:.3f} kept {100 * kept:.0f}%")
        elif kind == "eval" and self.task is not None:
            metric = next((k for k in ("accuracy", "mse", "perplexity") if k in data), "loss")
            self.progress.update(self.task, info=f"epoch {data['epoch'] + 1} {metric} {data[metric]:.4f}")
        elif kind == "end" and self.task is not None:
            self.progress.update(self.task, total=data["optimizer_steps"], completed=data["optimizer_steps"])


def _load(recipe: str | None, overrides: list[str] | None) -> Any:
    from siftcli.config import load_recipe

    return load_recipe(recipe, overrides)


@app.command()
@_friendly
def train(
    recipe: Annotated[str, typer.Argument(help="Recipe YAML.")],
    set_: SetOpt = None,
    output: OutputOpt = None,
    no_sift: Annotated[bool, typer.Option("--no-sift", help="Train the baseline even if the recipe sifts.")] = False,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Continue an interrupted run folder.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """One fine-tune, sifted when the recipe's sift.enabled is true."""
    from siftcli.report import run_table
    from siftcli.runner import run_train

    cfg = _load(recipe, set_)  # with --resume, checked against the run folder's saved recipe
    with _Progress(not quiet) as progress:
        run_dir, metrics = run_train(cfg, output=output, sift=False if no_sift else None, on_event=progress, resume=resume)
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
    seeds: Annotated[int, typer.Option("--seeds", help="Repeat both arms over this many seeds.")] = 1,
    equal_time: Annotated[bool, typer.Option("--equal-time", help="Also train a baseline sized to the sifted run's time.")] = False,
    random_keep: Annotated[bool, typer.Option(
        "--random-keep", help="Also train a control that keeps the sifted run's fraction at random (the value of selection).")] = False,
    quiet: QuietOpt = False,
) -> None:
    """Baseline and sifted fine-tunes of one recipe, then what sifting bought against the honest opponents."""
    from siftcli.errors import SiftcliError
    from siftcli.report import compare_view
    from siftcli.runner import compare_run_dirs, run_compare

    targets = targets or []
    if len(targets) == 2:
        console.print(compare_view(compare_run_dirs(targets[0], targets[1])))
        return
    if len(targets) > 2:
        raise SiftcliError(f"compare takes a recipe or two run folders, got {len(targets)} arguments")
    cfg = _load(targets[0] if targets else None, set_)
    with _Progress(not quiet) as progress:
        run_dir, result = run_compare(cfg, output=output, seeds=seeds, equal_time=equal_time, random_keep=random_keep,
                                     on_event=progress)
    console.print(compare_view(result, str(run_dir)))


@app.command("sweep-beta")
@_friendly
def sweep_beta(
    recipe: Annotated[str, typer.Argument(help="Recipe YAML.")],
    betas: Annotated[str, typer.Option("--betas", help="Comma-separated betas.")] = "0.25,0.5,1,2,3",
    set_: SetOpt = None,
    output: OutputOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Baseline once, one sifted run per beta, ranked by accuracy against time."""
    from siftcli.errors import SiftcliError
    from siftcli.report import sweep_view
    from siftcli.runner import run_sweep

    try:
        values = [float(b) for b in betas.split(",") if b.strip()]
    except ValueError:
        raise SiftcliError(f"--betas {betas!r}: expected comma-separated numbers such as 0.5,1,2") from None
    cfg = _load(recipe, set_)
    with _Progress(not quiet) as progress:
        run_dir, result = run_sweep(cfg, values, output=output, on_event=progress)
    console.print(sweep_view(result, str(run_dir)))


@app.command()
@_friendly
def validate(
    recipe: Annotated[str, typer.Argument(help="Recipe YAML.")],
    set_: SetOpt = None,
    offline_only: Annotated[bool, typer.Option("--schema-only", help="Check the schema only; load no data or model.")] = False,
) -> None:
    """Check a recipe without training: schema, then whether its data columns and model resolve."""
    from siftcli.validate import validate_recipe_sources

    cfg = _load(recipe, set_)
    lines = [f"[green]ok[/green] {recipe}: schema valid (task {cfg.task}, model {cfg.model.source}, data {cfg.data.source})"]
    if not offline_only:
        lines += validate_recipe_sources(cfg)  # a problem is one line on stderr, with no half-printed report before it
    for line in lines:
        console.print(line)


def main() -> None:
    app()
