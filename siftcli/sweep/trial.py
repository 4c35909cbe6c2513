"""A sweep folder and a trial number in, that trial's record out: what a worker process (or the parent) runs for one point of the space."""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict

from siftcli import studies
from siftcli.analysis.sweep import Params
from siftcli.arms.context import SeedContext
from siftcli.arms.run import run_one
from siftcli.recipe.reader import load_recipe
from siftcli.runio import atomic_write_json, read_json
from siftcli.sift.stateful import StateDict
from siftcli.sweep.settings import SweepSettings
from siftcli.sweep.space import apply_params
from siftcli.sweep.study import open_study
from siftcli.tasks import metric
from siftcli.training.record import keep_value
from siftcli.workload.build import build_workload, check_sift_fits, workload_key

#: Trials are not pruned after this share of the run's raw batches.
LAST_PRUNE = 0.9


# -- one trial (in a worker) ----------------------------------------------------------------------------
class TrialRecord(TypedDict, total=False):
    """``trial-N/trial.json``: one trial's outcome (``complete`` or ``pruned``), its parameters, cost and curve."""

    state: str
    number: int
    params: Params
    metric: str
    higher_is_better: bool
    train_seconds: float
    optimizer_steps: int
    final: dict[str, float | None]
    kept: float | None  # the achieved kept fraction (complete trials)
    scoring_cost: float | None
    pruned_at_raw_batch: int  # pruned trials
    startup_seconds: float  # from hand-over to training
    curve: list[dict[str, float | None]]


def run_trial(sweep_dir: Path, number: int, *, cache: Any = None, sent: float | None = None) -> TrialRecord:
    """Train trial ``number`` of the sweep in ``sweep_dir``; report evaluations; stop when pruned. ``cache`` (a
    :class:`~siftcli.sweep.workers.WorkloadCache`) keeps the workload between trials; ``sent``: when the trial was handed
    over (its start-up, the time until training starts, is reported)."""
    optuna = studies.optuna_module()
    began = sent if sent is not None else time.time()
    cache = cache if cache is not None else WorkloadCache()
    settings = SweepSettings(**read_json(sweep_dir / "sweep_settings.json"))
    base = load_recipe(sweep_dir / "recipe.yaml")
    frontier = read_json(sweep_dir / "frontier.json")
    key = (settings.storage, settings.study, str(sweep_dir))
    if key not in cache.studies:
        higher = metric(base.resolved_metric).higher_is_better
        cache.studies[key] = open_study(settings, sweep_dir, higher, frontier["max_resource"])
    study = cache.studies[key]
    trial = studies.live_trial(study, number)
    params = trial.params
    recipe = apply_params(base, params)
    workload, initial = cache.get(recipe)
    curve: list[Mapping[str, Any]] = []
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
    reset_random(recipe.seed)
    startup = time.time() - began
    try:
        metrics = run_one(SeedContext(recipe, workload, initial), "sifted", folder, on_event)
    except optuna.TrialPruned:
        last = curve[-1]
        result: TrialRecord = {"state": "pruned", "pruned_at_raw_batch": pruned_at[0], "train_seconds": last["train_seconds"],
                  "optimizer_steps": last["step"], "final": {k: last.get(k) for k in ("loss", workload.metric)}}
    else:
        result = {"state": "complete", "train_seconds": metrics["train_seconds"], "optimizer_steps": metrics["optimizer_steps"],
                  "final": metrics["final"], "kept": keep_value(metrics, "achieved"),
                  "scoring_cost": metrics.get("scoring_cost")}
    result.update(number=number, params=params, metric=workload.metric, higher_is_better=metric(workload.metric).higher_is_better,
                  startup_seconds=startup,
                  curve=[{k: p.get(k) for k in ("step", "raw_samples", "train_seconds", workload.metric)} for p in curve])
    atomic_write_json(folder / "trial.json", result)
    return result


class WorkloadCache:
    """Workloads by :func:`~siftcli.workload.build.workload_key`, each with its initial weights (the least recently used
    goes past ``limit``: a reference holdout in the search space makes more than one), and the open study."""

    def __init__(self, limit: int = 2) -> None:
        self.limit = limit
        self._items: OrderedDict[str, tuple[Any, StateDict]] = OrderedDict()  # workload, its initial weights
        self.studies: dict[tuple[str, ...], Any] = {}  # the open study, so a trial does not reconnect

    def get(self, recipe: Any) -> tuple[Any, StateDict]:
        import copy

        key = workload_key(recipe)
        if key in self._items:
            self._items.move_to_end(key)
            workload, initial = self._items[key]
            check_sift_fits(recipe, workload.unlabeled)
            return workload, initial
        workload = build_workload(recipe)
        initial = copy.deepcopy(workload.model.state_dict())
        self._items[key] = (workload, initial)
        while len(self._items) > self.limit:
            self._items.popitem(last=False)
        return workload, initial


def reset_random(seed: int) -> None:
    """Every generator a trial could draw from, back to the recipe's seed (the loop reseeds torch and random itself;
    numpy too here, so a library drawing from it cannot carry one trial's draws into the next)."""
    import random

    import numpy as np
    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
