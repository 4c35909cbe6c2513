"""A job in, its run out: one of the plan's training runs, in this process, in its own folder.

Each seed's workload is built once per process and shared by the contexts of every fidelity and arm (each run starts
from the seed's initial weights); a seed's references are built once per process and paid by the first job that uses
them. A job that needs its baseline's numbers (training less derives its steps from them) finds them in the study,
whichever process trained it.
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from siftcli.arms.context import SeedContext
from siftcli.arms.run import folder_name, run_one
from siftcli.errors import RunFault, RunInterrupted
from siftcli.plan.search import SCREEN, at_fidelity
from siftcli.plan.strategies import LESS_FRACTIONS
from siftcli.plan.study import Job, Result
from siftcli.recipe.schema import Recipe
from siftcli.runio import Event, read_json
from siftcli.training.record import RunMetrics, brief
from siftcli.workload.build import Workload, build_workload

#: Errors of the machine rather than the candidate (a full disk or quota, a file system gone read-only): a trial that
#: meets one is no evidence against its strategy, so the plan stops there, resumable, instead of recording it failed.
MACHINE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)


def machine_fault(exc: BaseException) -> bool:
    """Whether ``exc`` is the machine's failing (``MACHINE_ERRNOS``, or a run's checkpoint it could not write), not the
    candidate's."""
    return isinstance(exc, RunFault) or (isinstance(exc, OSError) and exc.errno in MACHINE_ERRNOS)


def job_folder(root: Path, job: Job) -> Path:
    """``search/<arm>/fidelity<F>/seed<N>/`` for the search, ``confirm/seed<N>/<arm>/`` for the confirmation."""
    if job.split == "evaluation":
        return root / "confirm" / f"seed{job.seed}" / folder_name(job.arm)
    rung = "full" if job.fidelity >= 1 else f"fidelity{job.fidelity:.2f}"
    return root / "search" / folder_name(job.arm) / rung / f"seed{job.seed}"


def cached_run(ctx: SeedContext, arm: str, folder: Path, on_event: Event | None) -> RunMetrics:
    """``run_one``, or the finished run this folder already holds (its process died before telling the study); an
    unfinished one starts again (training is deterministic per seed). A finished job keeps its metrics and log, not
    its checkpoint."""
    done = folder / "metrics.json"
    if done.exists():
        metrics = read_json(done)
        if metrics.get("status") == "completed":
            return metrics
    if folder.exists():
        shutil.rmtree(folder)
    run = run_one(ctx, arm, folder, on_event)
    if run.get("status") == "completed":  # the plan reads a finished job's metrics.json, never its weights again:
        for name in ("checkpoint.pt", "checkpoint.pt.sha256"):  # a search of twenty jobs would keep twenty models
            (folder / name).unlink(missing_ok=True)
    return run


def drop_forks(root: Path) -> None:
    """The baselines' fork checkpoints (a wsd recipe's, :mod:`siftcli.arms.forks`), once the plan needs no more runs:
    a MiniLM checkpoint is 240 MB, two a baseline job."""
    for forks in root.glob("**/forks"):
        if forks.is_dir():
            shutil.rmtree(forks, ignore_errors=True)


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
            if recipe.optim.schedule == "wsd":
                # its baselines leave a checkpoint at each train-less fork point, and the train-less jobs after them in
                # this process train their decays alone (siftcli.arms.forks; exact under wsd only)
                ctx.fork_fractions = list(LESS_FRACTIONS)
            ctx._references = self._references.setdefault(seed, {})
            self._contexts[key] = ctx
        return self._contexts[key]

    def untrained(self, seed: int) -> float | None:
        """The validation metric before any training: the better of the seed's initial weights and always answering the
        commonest label (a model that has collapsed onto one class has learned nothing about the task either). One
        evaluation pass, on the planner's clock."""
        from torch.utils.data import DataLoader

        from siftcli.tasks import METRICS, TASKS
        from siftcli.training.loop import evaluate

        ctx = self.context(seed, "validation", SCREEN)
        w = ctx.workload
        w.model.load_state_dict(ctx.initial)  # every run starts by loading them too
        loader = DataLoader(w.eval_data, batch_size=ctx.recipe.eval.batch_size, shuffle=False, collate_fn=w.collate,
                            generator=torch.Generator())
        kind = TASKS[w.task]
        value = evaluate(w.model.to(w.device), loader, w.task, w.device, ctx.recipe.precision).get(kind.metric)
        m = METRICS[kind.metric]
        if value is None or not m.counts_correct:
            return value
        counts: dict[int, int] = {}
        for batch in loader:
            for y in batch["labels"].reshape(-1).tolist():
                counts[y] = counts.get(y, 0) + 1
        common = max(counts.values()) / max(1, sum(counts.values())) if counts else 0.0
        return max(value, common)  # a share of hits, as the counting metric (accuracy) is

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
            if machine_fault(exc):  # a full disk is no evidence against the candidate: the plan stops, resumable
                raise
            return Result(job, time.perf_counter() - t0, None, f"{type(exc).__name__}: {exc}")
        ctx.runs[job.arm] = run
        return Result(job, time.perf_counter() - t0, brief(run))
