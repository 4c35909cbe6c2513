"""``siftcli plan``'s decision accuracy: on regimes where the right answer is measured, how often it picks it, and what
deciding costs.

Each regime is a recipe of ``recipes/benchmarks/plan/`` (data derived from ``../shared/data`` by ``benchmarks/data.py``)
built so that a different family should pay: filtering (relevance, structured noise), dropping near-copies
(redundancy), both (compose), online sifting or training less (the default recipe's sifting), training less (a long
schedule), the teacher cache, and plain training. The **truth** is measured, never assumed: every strategy the plan
would consider (its candidate list for that recipe) trained beside the full baseline over 5 seeds of their own (seed +
100 ...), each seed from its own initial weights, the arms of a seed sharing them and the data order. The best is the
plan's own objective on those means (each time ratio the median over seeds of the strategy's paid seconds over its
seed's baseline's: a seed timed while the machine was busy moves a mean by several times): among the strategies
within the tolerance of the baseline and faster, the best metric, and among those within the tolerance of it, the
fastest ("faster": at most 0.95 of the baseline's time, the plan's own rule); none: train on everything. Then
``siftcli plan`` runs with its defaults, and the entry reports, per regime and overall: the pick, the truth, whether
they agree (same family, or the pick within its paired noise of the truth: its paired interval against the truth
reaches the tolerance and its time ratio is within 0.1), whether the pick is worse than the tolerance, the deciding
cost (the search) and the whole cost (with the confirmation) in the plan's baseline runs, and the seeds the
confirmation needed.

Truths are kept per seed in the repository (``benchmarks/truths/<regime>/seed<N>.json``, the runs in brief; their
training folders under ``runs/plan-accuracy/<regime>/truth/``) and plans in their folders, so an interrupted entry goes
on where it stopped and a report reuses the stored truths; ``--report-only`` only reads.

    python -m benchmarks plan-accuracy [--regime relevance ...] [--report-only] [--seeds 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import shutil
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.entry import DOC, ROOT

OUT = ROOT / "runs" / "plan-accuracy"
#: The truths, kept in the repository as data (each seed's runs in brief): the report reuses them; measuring them
#: again is ``--truth-only`` with the regime's files removed.
TRUTHS = ROOT / "benchmarks" / "truths"
TITLE = "siftcli plan: decision accuracy"
#: ``siftcli plan``'s default --budget, the one the aim is measured at.
DEFAULT_BUDGET = 2.0
TRUTH_SEED = 100
#: The truth's seeds: an accuracy claim needs five.
SEEDS = 5


@dataclass(frozen=True)
class Regime:
    recipe: str
    about: str  # what the regime is built for (the family it was designed to favour; the truth is measured)
    prepare: Callable[[], Any]


def _data() -> Any:
    from benchmarks import data

    return data


def _teacher(recipe: str = "teacher-model.yaml", folder: str = "plan-teacher-model") -> None:
    """The teacher of a distillation regime, trained once into ``runs/<folder>`` by its own recipe."""
    from siftcli.commands import run_train
    from siftcli.recipe.reader import load_recipe

    if not (ROOT / "runs" / folder / "model" / "config.json").exists():
        run_train(load_recipe(ROOT / "recipes" / "benchmarks" / "plan" / recipe), output=str(ROOT / "runs" / folder))


def _scratch_teacher() -> None:
    _data().agnews_mix(1000)
    _teacher()


def _pretrained_teacher() -> None:
    _data().agnews_mix(1000, evaluation=1000)
    _data().agnews_mix(400, evaluation=1000)
    _teacher("pretrained-teacher-model.yaml", "plan-pretrained-teacher-model")


REGIMES = {
    "relevance": Regime("relevance.yaml", "filter (two thirds of the pool off target)",
                        lambda: _data().agnews_mix(400, off_target=800, holdout=300)),
    "noise": Regime("noise.yaml", "filter (structured label noise)", lambda: _data().structured_noise(1000, 0.4, 300, 2000)),
    "redundancy": Regime("redundancy.yaml", "dedup (near-copies)", lambda: _data().agnews_mix(400, 40, 10)),
    "default": Regime("default.yaml", "online sifting or fewer epochs (the default recipe's sifting)",
                      lambda: _data().agnews_mix(1500)),
    "clean": Regime("clean.yaml", "everything (a short schedule on clean data)", lambda: _data().agnews_mix(1200)),
    "long": Regime("long.yaml", "fewer epochs (a long schedule)", lambda: _data().agnews_mix(600)),
    "teacher": Regime("teacher.yaml", "teacher-cache (distillation, the teacher on every step)", _scratch_teacher),
    "compose": Regime("compose.yaml", "dedup+filter (near-copies and off-target rows)",
                      lambda: _data().agnews_mix(300, 40, 6, 600, 300)),
    "pretrained-relevance": Regime("pretrained-relevance.yaml", "filter or target-only on a pretrained fine-tune "
                                   "(MiniLM; two thirds of the pool off target)",
                                   lambda: _data().agnews_mix(200, off_target=400, holdout=300, evaluation=1000)),
    "pretrained-noise": Regime("pretrained-noise.yaml", "filter on a pretrained fine-tune (MiniLM; 40% of each topic's "
                               "labels moved to the next topic)", lambda: _data().structured_noise(600, 0.4, 300, 1000)),
    "pretrained-clean": Regime("pretrained-clean.yaml", "everything on a pretrained fine-tune (MiniLM; clean, distinct "
                               "rows, 3 epochs)", lambda: _data().agnews_mix(500, evaluation=1000)),
    "pretrained-redundancy": Regime("pretrained-redundancy.yaml", "dedup on a pretrained fine-tune (MiniLM; 25 texts "
                                    "8 times each as near-copies beside 150, 6 epochs)",
                                    lambda: _data().agnews_mix(150, 25, 8, evaluation=1000)),
    "pretrained-long": Regime("pretrained-long.yaml", "fewer epochs on a pretrained fine-tune (MiniLM; 12 epochs of "
                              "150 texts)", lambda: _data().agnews_mix(150, evaluation=1000)),
    "pretrained-teacher": Regime("pretrained-teacher.yaml", "teacher-cache on a pretrained fine-tune (MiniLM distilled "
                                 "from a fine-tuned MiniLM)", _pretrained_teacher),
}


@dataclass
class ArmTruth:
    arm: str
    family: str
    mean: float  # paired difference to the baseline, metric points
    se: float
    low: float  # its 95% Student-t interval
    high: float
    #: paid training seconds over the baseline's of the same seed, the median over seeds: one seed timed while the
    #: machine was busy (a baseline at 235 s where its other seeds took 12 to 29) moved the mean to 3.98 and left the
    #: median at 0.38
    ratio: float
    values: list[float]


def _recipe(name: str) -> Any:
    from siftcli.recipe.reader import load_recipe

    return load_recipe(ROOT / "recipes" / "benchmarks" / "plan" / REGIMES[name].recipe)


def truth_runs(name: str, seeds: int, report_only: bool) -> list[dict[str, Any]]:
    """Every candidate and the baseline, per seed (trained here unless a seed's file exists)."""
    from siftcli.plan.strategies import strategies

    recipe = _recipe(name)
    return seed_runs(name, ["baseline", *[c.arm for c in strategies(recipe)[0]]], seeds, report_only)


def seed_runs(name: str, arms: list[str], seeds: int, report_only: bool, *, first: int = TRUTH_SEED,
              kind: str = "truth") -> list[dict[str, Any]]:
    """``arms`` (the baseline first) on ``seeds`` seeds from ``recipe.seed + first``, per seed, kept as
    ``benchmarks/truths/<regime>/seed<N>.json`` (``kind`` "truth") or ``<kind>-seed<N>.json``, trained under
    ``runs/plan-accuracy/<regime>/<kind>/`` unless the seed's file exists; an arm the file lacks is trained beside a
    baseline of its own run. ``report_only``: only the stored seeds, up to the first one missing."""
    from siftcli.arms.run import run_arms
    from siftcli.runio import atomic_write_json
    from siftcli.training.record import brief

    recipe = _recipe(name)
    out = []
    for i in range(seeds):
        seed = recipe.seed + first + i
        path = TRUTHS / name / (f"seed{seed}.json" if kind == "truth" else f"{kind}-seed{seed}.json")
        if not path.exists() and (OUT / name / kind / f"seed{seed}.json").exists():  # measured before truths were kept
            path = OUT / name / kind / f"seed{seed}.json"
        folder = OUT / name / kind / f"seed{seed}"
        if path.exists():
            record = json.loads(path.read_text())
            missing = [a for a in arms if a not in record["runs"]]
            if missing and not report_only:  # a candidate the list gained since: beside a baseline of its own run
                more = folder.with_name(f"seed{seed}-more")
                runs = run_arms(recipe, ["baseline", *missing], [seed], more)[0]
                for arm in missing:
                    record["runs"][arm] = {**brief(runs[arm]), "paired_baseline": brief(runs["baseline"])}
                atomic_write_json(path, record)
                _drop_weights(more)
            out.append(record)
            continue
        if report_only:
            break
        if folder.exists():  # a seed stopped part-way (its arms are not resumable one by one): trained again whole
            shutil.rmtree(folder)
        runs = run_arms(recipe, arms, [seed], folder)[0]
        record = {"seed": seed, "runs": {arm: brief(run) for arm, run in runs.items()}}
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, record)
        out.append(record)
        _drop_weights(folder)
    return out


