"""A job in, its run out: one of the plan's training runs, in this process, in its own folder.

Each seed's workload is built once per process and shared by the contexts of every fidelity and arm (each run starts
from the seed's initial weights); a seed's references are built once per process and paid by the first job that uses
them. A job that needs its baseline's numbers (training less derives its steps from them) finds them in the study,
whichever process trained it.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from siftcli.arms.context import SeedContext
from siftcli.arms.run import folder_name, run_one
from siftcli.errors import RunInterrupted
from siftcli.plan.search import at_fidelity
from siftcli.plan.study import Job, Result
from siftcli.recipe.schema import Recipe
from siftcli.runio import Event, read_json
from siftcli.training.record import RunMetrics, brief
from siftcli.workload.build import Workload, build_workload


def job_folder(root: Path, job: Job) -> Path:
    """``search/<arm>/fidelity<F>/seed<N>/`` for the search, ``confirm/seed<N>/<arm>/`` for the confirmation."""
    if job.split == "evaluation":
        return root / "confirm" / f"seed{job.seed}" / folder_name(job.arm)
    rung = "full" if job.fidelity >= 1 else f"fidelity{job.fidelity:.2f}"
    return root / "search" / folder_name(job.arm) / rung / f"seed{job.seed}"


def cached_run(ctx: SeedContext, arm: str, folder: Path, on_event: Event | None) -> RunMetrics:
    """``run_one``, or the finished run this folder already holds (its process died before telling the study); an
    unfinished one starts again (training is deterministic per seed)."""
    done = folder / "metrics.json"
    if done.exists():
        metrics = read_json(done)
        if metrics.get("status") == "completed":
            return metrics
    if folder.exists():
        shutil.rmtree(folder)
    return run_one(ctx, arm, folder, on_event)


class Trials:
    """This process's contexts: a workload per seed, evaluated on the validation or the evaluation rows."""

    def __init__(self, recipe: Recipe, rows: dict[str, list[int]], built: dict[int, Workload] | None = None) -> None:
        self.recipe, self.rows = recipe, rows
        self._seeds: dict[int, tuple[Workload, dict[str, torch.Tensor]]] = {}
        self._contexts: dict[tuple[int, str, float], SeedContext] = {}
        self._references: dict[int, dict[str, tuple[Any, str]]] = {}  # SeedContext._references, one per seed
        for seed, w in (built or {}).items():
            self._keep(seed, w)

    def _keep(self, seed: int, w: Workload) -> None:  # the initial weights are copied before any run trains the model
        self._seeds[seed] = (w, copy.deepcopy(w.model.state_dict()))

    def context(self, seed: int, split: str, fidelity: float) -> SeedContext:
        """The seed's context for ``split`` at ``fidelity`` (references shared by all of the seed's contexts)."""
        key = (seed, split, fidelity)
        if key not in self._contexts:
            recipe = at_fidelity(self.recipe.model_copy(update={"seed": seed}), fidelity)
            if seed not in self._seeds:
                self._keep(seed, build_workload(recipe))
            w, initial = self._seeds[seed]
            w = dataclasses.replace(w, eval_data=[w.eval_data[i] for i in self.rows[split]])
            ctx = SeedContext(recipe, w, initial, "baseline")
            ctx._references = self._references.setdefault(seed, {})
            self._contexts[key] = ctx
        return self._contexts[key]

    def run(self, job: Job, root: Path, baseline: RunMetrics | None,
            on_event: Event | None) -> Result:
        """Train ``job`` (or read its finished run back); a candidate that cannot run is a result, not the plan's end."""
        t0 = time.perf_counter()
        try:
            ctx = self.context(job.seed, job.split, job.fidelity)
            if baseline is not None and job.arm != "baseline":
                ctx.runs["baseline"] = baseline
            run = cached_run(ctx, job.arm, job_folder(root, job), on_event)
        except RunInterrupted:  # Ctrl-C or SIGTERM inside training: the plan stops, resumable
            raise
        except Exception as exc:  # noqa: BLE001
            return Result(job, time.perf_counter() - t0, None, f"{type(exc).__name__}: {exc}")
        ctx.runs[job.arm] = run
        return Result(job, time.perf_counter() - t0, brief(run))
