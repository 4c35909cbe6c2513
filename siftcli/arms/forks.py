"""A ``wsd`` baseline and the train-less fractions of its seed in, fork checkpoints out: training less read from one run.

Under the ``wsd`` schedule (:func:`~siftcli.training.loop.lr_factor`) a run capped at ``m`` steps takes the full run's
learning rates up to :func:`~siftcli.training.loop.fork_step` and only then decays, so ``train-less:fraction=F`` is the
baseline's checkpoint there resumed with the cap: the baseline writes one checkpoint per fraction on its way (off its
clock), and each train-less arm trains its decay alone (a fifth of its steps at the default ``decay_fraction``) instead
of its whole schedule. Its metrics are those of the capped run (its clock holds the baseline's seconds up to the fork
and its own after), so a comparison reads the same numbers as from a run apart, for less.
"""

from __future__ import annotations

import math
from pathlib import Path

from siftcli.recipe.schema import Recipe
from siftcli.training.loop import fork_step


def full_steps(recipe: Recipe, n_train: int) -> int | None:
    """An unsifted run's optimizer steps, known before it trains where its schedule is whole epochs of every row (no
    step or seconds cap); None otherwise (no forks then: the arms train apart)."""
    if recipe.max_steps is not None or recipe.max_seconds is not None:
        return None
    if recipe.epochs != math.ceil(recipe.epochs) or n_train <= 0:
        return None
    return int(recipe.epochs) * math.ceil(n_train / recipe.batch_size)


def less_steps(fraction: float, baseline_steps: int) -> int:
    """``train-less:fraction=F``'s steps: that share of the full baseline's (one rule, read by the arm and the forks)."""
    return max(1, round(fraction * baseline_steps))


def trunk_forks(recipe: Recipe, n_train: int, fractions: list[float], folder: Path) -> dict[int, Path]:
    """Where the baseline writes its checkpoint for each train-less fraction (by step), under ``folder``: none unless
    its schedule is ``wsd`` and its steps are known before it trains."""
    steps = full_steps(recipe, n_train)
    if recipe.optim.schedule != "wsd" or steps is None:
        return {}
    out = {}
    for f in fractions:
        k = fork_step(less_steps(f, steps), recipe.optim.decay_fraction)
        if 0 < k < steps:
            out[k] = folder / f"step{k}"
    return out


def fork_for(recipe: Recipe, forks: dict[int, Path]) -> Path | None:
    """The baseline's checkpoint a capped ``wsd`` run goes on from (None: it trains from its start)."""
    if recipe.optim.schedule != "wsd" or recipe.max_steps is None:
        return None
    where = forks.get(fork_step(recipe.max_steps, recipe.optim.decay_fraction))
    return where if where is not None and (where / "checkpoint.pt").exists() else None