def _drop_weights(folder: Path) -> None:
    """A measured seed keeps its arms' metrics and logs, not their weights: a MiniLM arm's checkpoint is 240 MB, and a
    regime's 5 seeds of 16 arms filled this machine's disk (every later write failed)."""
    for f in folder.rglob("checkpoint.pt*"):
        f.unlink(missing_ok=True)
    for model in folder.rglob("model"):
        if model.is_dir():
            shutil.rmtree(model, ignore_errors=True)


def truth_table(name: str, seeds: list[dict[str, Any]]) -> list[ArmTruth]:
    from siftcli.analysis.stats import diff_points, paired
    from siftcli.plan.strategies import strategies
    from siftcli.tasks import metric
    from siftcli.training.record import final_value, paid_seconds

    recipe = _recipe(name)
    families = {c.arm: c.family for c in strategies(recipe)[0]}
    rows = []
    for arm, family in families.items():
        diffs, ratios = [], []
        for s in seeds:
            a = s["runs"].get(arm)
            b = (a or {}).get("paired_baseline") or s["runs"]["baseline"]  # trained beside it, where it came later
            if a is None or a.get("final") is None:
                continue
            diffs.append(diff_points(final_value(a), final_value(b), metric(b["metric"])))
            ratios.append(paid_seconds(a) / max(1e-9, paid_seconds(b)))
        if diffs:
            p = paired(diffs)
            rows.append(ArmTruth(arm, family, p["mean"], p["se"] if len(diffs) > 1 else math.nan, p["ci95"][0],
                                 p["ci95"][1], statistics.median(ratios), diffs))
    return rows


