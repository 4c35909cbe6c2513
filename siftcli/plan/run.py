"""A recipe, a budget and a tolerance in; ``plan.json``, ``plan.yaml`` (and the filtered data it trains on) out.

The evaluation rows are split once, seeded apart from any training seed: half is the validation split the search ranks
candidates on, half the evaluation split the confirmation reports on, so the rows the final numbers come from never
chose anything. (A recipe's holdout is not used for ranking: the cheap references are built from it, so it would favour
the filters they drive.)
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from siftcli.analysis.stats import metric_info
from siftcli.arms.context import SeedContext, prepare
from siftcli.arms.table import arm_row
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.plan.confirm import confirm
from siftcli.plan.record import Candidate, Confirmation, Paired, PlanRecord, Skipped, Trial
from siftcli.plan.search import Clock, Search, search
from siftcli.plan.strategies import strategies
from siftcli.plan.view import plan_html
from siftcli.recipe.reader import load_recipe
from siftcli.recipe.schema import Recipe, ReferenceSpec, recipe_to_yaml
from siftcli.runio import Event, atomic_write_json, atomic_write_text, claim, read_json, write_table
from siftcli.workload.build import Workload, build_workload

#: Seeds the split of the evaluation rows into validation and evaluation halves (apart from every training seed).
SPLIT_SEED = 15_485_863


def split_eval(n: int) -> tuple[list[int], list[int]]:
    """Validation and evaluation halves of ``n`` evaluation rows (seeded, the same for every seed and resume)."""
    if n < 4:
        raise SiftcliError(f"siftcli plan: the evaluation data has {n} rows; it needs at least 4 to set half aside for "
                           "choosing (raise data.eval_fraction or give data.eval_source)")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    return sorted(order[: n // 2]), sorted(order[n // 2:])


def check_options(budget: float, tolerance: float, seeds: int) -> None:
    """One line for each bad option, before anything loads."""
    if not budget == budget or not 1 < budget <= 100:
        raise SiftcliError(f"--budget {budget}: expected a number of full baseline runs above 1 (the baseline itself is "
                           "one) and at most 100")
    if not tolerance == tolerance or not 0 <= tolerance <= 100:
        raise SiftcliError(f"--tolerance {tolerance}: expected metric points, 0 or more")
    if not 2 <= seeds <= 50:
        raise SiftcliError(f"--seeds {seeds}: the confirmation needs 2 to 50 paired seeds (5 for an accuracy claim)")


def _with_eval(w: Workload, rows: list[int]) -> Workload:
    return dataclasses.replace(w, eval_data=[w.eval_data[i] for i in rows])


def _make_context(eval_rows: list[int], built: dict[int, Workload] | None = None) -> Callable[[Recipe], SeedContext]:
    """A seed's context whose evaluation data is only ``eval_rows`` of the recipe's (the validation or evaluation half).
    Each seed's workload is built once and shared by its contexts (every fidelity of the search: the schedule is not
    part of it, and each run starts from the seed's initial weights); ``built``: workloads already loaded, by seed."""
    seeds: dict[int, tuple[Workload, dict[str, torch.Tensor]]] = {}

    def keep(seed: int, w: Workload) -> None:  # the initial weights are copied before any run trains the shared model
        seeds[seed] = (_with_eval(w, eval_rows), copy.deepcopy(w.model.state_dict()))

    for seed, w in (built or {}).items():
        keep(seed, w)

    def make(recipe: Recipe) -> SeedContext:
        if recipe.seed not in seeds:
            keep(recipe.seed, build_workload(recipe))
        w, initial = seeds[recipe.seed]
        return SeedContext(recipe, w, initial, "baseline")
    return make


def run_plan(recipe: Recipe | None, *, budget: float = 3.0, tolerance: float = 1.0, seeds: int = 3,
             output: str | None = None, resume: str | None = None, on_event: Event | None = None) -> tuple[Path, PlanRecord]:
    """Search, confirm and decide; every step written to ``plan.json`` as it finishes, so an interrupted plan resumes."""
    emit = on_event or (lambda kind, data: None)
    if resume:
        folder = Path(resume)
        if not (folder / "plan.json").exists():
            raise SiftcliError(f"--resume {resume}: not a plan folder (no plan.json)")
        claim(folder)
        record = load_record(read_json(folder / "plan.json"))
        recipe = load_recipe(folder / "recipe.yaml")
        first = build_workload(recipe)
    else:
        assert recipe is not None
        check_options(budget, tolerance, seeds)
        first, folder = prepare(recipe, output, "-plan")
        candidates, skipped = strategies(recipe)
        record = PlanRecord("running", recipe.name, first.metric, budget, tolerance, seeds, candidates=candidates,
                            skipped=skipped)
    val_rows, eval_rows = split_eval(len(first.eval_data))
    record.validation_rows, record.evaluation_rows = len(val_rows), len(eval_rows)
    metric = metric_info(record.metric)
    clock = Clock(before=record.search_seconds)

    def save() -> None:
        atomic_write_json(folder / "plan.json", dataclasses.asdict(record))

    try:
        save()
        s = Search(record, folder / "search", _make_context(val_rows, {recipe.seed: first}), recipe, clock, emit, save)
        winners = search(s, record.candidates, metric)
        record.search_seconds = clock.spent()
        save()
        t0, before = time.perf_counter(), record.confirm_seconds
        confirmed = {c.arm: c for c in record.confirmations}
        todo = [c for c in winners[:2] if c.arm not in confirmed]
        if todo:
            record.confirmations += confirm(todo, recipe, [recipe.seed + 1 + i for i in range(record.seeds)],
                                            folder / "confirm", _make_context(eval_rows), metric, tolerance, emit)
        record.confirm_seconds = before + time.perf_counter() - t0
        _decide(record)
        _write_recipe(record, recipe, s, folder)
        record.status = "completed"
        save()
        atomic_write_text(folder / "report.html", plan_html(record))
    except (KeyboardInterrupt, RunInterrupted) as exc:
        record.status, record.search_seconds = "interrupted", max(record.search_seconds, clock.spent())
        save()
        raise RunInterrupted(str(folder), signal=getattr(exc, "signal", "SIGINT"),
                             resume_command=f"siftcli plan --resume {folder}") from None
    return folder, record


