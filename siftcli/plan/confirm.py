"""The search's best candidates in, their confirmation on the evaluation split out: paired seeds against the full baseline
and a random subset of the same size.

Each seed is a fresh one (not the search's), with its own initial weights and data order shared by its arms; the rows
measured here were never used to choose. A candidate is confirmed when the 95% interval of its paired difference to the
baseline stays above minus the tolerance.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from siftcli.analysis.stats import diff_points, paired
from siftcli.arms.context import SeedContext
from siftcli.arms.run import folder_name
from siftcli.plan.record import Candidate, Confirmation, Paired
from siftcli.plan.search import cached_run
from siftcli.recipe.schema import Recipe
from siftcli.training.record import RunMetrics, final_value, paid_seconds


def paired_points(values: list[float], opponent: str) -> Paired:
    """Mean, standard error and the 95% Student-t interval of per-seed differences (the comparison's own statistics,
    :func:`~siftcli.analysis.stats.paired`)."""
    p = paired(values)
    return Paired(opponent, p["mean"], p["se"], p["n"], (p["ci95"][0], p["ci95"][1]), values)


def confirm(candidates: list[Candidate], recipe: Recipe, seeds: list[int], folder: Path,
            make_context: Callable[[Recipe], SeedContext], metric: Any, tolerance: float,
            on_event: Callable[[str, dict[str, Any]], None]) -> list[Confirmation]:
    """Every candidate over ``seeds`` beside the seed's baseline (run once per seed) and, for a subset, a random subset
    of the size it trained on."""
    runs: dict[int, dict[str, RunMetrics]] = {}
    contexts: dict[int, SeedContext] = {}
    out = []
    for c in candidates:
        spent = 0.0
        for seed in seeds:
            if seed not in contexts:
                contexts[seed] = make_context(recipe.model_copy(update={"seed": seed}))
                runs[seed] = contexts[seed].runs
            ctx, seed_dir = contexts[seed], folder / f"seed{seed}"
            arms = ["baseline", c.arm]
            subset = None
            if c.family in ("filter", "dedup", "dedup+filter") and c.pool_fraction is not None:
                subset = f"random-subset:fraction={round(c.pool_fraction, 4)}"
                arms.append(subset)
            for arm in arms:
                if arm not in ctx.runs:
                    on_event("plan", {"phase": "confirm", "arm": arm, "seed": seed})
                    ctx.runs[arm] = cached_run(ctx, arm, seed_dir / folder_name(arm), on_event)
                    spent += ctx.runs[arm]["total_seconds"]
        pick = [final_value(runs[s][c.arm]) for s in seeds]
        base = [final_value(runs[s]["baseline"]) for s in seeds]
        versus = [_versus(runs, seeds, c.arm, "baseline", metric)]
        if subset is not None:
            versus.append(_versus(runs, seeds, c.arm, subset, metric))
        ratio = statistics.fmean(paid_seconds(runs[s][c.arm]) / max(1e-9, paid_seconds(runs[s]["baseline"])) for s in seeds)
        vs_base = versus[0]
        out.append(Confirmation(c.arm, list(seeds), pick, base, ratio, spent, versus,
                                vs_base.n > 1 and vs_base.ci95[0] >= -tolerance))
    return out


def _versus(runs: dict[int, dict[str, RunMetrics]], seeds: list[int], arm: str, opponent: str, metric: Any) -> Paired:
    diffs = [d for d in (diff_points(final_value(runs[s][arm]), final_value(runs[s][opponent]), metric) for s in seeds)
             if d is not None]
    return paired_points(diffs, opponent) if diffs else Paired(opponent, float("nan"), float("nan"), 0, (float("nan"),) * 2, [])