def within(rows: list[ArmTruth], tolerance: float) -> list[ArmTruth]:
    """The truth's candidates that pay: within the tolerance of the baseline by their means and faster (at most
    ``FASTER`` of the baseline's time, the plan's own rule), the ones its best is chosen among."""
    from siftcli.plan.search import FASTER

    return [r for r in rows if r.mean >= -tolerance and r.ratio <= FASTER]


def best(rows: list[ArmTruth], tolerance: float) -> ArmTruth | None:
    """The plan's objective on the truth's means: among the candidates :func:`within` the tolerance and faster, the
    best metric; the fastest of those within the tolerance of it. None: train on everything."""
    ok = within(rows, tolerance)
    if not ok:
        return None
    top = max(r.mean for r in ok)
    return min((r for r in ok if r.mean >= top - tolerance), key=lambda r: r.ratio)


#: A truth candidate is "confirmable" when the plan's own confirmation, fed the truth's seeds, confirms it in at least
#: this share of their orders (:func:`confirmable`).
CONFIRMABLE = 0.5


def every_order(values: list[float], seeds: int, tolerance: float, futility: float | None = None) -> list[tuple[int, str]]:
    """The plan's confirmation (:func:`~siftcli.plan.confirm.sequential`) over every order of the first ``seeds``
    paired differences (the plan's seeds are other draws, so no one order is the plan's): per order, the seeds it took
    and why it stopped. ``futility``: the level a look calls the pick worse at (default the plan's)."""
    import itertools

    from siftcli.plan.confirm import FUTILITY, sequential

    out = []
    for order in itertools.permutations(values[:seeds]):
        looks, stopped = sequential(list(order), [seeds], tolerance, futility=FUTILITY if futility is None else futility)
        out.append((looks[-1].n if looks else seeds, stopped))
    return out


