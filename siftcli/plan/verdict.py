"""A finished plan's record in, its answer out: the pick (or training on everything, and why), what the confirmation
found in a line, and ``plan.yaml`` with the rows a subset pick trains on."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from siftcli.arms.forks import less_steps
from siftcli.arms.table import arm_row, less_fraction
from siftcli.plan import confirm as confirming
from siftcli.plan import costs
from siftcli.plan import search as searching
from siftcli.plan.record import Confirmation, PlanRecord
from siftcli.plan.settings import MAX_SEEDS
from siftcli.plan.strategies import online_recipe
from siftcli.plan.view import lean_note, screen_note
from siftcli.recipe.schema import Recipe, ReferenceSpec, recipe_to_yaml
from siftcli.runio import atomic_write_text, write_table

if TYPE_CHECKING:
    from siftcli.plan.phases import Plan


def conclude(record: PlanRecord) -> None:
    """The confirmed pick when it is faster; else the exact one (the teacher cache) when it pays; else a favoured pick
    (inconclusive at the last seed, its seeds leaning within the tolerance: :func:`~siftcli.plan.confirm.lean`), said to
    be unconfirmed; else training on everything, with why. Its cost, and after how many runs the plan pays."""
    ok = chosen(record)
    cost = record.search_seconds + record.confirm_seconds
    exact = searching.exact_pick(record)
    unit = record.baseline_seconds or 0.0
    if exact is not None and (not ok or costs.full_time(exact, unit) < ok[0].time_ratio * unit):
        ratio = costs.full_time(exact, unit) / unit if unit else 1.0
        record.pick, record.pick_family, record.pick_time_ratio, record.pick_versus_baseline = \
            exact.arm, exact.family, ratio, None
        record.pick_evidence = "exact"
        saving = unit * (1 - ratio)
        record.payback_runs = cost / saving if saving > 0 else None
        also = (f" (faster than {ok[0].arm}, confirmed at {ok[0].time_ratio:.2f} of the time)" if ok else
                f" ({confirmed_line(record)})" if record.confirmations else "")
        record.answer = (f"{exact.family}: {exact.arm}, the baseline's training at {ratio:.2f} of its time (priced from "
                         f"the baseline's own job); its results are the baseline's, so there is nothing to confirm{also}")
        return
    confirmed = bool(ok)
    ok = ok or chosen(record, favoured=True)
    if not ok:
        record.pick, record.pick_family, record.pick_time_ratio, record.pick_versus_baseline = "baseline", "everything", 1.0, None
        record.pick_evidence = ""
        record.payback_runs = None
        screened = [c for c in record.candidates if c.trials]
        if not screened and not record.confirmations:
            record.answer = (f"train on everything, untested: the budget of {record.budget:g} baseline runs paid for the "
                             f"baselines only, so none of the {len(record.candidates)} strategies was screened; raise "
                             "--budget to compare them")
            return
        if not record.confirmations:
            told = [c for c in screened if any(t.informative for t in c.trials if t.status == "complete")]
            if not told:
                record.answer = (f"train on everything, undecided: no screened strategy said anything ({len(screened)} of "
                                 f"{len(record.candidates)} screened, each too short to tell: {screen_note(record)})")
                return
            record.answer = ("train on everything: no strategy was within the tolerance of the baseline at less time on "
                             f"the validation split ({len(screened)} of {len(record.candidates)} screened, "
                             f"{len(screened) - len(told)} of them too short to tell)")
            return
        record.answer = f"train on everything: {confirmed_line(record)}"
        return
    best = ok[0]
    family = next(c.family for c in record.candidates if c.arm == best.arm)
    record.pick, record.pick_family, record.pick_time_ratio = best.arm, family, best.time_ratio
    record.pick_versus_baseline = best.versus[0]
    record.pick_evidence = "confirmed" if confirmed else "favoured"
    saving = (record.baseline_seconds or 0.0) * (1 - best.time_ratio)
    record.payback_runs = cost / saving if saving > 0 else None
    record.answer = (f"{family}: {best.arm} at {best.time_ratio:.2f} of the baseline's time, "
                     f"{best.versus[0].mean:+.2f} ± {best.versus[0].se:.2f} points against it, " +
                     (f"confirmed after {len(best.seeds)} seeds" if confirmed else _favoured(best, record.tolerance)))
    others = [c for c in record.confirmations if c is not best]
    if others:  # a tie confirmed beside it: what it found too
        record.answer += " (beside it, " + "; ".join(_confirmed(c) for c in others) + ")"


def chosen(record: PlanRecord, favoured: bool = False) -> list[Confirmation]:
    """The confirmed picks that pay (within the tolerance, faster), the answer first: the plan's own objective (the
    truths' too) on the confirmation's paired means: the best against the baseline, and among those within the
    tolerance of it, the fastest. ``favoured``: the favoured picks instead (inconclusive, leaning within)."""
    ok = [c for c in record.confirmations if (c.favoured if favoured else c.within_tolerance) and
          c.time_ratio <= searching.FASTER]
    if len(ok) < 2:
        return ok
    top = max(c.versus[0].mean for c in ok)
    near = sorted((c for c in ok if c.versus[0].mean >= top - record.tolerance), key=lambda c: c.time_ratio)
    return near + sorted((c for c in ok if c not in near), key=lambda c: -c.versus[0].mean)


def _favoured(c: Confirmation, tolerance: float) -> str:
    lean = c.lean
    assert lean is not None
    return (f"favoured, not confirmed: after {len(c.seeds)} seeds its {100 * (1 - lean.alpha):.0f}% interval "
            f"({lean.low:+.2f} to {lean.high:+.2f}) lies above -{tolerance:g}, the tolerance, where its confirming "
            f"bound did not; {_more_seeds(c)} adds seeds to confirm it")


def _more_seeds(c: Confirmation) -> str:
    """The command that extends ``c``'s confirmation by three seeds (at most ``MAX_SEEDS``)."""
    return f"`siftcli plan --resume DIR --seeds {min(MAX_SEEDS, len(c.seeds) + 3)}`"


