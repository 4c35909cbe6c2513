"""Arm names and seeds in, each seed's run records out: every arm from the seed's own initial weights and data order."""

from __future__ import annotations

import copy
import dataclasses
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from siftcli.arms.context import SeedContext
from siftcli.arms.forks import fork_for, full_steps, trunk_forks
from siftcli.arms.table import arm_row, check_arms, less_fraction, seed_order
from siftcli.recipe.schema import Recipe
from siftcli.runio import Event, ensure_writable
from siftcli.training.loop import train
from siftcli.training.record import RunMetrics
from siftcli.training.setup import sift_config
from siftcli.workload.build import build_workload


def run_arms(recipe: Recipe, arms: list[str], seeds: list[int], folder: Path, *, subject: str = "sifted",
             on_event: Event | None = None, workloads: Callable[[Recipe], Any] | None = None,
             live: list[dict[str, RunMetrics]] | None = None,
             finished: Callable[[Path], RunMetrics | None] | None = None,
             interrupted: Callable[[Path], bool] | None = None) -> list[dict[str, RunMetrics]]:
    """Every arm of ``arms`` (with what they need) for every seed; returns each seed's metrics by arm.

    Each seed builds its own workload (``workloads``, default :func:`~siftcli.workload.build.build_workload`): its own
    initial weights and, where the data has no fixed split, its own split; its arms share them and the data order.
    ``live`` (a list) holds each seed's arms as they finish, so a caller keeps them when a run is interrupted.
    ``finished(folder)``: an arm that already finished there (a resumed comparison), read instead of trained again; the
    arms after it derive from it as they would from a fresh run. ``interrupted(folder)``: an arm stopped there with a
    checkpoint, continued from it (the run's own exact resume) instead of trained from its start.
    """
    order = check_arms(recipe, arms, subject)
    out: list[dict[str, RunMetrics]] = [] if live is None else live
    for position, seed in enumerate(seeds):
        r = recipe.model_copy(update={"seed": seed})
        workload = (workloads or build_workload)(r)
        ctx = SeedContext(r, workload, copy.deepcopy(workload.model.state_dict()), subject,
                          fork_fractions=[less_fraction(a) for a in order if a.partition(":")[0] == "train-less"])
        seed_dir = folder / f"seed{seed}" if len(seeds) > 1 else folder
        out.append(ctx.runs)
        for name in seed_order(order, position, subject):
            where = seed_dir / folder_name(name)
            done = finished(where) if finished is not None else None
            ctx.runs[name] = done if done is not None else run_one(
                ctx, name, where, on_event, resume=interrupted is not None and interrupted(where))
        ran = dict(ctx.runs)  # each seed's record lists its arms in the table's order, whatever order they ran in
        ctx.runs.clear()
        ctx.runs.update({name: ran[name] for name in order})
    return out


def run_one(ctx: SeedContext, name: str, folder: Path, on_event: Event | None = None, resume: bool = False) -> RunMetrics:
    """One arm of a seed, from the seed's initial weights (``resume``: from the checkpoint an interrupt left in
    ``folder``)."""
    ensure_writable(folder)
    if on_event is not None:
        on_event("arm", {"arm": name, "seed": ctx.recipe.seed})
    plan = arm_row(name).derive(ctx, name)
    workload = ctx.workload if plan.subset is None else ctx.workload.subset(plan.subset)
    cfg = sift_config(plan.recipe, len(workload.train_data), **plan.sift) if plan.sift is not None else None
    wants = (cfg is not None and cfg.uses_reference) or plan.pays_reference
    reference = ctx.reference(name, folder, kind=plan.reference_kind) if wants else None
    if reference is not None and plan.subset is not None:  # the loader indexes the subset's rows
        reference = dataclasses.replace(reference, losses=reference.losses[plan.subset])
    workload.model.load_state_dict(ctx.initial)
    whole = plan.subset is None and cfg is None and reference is None and not plan.upfront and not resume
    forks = trunk_forks(plan.recipe, len(workload.train_data), ctx.fork_fractions, folder / "forks") \
        if whole and name == "baseline" else {}
    start = fork_for(plan.recipe, ctx.forks) if whole and name != "baseline" and \
        plan.recipe.model_copy(update={"max_steps": None}) == ctx.recipe else None
    metrics = train(workload, plan.recipe, cfg, reference=reference, run_dir=folder, arm=name, on_event=on_event,
                    upfront=plan.upfront, resume=resume, forks=forks or None, start_from=start)
    if forks:  # placed for the steps it was predicted to train; another count would put them at other fractions
        ctx.forks = forks if metrics.get("optimizer_steps") == full_steps(plan.recipe, len(workload.train_data)) else {}
    if start is not None and metrics.get("status") == "completed":  # one fork a fraction: its checkpoint is spent
        shutil.rmtree(start, ignore_errors=True)
    if plan.subset is not None:
        metrics["subset"] = {"samples": len(plan.subset), "of": len(ctx.workload.train_data)}
    return metrics


#: The longest arm folder name: file systems refuse names over 255 bytes, and a path is read by people too.
FOLDER_NAME_MAX = 80


def folder_name(name: str) -> str:
    """An arm's folder: one path component made of its name, every character but letters, digits, ``.``, ``_`` and
    ``-`` dropped or turned into ``-`` (a name such as ``variant:name=../../x`` never leaves the comparison's folder);
    a name longer than :data:`FOLDER_NAME_MAX` is cut there and told apart from others by a hash of the whole name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name.replace("=", "")).strip("-.")
    if len(safe) > FOLDER_NAME_MAX:
        import hashlib

        safe = f"{safe[:FOLDER_NAME_MAX - 9].rstrip('-.')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return safe or "arm"