def confirmable(rows: list[ArmTruth], tolerance: float, seeds: int = SEEDS) -> list[ArmTruth]:
    """The truth candidates the plan's confirmation could itself confirm from the truth's own seeds: each run through
    :func:`~siftcli.plan.confirm.sequential` in every order of its first ``seeds`` seeds, kept when at least
    ``CONFIRMABLE`` of the orders end "within". The truth's best (:func:`best`) rests on means: a strategy at +1.1 ±
    2.5 points is its pick where no 5-seed confirmation at a 1-point tolerance can say "within", so no plan that only
    recommends what it confirmed can name it. :func:`best` over these is what such a plan can be right about."""
    out = []
    for r in rows:
        if len(r.values) < seeds:
            continue
        orders = every_order(r.values, seeds, tolerance)
        if sum(stopped == "within" for _, stopped in orders) >= CONFIRMABLE * len(orders):
            out.append(r)
    return out


def judge(pick: str, pick_family: str, rows: list[ArmTruth], seeds: list[dict[str, Any]], tolerance: float, *,
          among: list[ArmTruth] | None = None) -> tuple[bool, bool]:
    """Whether the pick agrees with the truth (same family, or within the paired noise of the truth's best: the paired
    interval of pick minus best reaches -tolerance and its time ratio is within 0.1), and whether it is harmful (its
    own interval against the baseline lies below -tolerance). The truth is :func:`best` over ``among`` (default: every
    row; :func:`confirmable` ones for the reading a confirming plan can reach)."""
    from siftcli.analysis.stats import diff_points, paired
    from siftcli.tasks import metric
    from siftcli.training.record import final_value

    truth = best(rows if among is None else among, tolerance)
    mine = next((r for r in rows if r.arm == pick), None)
    harmful = mine is not None and mine.high < -tolerance
    if truth is None:
        from siftcli.plan.search import FASTER

        return pick_family == "everything" or (mine is not None and mine.high >= -tolerance and mine.ratio <= FASTER), harmful
    if pick_family == truth.family:
        return True, harmful
    if mine is None:
        return False, harmful
    diffs = [diff_points(final_value(s["runs"][pick]), final_value(s["runs"][truth.arm]), metric(s["runs"][pick]["metric"]))
             for s in seeds if pick in s["runs"] and truth.arm in s["runs"]]
    p = paired(diffs)
    return p["ci95"][1] >= -tolerance and mine.ratio <= truth.ratio + 0.1, harmful


def screen_agreement(plan: dict[str, Any], rows: list[ArmTruth]) -> tuple[float, float, int]:
    """How often the screen orders two candidates as the truth does (their full-schedule paired differences to the
    baseline): over every pair of candidates screened at the screen's rung whose truths differ, the pairs the continuous
    signal's gap orders the same way (the validation loss for accuracy), the pairs accuracy's gap does (a tie at the
    screen counts as half), and the pairs."""
    truth = {r.arm: r.mean for r in rows}
    screened = []
    for c in plan["candidates"]:
        t = next((t for t in c["trials"] if t["status"] == "complete" and (t.get("rung") or t["fidelity"]) ==
                  plan["screen_fidelity"] and t.get("signal_gap") is not None and t.get("gap") is not None), None)
        if t is not None and c["arm"] in truth:
            screened.append((truth[c["arm"]], t["signal_gap"], t["gap"]))
    signal = metric = pairs = 0.0
    for i, a in enumerate(screened):
        for b in screened[i + 1:]:
            if a[0] == b[0]:
                continue
            pairs += 1
            signal += 1.0 if (a[1] - b[1]) * (a[0] - b[0]) > 0 else 0.5 if a[1] == b[1] else 0.0
            metric += 1.0 if (a[2] - b[2]) * (a[0] - b[0]) > 0 else 0.5 if a[2] == b[2] else 0.0
    return signal, metric, int(pairs)


