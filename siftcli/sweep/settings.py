"""Flags in, one checked SweepSettings out: the sweep's values and which of them a resume may not change."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from siftcli.sweep import study as studies

#: Fractions of the full baseline's steps that the baseline frontier trains (train-less arms).
FRONTIER = (0.25, 0.5, 0.75, 1.0)


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
    fresh_processes: bool = False  # one process per trial (cold start each time): the benchmark's opponent
    stale_seconds: float = 120.0  # another machine's trial silent this long is failed and queued again

    def shared(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in studies.SHARED}