def _decide(record: PlanRecord) -> None:
    """The cheapest confirmed candidate, or training on everything; its cost, and after how many runs the plan pays."""
    ok = sorted((c for c in record.confirmations if c.within_tolerance and c.time_ratio < 1), key=lambda c: c.time_ratio)
    cost = record.search_seconds + record.confirm_seconds
    if not ok:
        record.pick, record.pick_family, record.pick_time_ratio, record.pick_versus_baseline = "baseline", "everything", 1.0, None
        record.payback_runs = None
        record.answer = ("train on everything: no strategy was within the tolerance of the full baseline at less time "
                         + ("in the confirmation" if record.confirmations else "on the validation split"))
        return
    best = ok[0]
    family = next(c.family for c in record.candidates if c.arm == best.arm)
    record.pick, record.pick_family, record.pick_time_ratio = best.arm, family, best.time_ratio
    record.pick_versus_baseline = best.versus[0]
    saving = (record.baseline_seconds or 0.0) * (1 - best.time_ratio)
    record.payback_runs = cost / saving if saving > 0 else None
    record.answer = (f"{family}: {best.arm} at {best.time_ratio:.2f} of the baseline's time, "
                     f"{best.versus[0].mean:+.2f} ± {best.versus[0].se:.2f} points against it over {len(best.seeds)} seeds")


def _write_recipe(record: PlanRecord, recipe: Recipe, s: Search, folder: Path) -> None:
    """``plan.yaml``: the chosen recipe; a filter or dedup pick also writes its rows (``train.csv``, ``eval.csv``)."""
    family = record.pick_family
    out = recipe
    if family == "fewer-epochs":
        run = s.contexts[1.0].runs
        steps = max(1, round(float(record.pick.partition("=")[2]) * run["baseline"]["optimizer_steps"]))
        out = recipe.model_copy(update={"max_steps": steps})
    elif family in ("online", "teacher-cache"):
        out = _online_recipe(recipe, record.pick) if family == "online" else recipe.model_copy(update={
            "distill": recipe.distill.model_copy(update={"cache": True}) if recipe.distill else None})
    elif family in ("filter", "dedup", "dedup+filter"):
        ctx = s.contexts[1.0]
        chosen = arm_row(record.pick).derive(ctx, record.pick).subset or []
        w = ctx.workload
        if w.source_rows is None or not hasattr(w.source_rows, "to_csv") or w.task == "image-classification":
            record.answer += "; the rows were not written (image data): run `siftcli filter` with the same settings"
        else:
            train, evald = folder / "train.csv", folder / "eval.csv"
            rows = w.source_rows.select([w.source_index[i] for i in chosen])
            write_table(rows, train)
            write_table(w.eval_source_rows, evald)
            data = recipe.data.model_copy(update={"source": str(train.resolve()), "eval_source": str(evald.resolve()),
                                                  "format": "csv", "eval_split": None, "train_split": "train"})
            out = recipe.model_copy(update={"data": data, "sift": recipe.sift.model_copy(update={
                "enabled": False, "reference": ReferenceSpec()})})
            record.data_out = str(train)
    if family != "online":
        out = out.model_copy(update={"sift": out.sift.model_copy(update={"enabled": False})})
    path = folder / "plan.yaml"
    atomic_write_text(path, f"# siftcli plan: {record.answer}\n" + recipe_to_yaml(out))
    record.recipe_out = str(path)


def _online_recipe(recipe: Recipe, arm: str) -> Recipe:
    """The recipe with the online-sifting settings the arm name carries."""
    from siftcli.recipe.reader import apply_override
    from siftcli.recipe.schema import validate_recipe

    raw = recipe.model_dump(mode="json")
    raw["sift"]["enabled"] = True
    for item in filter(None, arm.partition(":")[2].split(",")):
        apply_override(raw, f"sift.{item}")
    return validate_recipe(raw, "plan")


def load_record(data: dict[str, Any]) -> PlanRecord:
    """A ``plan.json`` back into its typed record (a resumed plan)."""
    def paired(p: dict[str, Any] | None) -> Paired | None:
        return None if p is None else Paired(**{**p, "ci95": tuple(p["ci95"])})

    candidates = [Candidate(**{**c, "trials": [Trial(**t) for t in c["trials"]]}) for c in data["candidates"]]
    confirmations = [Confirmation(**{**c, "versus": [paired(v) for v in c["versus"]]}) for c in data["confirmations"]]
    return PlanRecord(**{**data, "candidates": candidates, "skipped": [Skipped(**k) for k in data["skipped"]],
                         "confirmations": confirmations, "pick_versus_baseline": paired(data.get("pick_versus_baseline"))})