def measured_on(where: Path, measuring: bool) -> str:
    """The machine a report's numbers were measured on, kept in ``where``: written when this command trains
    (``measuring``), read back when it only renders (``--report-only`` on another machine names the one they came
    from, not the one writing the table; the current machine where nothing was kept)."""
    from benchmarks.harness import machine

    if measuring:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(machine() + "\n")
    return where.read_text().strip() if where.exists() else machine()


def plan_folder(name: str, budget: float) -> Path:
    """``runs/plan-accuracy/<regime>/plan`` for the default budget, ``plan-budget<B>`` for another."""
    return OUT / name / ("plan" if budget == DEFAULT_BUDGET else f"plan-budget{budget:g}")


#: The regimes of pretrained fine-tunes (MiniLM): their own section, beside the from-scratch regimes' (whose truths
#: were measured on another machine and are not in the repository).
PRETRAINED = "pretrained-"


def title(budget: float, regimes: list[str] | None = None) -> str:
    """The section's title: the budget where it is not the default; the pretrained regimes' own when only they run."""
    base = f"{TITLE} on pretrained fine-tunes" if regimes and all(r.startswith(PRETRAINED) for r in regimes) else TITLE
    return base if budget == DEFAULT_BUDGET else f"{base} (budget {budget:g})"


def plan_for(name: str, report_only: bool, budget: float = 2.0) -> dict[str, Any] | None:
    from siftcli.plan.run import PlanSettings, run_plan

    folder = plan_folder(name, budget)
    done = folder / "plan.json"
    if done.exists():
        record = json.loads(done.read_text())
        if record["status"] == "completed" or report_only:
            return record
        return dataclasses.asdict(run_plan(None, resume=str(folder))[1])
    if report_only:
        return None
    return dataclasses.asdict(run_plan(_recipe(name), PlanSettings(budget=budget), output=str(folder))[1])


def _cell(r: ArmTruth | None) -> str:
    return "everything" if r is None else f"`{r.arm}` ({r.mean:+.2f} ± {r.se:.2f} at {r.ratio:.2f})"


