"""Options in, one checked :class:`SweepSettings` out: the sweep's values, checked where they are made (so a Python
caller of ``run_sweep`` gets the same one-line errors as the CLI), and which options a resume may not change."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from siftcli.analysis.sweep import Params
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import Recipe
from siftcli.studies import STALE_SECONDS
from siftcli.sweep.space import BETA_RANGE, ParamSpec, parse_space
from siftcli.sweep.study import SHARED

#: Fractions of the full baseline's steps that the baseline frontier trains (train-less arms).
FRONTIER = (0.25, 0.5, 0.75, 1.0)
MODES = ("budget", "pareto")


def flag(option: str) -> str:
    """The command-line flag of an option (``max_time_ratio`` is ``--max-time-ratio``; ``set_`` is ``--set``)."""
    return "--" + option.rstrip("_").replace("_", "-")


@dataclass
class SweepSettings:
    """Everything a sweep needs to continue after a kill: saved as ``sweep_settings.json``. Checked on creation."""

    mode: str = "budget"  # budget: one objective, Hyperband; pareto: (metric, wall-clock), no pruning
    trials: int = 12
    space: dict[str, ParamSpec] = field(default_factory=dict)
    grid: bool = False
    frontier: list[float] = field(default_factory=lambda: list(FRONTIER))
    max_time_ratio: float | None = None  # budget: trials slower than this share of the full baseline are infeasible
    prune: bool = True
    storage: str = ""  # Optuna storage URL; empty: a journal file in the sweep folder
    study: str = "siftcli-sweep"
    seed: int = 0
    enqueue: list[Params] = field(default_factory=list)  # parameter sets to try first (replays)
    fresh_processes: bool = False  # one process per trial (cold start each time): the benchmark's opponent
    stale_seconds: float = STALE_SECONDS  # another machine's trial silent this long is failed and queued again

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SiftcliError(f"{flag('mode')} {self.mode!r}: expected {' or '.join(MODES)}")
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise SiftcliError(f"{flag('trials')} {self.trials!r}: expected a whole number of trials, at least 1")
        if not self.frontier or any(isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1 for f in self.frontier):
            raise SiftcliError(f"{flag('frontier')} {self.frontier!r}: expected fractions in (0, 1] such as 0.25,0.5,0.75,1")
        if self.max_time_ratio is not None and not self.max_time_ratio > 0:
            raise SiftcliError(f"{flag('max_time_ratio')} must be positive, got {self.max_time_ratio}")
        if not self.stale_seconds > 0:
            raise SiftcliError(f"{flag('stale_seconds')} must be positive, got {self.stale_seconds}")
        if not self.study.strip() or ":" in self.study:
            raise SiftcliError(f"{flag('study')} {self.study!r}: expected a name without ':' (siftcli keeps NAME:frontier:N beside it)")

    @classmethod
    def from_options(cls, recipe: Recipe, *, betas: str | None = None, beta_range: str | None = None,
                     params: list[str] | None = None, frontier: str | list[float] | None = None, **options: Any) -> SweepSettings:
        """Settings from command-line style options (``None``: the default): the search space from ``betas`` (a grid),
        ``beta_range`` and ``params`` (validated against the recipe), the frontier from a comma list, and any field of
        this type by name (``trials=24``, ``prune=False``...). The study is named after the recipe unless given."""
        unknown = sorted(set(options) - {f.name for f in dataclasses.fields(cls)} - {"space", "grid"})
        if unknown:
            raise TypeError(f"SweepSettings.from_options: unknown option(s) {', '.join(unknown)}")
        space, grid = parse_space(recipe, betas=betas, beta_range=beta_range or BETA_RANGE, params=params)
        given = {k: v for k, v in options.items() if v is not None}
        if isinstance(frontier, str):
            given["frontier"] = sorted(set(_fractions(frontier)))
        elif frontier is not None:
            given["frontier"] = sorted(set(frontier))
        given.setdefault("study", f"{recipe.name}-sweep")
        return cls(space=space, grid=grid, **given)

    def shared(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in SHARED}


def resume_conflicts(**options: Any) -> list[str]:
    """The flags among ``options`` that were given (not ``None``, not ``False``): a resume runs with the saved settings,
    so each of them would be ignored."""
    return [flag(name) for name, value in options.items() if value is not None and value is not False]


def _fractions(text: str) -> list[float]:
    try:
        values = [float(f) for f in text.split(",") if f.strip()]
    except ValueError:
        values = []
    if not values or any(not 0 < v <= 1 for v in values):
        raise SiftcliError(f"{flag('frontier')} {text!r}: expected fractions in (0, 1] such as 0.25,0.5,0.75,1")
    return values