def confirmed_line(record: PlanRecord) -> str:
    """What the confirmation found, in a line (each pick's, where a tie was confirmed beside the best)."""
    return "the confirmation found " + "; ".join(_confirmed(c) for c in record.confirmations)


def _confirmed(c: Confirmation) -> str:
    v = c.versus[0]
    said = (f"{c.arm}: {v.mean:+.2f} ± {v.se:.2f} points over {v.n} seeds at {c.time_ratio:.2f} of the time"
            if v.n else f"{c.arm}: no paired seed")
    why = {"worse": "worse than the tolerance", "failed": "a confirming run failed",
           "slower": f"not faster: every seed took over {searching.FASTER:g} of its baseline's time",
           "within": f"within the tolerance but not faster ({c.time_ratio:.2f} of the time, over "
                     f"{searching.FASTER:g})"}.get(
        c.stopped, f"inconclusive after {len(c.seeds)} seeds: neither within nor beyond the tolerance; "
                   f"{_more_seeds(c)} adds seeds")
    if c.favoured:
        assert c.lean is not None
        why += f" (favoured: its {lean_note(c.lean)})"
    return f"{said}, {why}"


def write_recipe(record: PlanRecord, recipe: Recipe, plan: Plan, folder: Path) -> None:
    """``plan.yaml``: the chosen recipe; a filter or dedup pick also writes its rows (``train.csv``, ``eval.csv``)."""
    family = record.pick_family
    out = recipe
    if family == "fewer-epochs":
        done, _ = plan.study.results()
        base = searching.find(done, "baseline", 1.0, plan.confirm_seeds[0], "evaluation")
        steps = less_steps(less_fraction(record.pick), base.run["optimizer_steps"])  # type: ignore[union-attr,index]
        out = recipe.model_copy(update={"max_steps": steps})
    elif family in ("online", "teacher-cache"):
        out = online_recipe(recipe, record.pick) if family == "online" else recipe.model_copy(update={
            "distill": recipe.distill.model_copy(update={"cache": True}) if recipe.distill else None})
    elif family in confirming.SUBSET_FAMILIES:
        ctx = plan.trials.context(recipe.seed, "validation", 1.0)
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
