"""The sweep's own part of its Optuna study (the shared part, storage to liveness, is :mod:`siftcli.studies`): the study
with the sweep's sampler and pruner, the settings every machine of one sweep must share, and the baseline frontier,
trained once per study by whichever process claims ``NAME:frontier:G`` first."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from siftcli.analysis.sweep import Frontier
from siftcli.studies import ALIVE, OWNER, optuna_module, owner_of, storage_for

FRONTIER = "siftcli_frontier"
#: The settings every machine on one study must share (the trial count is the study's, not a machine's).
SHARED = ("mode", "trials", "space", "grid", "frontier", "max_time_ratio", "prune", "seed")


def open_study(settings: Any, sweep_dir: Path, higher: bool, max_resource: int | None) -> Any:
    """The study (created by the first machine, loaded by the rest). ``max_resource`` None: no pruner yet (the
    frontier, which sets it, is not known)."""
    optuna = optuna_module()
    constraints = None
    if settings.mode == "budget" and settings.max_time_ratio is not None:
        limit = settings.max_time_ratio
        constraints = lambda t: [t.user_attrs.get("time_ratio", 0.0) - limit]  # noqa: E731  (<= 0: feasible)
    # one seed per machine on a shared storage: samplers seeded alike propose the same parameters on every machine
    # (measured: two machines' first trials were the same beta); one machine keeps the recipe's seed, reproducibly
    seed = settings.seed if not settings.storage else (settings.seed + zlib.crc32(owner_of(sweep_dir).encode())) % 2**31
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(5, max(1, settings.trials // 3)),
                                         constraints_func=constraints)
    if max_resource is None or settings.mode != "budget" or not settings.prune:
        pruner = optuna.pruners.NopPruner()
    else:  # Hyperband over raw batches consumed (comparable across keep rates), from a ninth of the run to all of it
        pruner = optuna.pruners.HyperbandPruner(min_resource=max(1, max_resource // 9), max_resource=max_resource,
                                                reduction_factor=3)
    kwargs: dict[str, Any] = {"directions": ["maximize" if higher else "minimize", "minimize"]} if settings.mode == "pareto" \
        else {"direction": "maximize" if higher else "minimize"}
    return optuna.create_study(storage=storage_for(settings.storage, sweep_dir), study_name=settings.study, sampler=sampler,
                               pruner=pruner, load_if_exists=True, **kwargs)


def shared_frontier(study: Any, me: str, stale_seconds: float, train: Callable[[Frontier, Callable[[Frontier], None]], Frontier],
                    on_wait: Callable[[str], None]) -> Frontier:
    """The study's baseline frontier: read when another process finished it, trained here when this process claims
    it (``train(done_so_far, publish)``), waited for while a live one trains it, taken over when its owner falls
    silent or is this very folder, resumed (its finished points are kept)."""
    optuna = optuna_module()
    generation, waited_since, told = 0, time.time(), False
    while True:
        attrs = study.user_attrs
        held = attrs.get(FRONTIER) or {}
        if held.get("complete"):
            return held
        try:
            optuna.create_study(storage=study._storage, study_name=f"{study.study_name}:frontier:{generation}")
        except optuna.exceptions.DuplicatedStudyError:
            alive = attrs.get(ALIVE, waited_since)
            if attrs.get(OWNER) == me or time.time() - alive > stale_seconds:  # its owner is gone: claim the next one
                generation, waited_since = generation + 1, time.time()
                continue
            if not told:
                on_wait(f"waiting for the baseline frontier another machine is training for study {study.study_name}")
                told = True
            time.sleep(2.0)  # polling the shared store: another machine's progress has no other signal
            continue

        def publish(done: Frontier) -> None:
            study.set_user_attr(FRONTIER, done)
            study.set_user_attr(OWNER, me)
            study.set_user_attr(ALIVE, time.time())

        publish({**held, "complete": False})
        done = train(held, publish)
        publish({**done, "complete": True})
        return {**done, "complete": True}