def section(results: dict[str, tuple[list[ArmTruth], list[dict[str, Any]], dict[str, Any] | None]], machine: str,
            budget: float = 2.0, heading: str | None = None) -> list[str]:
    from siftcli.plan.run import load_record
    from siftcli.plan.view import screen_note

    command = "" if budget == DEFAULT_BUDGET else f" --budget {budget:g}"
    if results and all(name.startswith(PRETRAINED) for name in results):
        command = "".join(f" --regime {name}" for name in results) + command
    lines = [f"## {heading or title(budget)}", "",
             f"`python -m benchmarks plan-accuracy{command}` ({machine}). Each regime: the truth from every candidate "
             f"the plan considers trained beside the full baseline over {SEEDS} seeds of their own (paired difference to "
             f"the baseline in points ± SE, at its time ratio: the median over seeds of its paid seconds over its seed's "
             f"baseline's, robust to a seed timed on a busy machine), and `siftcli plan` with its defaults but the budget "
             f"(budget {budget:g} baseline runs to decide, tolerance 1 point, up to 5 confirming seeds). 'Agrees': the "
             "pick's family is the truth's, or the pick is within its paired noise of the truth's best (the 95% "
             "interval of pick minus best reaches -1 point, its time ratio within 0.1). 'Screen': the rung the "
             "candidates were screened at and whether the baseline had learned there ('undecided': no screened "
             "candidate said anything, the answer is 'train on everything' for want of evidence). Costs are in the "
             "plan's own baseline runs: deciding = the search, whole = with the confirmation. A pick 'favoured, not "
             "confirmed' was inconclusive at its last confirming seed with its seeds' 80% interval above -1 point; "
             "'exact': the teacher cache, the baseline's own results.", "",
             "'Screen order': of the pairs of candidates screened at that rung whose truths differ, how many the "
             "screen put in the truth's order by the validation loss (what it ranks by) and by accuracy.", "",
             "'Confirmable truth': the best (the same rule) among the candidates the plan's own confirmation would "
             f"confirm from the truth's {SEEDS} seeds (in at least half of their orders): what a plan that only recommends "
             "what it confirmed at a 1-point tolerance can be right about; 'agrees' beside it is judged against that.", "",
             "| regime | built for | truth (best) | screen | pick | pick's truth | agrees | worse than tolerance | "
             "deciding cost | whole cost | confirming seeds (stopped) | screen order: loss / accuracy | "
             "confirmable truth | agrees with it |",
             "|---|---|---|---|---|---|---|---|---:|---:|---|---|---|---|"]
    right = counted = harmful_n = undecided = reachable = favoured = 0
    by_signal = by_metric = all_pairs = 0.0
    deciding, whole = [], []
    for name, (rows, seeds, plan) in results.items():
        truth = best(rows, 1.0)
        if len(seeds) < SEEDS:  # a truth not (yet) measured whole is no truth to judge a plan by
            said = "not measured" if not seeds else f"{len(seeds)} of {SEEDS} seeds measured"
            lines.append(f"| {name} | {REGIMES[name].about} | ({said}) | | (not judged) | | | | | | | | | |")
            continue
        if plan is None or plan["status"] != "completed":
            lines.append(f"| {name} | {REGIMES[name].about} | {_cell(truth)} | | (plan not run) | | | | | | | | | |")
            continue
        agrees, harmful = judge(plan["pick"], plan["pick_family"], rows, seeds, plan["tolerance"])
        sure = confirmable(rows, plan["tolerance"])
        reached = judge(plan["pick"], plan["pick_family"], rows, seeds, plan["tolerance"], among=sure)[0]
        reachable += reached
        counted += 1
        right += agrees
        harmful_n += harmful
        unit = plan["baseline_seconds"] or 1.0
        d, w = plan["search_seconds"] / unit, (plan["search_seconds"] + plan["confirm_seconds"]) / unit
        deciding.append(d)
        whole.append(w)
        seeds_cell = ", ".join(f"{len(c['seeds'])} ({c['stopped'] or 'running'})" + (f" `{c['arm']}`" if len(
            plan["confirmations"]) > 1 else "") for c in plan["confirmations"]) or "—"  # a tie confirmed beside its best
        mine = next((r for r in rows if r.arm == plan["pick"]), None)
        blind = plan["answer"].startswith("train on everything, undecided")
        sig, met, pairs = screen_agreement(plan, rows)
        by_signal, by_metric, all_pairs = by_signal + sig, by_metric + met, all_pairs + pairs
        order_cell = f"{sig:g} / {met:g} of {pairs}" if pairs else "—"
        undecided += blind
        favoured += plan.get("pick_evidence") == "favoured"
        rung = (f"{plan.get('screen_fidelity', 0.125):.2f}, " + ("learned" if plan.get("screen_learned", True) else
                                                                "untrained") + (" (undecided)" if blind else ""))
        how = {"favoured": " (favoured, not confirmed)", "exact": " (exact)"}.get(plan.get("pick_evidence", ""), "")
        lines.append(f"| {name} | {REGIMES[name].about} | {_cell(truth)} | {rung} | `{plan['pick']}`{how} | "
                     f"{'—' if mine is None else f'{mine.mean:+.2f} ± {mine.se:.2f} at {mine.ratio:.2f}'} | "
                     f"{'yes' if agrees else 'no'} | {'yes' if harmful else 'no'} | {d:.2f} | {w:.2f} | {seeds_cell} | "
                     f"{order_cell} | {_cell(best(sure, plan['tolerance']))} | {'yes' if reached else 'no'} |")
    if counted:
        lines += ["", f"Decision accuracy: **{right} of {counted} right** ({100 * right / counted:.0f}%); picks worse than "
                      f"the tolerance: {harmful_n}; undecided (no evidence, 'train on everything'): {undecided}, right "
                      f"by default where the truth is everything; deciding cost {min(deciding):.2f} to {max(deciding):.2f} "
                      f"baseline runs (median {statistics.median(deciding):.2f}); whole cost {min(whole):.2f} to "
                      f"{max(whole):.2f} (median {statistics.median(whole):.2f})."
                      + (f" The screen's order agreed with the truth's in {by_signal:g} of {all_pairs:g} pairs by the "
                         f"validation loss and {by_metric:g} by accuracy." if all_pairs else "")
                      + f" Against the confirmable truths: {reachable} of {counted} right."
                      + (f" Favoured, not confirmed: {favoured} of the picks." if favoured else ""), ""]
    for name, (rows, seeds, plan) in results.items():
        lines += [f"### {name} (`recipes/benchmarks/plan/{REGIMES[name].recipe}`)", "",
                  f"Truth over {len(seeds)} seeds:", "", "| arm | family | vs baseline (points) | 95% interval | time ratio |",
                  "|---|---|---:|---|---:|"]
        lines += [f"| `{r.arm}` | {r.family} | {r.mean:+.2f} ± {r.se:.2f} | {r.low:+.2f} to {r.high:+.2f} | {r.ratio:.2f} |"
                  for r in sorted(rows, key=lambda r: -r.mean)]
        if plan is not None:
            lines += ["", f"Plan: {plan['answer']}."]
            screened = sum(1 for c in plan["candidates"] if c["trials"])
            lines.append(screen_note(load_record(plan)).capitalize() + ".")
            lines.append(f"Screened {screened} of {len(plan['candidates'])} candidates; unit {plan['baseline_seconds']:.1f} s "
                         f"({plan['unit_source']}); search {plan['search_seconds']:.0f} s, confirmation "
                         f"{plan['confirm_seconds']:.0f} s.")
            for c in plan["confirmations"]:
                looks = "; ".join(f"n={k['n']}: {k['low']:+.2f} to {k['high']:+.2f} (alpha {k['alpha']:.4f}, {k['says']})"
                                  for k in c["looks"])
                lines.append(f"Confirmation of `{c['arm']}`: {looks or 'no look yet'}.")
        lines.append("")
    return lines


def regimes_parser(name: str, doc: str, stored: str) -> argparse.ArgumentParser:
    """The options every entry over the regimes takes: which regimes, only the stored results (``stored``: what they
    are), the truth's seeds, where the section goes."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks {name}", description=doc.splitlines()[0])
    parser.add_argument("--regime", action="append", choices=list(REGIMES), help="only these (default: all)")
    parser.add_argument("--report-only", action="store_true", help=f"only read {stored}")
    parser.add_argument("--seeds", type=int, default=SEEDS, help="the truth's seeds (5 for an accuracy claim)")
    parser.add_argument("--out", default=str(DOC))
    return parser


def at_root() -> None:
    """Run from the repository's root, offline (the regimes' data and recipes are read relative to it)."""
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    parser = regimes_parser("plan-accuracy", __doc__, "what runs/plan-accuracy/ holds")
    parser.add_argument("--truth-only", action="store_true", help="measure the truths, run no plan")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET,
                        help="the plans' --budget (another than 2 writes its own plan folders and section)")
    opts = parser.parse_args(argv)
    at_root()
    from benchmarks.harness import write_section

    results = {}
    for name in opts.regime or list(REGIMES):
        if not opts.report_only:
            REGIMES[name].prepare()
        seeds = truth_runs(name, opts.seeds, opts.report_only)
        plan = None if opts.truth_only else plan_for(name, opts.report_only, opts.budget)
        results[name] = (truth_table(name, seeds), seeds, plan)
        print(f"plan-accuracy: {name}: {len(seeds)} truth seeds, plan {'—' if plan is None else plan['pick']}", flush=True)
    heading = title(opts.budget, list(results))
    write_section(Path(opts.out), heading,
                  section(results, measured_on(OUT / "machine.txt", not opts.report_only), opts.budget, heading))
    print(f"wrote the section '{heading}' of {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
