"""The confirmation's stopping rule replayed on the truths: how many seeds a loser costs, and how often a pick within the
tolerance is wrongly called worse, at each futility level.

A plan's confirmation adds paired seeds one at a time and stops a pick as worse when a look's own two-sided
``1 - FUTILITY`` interval lies below minus the tolerance (:mod:`siftcli.plan.confirm`). Every truth candidate of every
regime (``benchmarks/truths/<regime>/seed<N>.json``: 5 seeds paired with the baseline, no training here) that is
predicted faster (at most 0.95 of the baseline's time) is run through :func:`~siftcli.plan.confirm.sequential` as the
plan would see it, its 5 seeds in every order (120 orders each: the plan's seeds are other draws, so no one order is
the plan's). Reported per level: for the candidates whose truth is within the tolerance, the share of orders confirmed,
called worse, favoured (inconclusive at the last seed, its seeds' interval at that level within the tolerance:
:func:`~siftcli.plan.confirm.lean`), and the mean seeds; for those beyond it, the share called worse, the share
favoured (an answer that loses more than the tolerance) and the mean seeds (what a loser costs, each seed a full
baseline run and the pick's). The confirming rule is the plan's own at every level; only the futility level changes.
The stored plans' confirmations (``runs/plan-accuracy/<regime>/plan``) are looked at again under the plan's level:
each should stop where it stopped.

    python -m benchmarks confirm-replay [--regime long ...] [--levels 0.05 0.1 0.2 0.3]
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from benchmarks.scripts.plan_accuracy import (
    REGIMES,
    ArmTruth,
    at_root,
    every_order,
    plan_for,
    regimes_parser,
    truth_runs,
    truth_table,
)

TITLE = "siftcli plan: the confirmation's futility level, replayed on the truths"
#: The plan's default tolerance and --seeds.
TOLERANCE, SEEDS = 1.0, 5
LEVELS = (0.05, 0.1, 0.2, 0.3)


@dataclass(frozen=True)
class Replay:
    """One futility level over every order of every candidate's seeds."""

    level: float
    within_orders: int  # orders of candidates whose truth is within the tolerance
    within_confirmed: int
    within_worse: int
    within_favoured: int  # inconclusive, and favoured by the interval at this level
    within_seeds: float  # mean seeds those orders took
    beyond_orders: int
    beyond_worse: int
    beyond_favoured: int
    beyond_seeds: float
    lost: int  # orders confirmed at the smallest level and not at this one


def candidates(regimes: list[str], seeds: int = SEEDS) -> list[tuple[str, ArmTruth]]:
    """Every stored truth candidate with ``seeds`` seeds or more that the plan would confirm (predicted faster)."""
    from siftcli.plan.search import FASTER

    out = []
    for name in regimes:
        stored = truth_runs(name, seeds, report_only=True)
        out += [(name, t) for t in truth_table(name, stored) if len(t.values) >= seeds and t.ratio <= FASTER]
    return out


def replay(rows: list[tuple[str, ArmTruth]], levels: list[float], seeds: int = SEEDS) -> list[Replay]:
    """Each level over every order of every candidate's first ``seeds`` seeds, through the plan's own looks; ``lost``
    counts the orders the smallest level confirmed and this one did not."""
    from siftcli.plan.confirm import lean

    def one(level: float) -> tuple[Replay, set[tuple[str, str, tuple[float, ...]]]]:
        w = wc = ww = wf = b = bw = bf = 0
        wseeds, bseeds, confirmed = [], [], set()
        for name, t in rows:  # every_order's orders come in itertools.permutations' order
            leaning = lean(t.values[:seeds], TOLERANCE, futility=level).says == "favoured"  # the same in every order
            for order, (n, stopped) in zip(itertools.permutations(t.values[:seeds]),
                                           every_order(t.values, seeds, TOLERANCE, level), strict=True):
                if stopped == "within":
                    confirmed.add((name, t.arm, order))
                favoured = stopped == "inconclusive" and leaning
                if t.mean >= -TOLERANCE:
                    w, wc, ww, wf = w + 1, wc + (stopped == "within"), ww + (stopped == "worse"), wf + favoured
                    wseeds.append(n)
                else:
                    b, bw, bf = b + 1, bw + (stopped == "worse"), bf + favoured
                    bseeds.append(n)
        return Replay(level, w, wc, ww, wf, statistics.fmean(wseeds) if wseeds else 0.0, b, bw, bf,
                      statistics.fmean(bseeds) if bseeds else 0.0, 0), confirmed

    runs = [one(level) for level in sorted(levels)]
    first = runs[0][1] if runs else set()
    return [dataclasses.replace(r, lost=len(first - confirmed)) for r, confirmed in runs]


def stored_plans(regimes: list[str]) -> tuple[int, list[str]]:
    """The stored plans' confirmations (``runs/plan-accuracy/<regime>/plan``) looked at again under the plan's own
    rule: how many, and those whose seeds would stop elsewhere (a plan run under another level than today's)."""
    from siftcli.plan.confirm import sequential

    count, moved = 0, []
    for name in regimes:
        plan = plan_for(name, report_only=True)
        if plan is None:
            continue
        for c in plan["confirmations"]:
            values = c["versus"][0]["values"]
            looks, stopped = sequential(values, plan.get("horizons") or [plan["seeds"]], plan["tolerance"],
                                        len(plan["confirmations"]))
            n = looks[-1].n if looks else len(values)
            count += 1
            if n != len(values) or (stopped or "open") != (c["stopped"] or "open"):
                moved.append(f"{name}: `{c['arm']}` {c['stopped'] or 'open'} after {len(values)} seeds, now "
                             f"{stopped or 'open'} after {n}")
    return count, moved


def section(result: list[Replay], rows: list[tuple[str, ArmTruth]], plans: tuple[int, list[str]], machine: str,
            seeds: int = SEEDS) -> list[str]:
    from siftcli.plan.confirm import FUTILITY

    within = sum(1 for _, t in rows if t.mean >= -TOLERANCE)
    out = [f"## {TITLE}", "", f"`python -m benchmarks confirm-replay` (no training: the stored truths of {len({n for n, _ in rows})} "
           f"regimes; {machine}). {len(rows)} candidates predicted faster, {within} of them within the tolerance by "
           f"their truth, each replayed over its {seeds} seeds in all {math.factorial(seeds)} orders through the plan's "
           f"sequential looks (tolerance {TOLERANCE:g}, --seeds {seeds}); the plan's level is {FUTILITY:g} (an {100 * (1 - FUTILITY):.0f}% "
           "interval).",
           "",
           "| futility level (interval) | within: confirmed | within: called worse | within: favoured | within: mean seeds | "
           "beyond: called worse | beyond: favoured | beyond: mean seeds | confirmed at the first level, not here |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result:
        out.append(f"| {r.level:g} ({100 * (1 - r.level):.0f}%) | {100 * r.within_confirmed / max(1, r.within_orders):.1f}% | "
                   f"{100 * r.within_worse / max(1, r.within_orders):.1f}% | "
                   f"{100 * r.within_favoured / max(1, r.within_orders):.1f}% | {r.within_seeds:.2f} | "
                   f"{100 * r.beyond_worse / max(1, r.beyond_orders):.1f}% | "
                   f"{100 * r.beyond_favoured / max(1, r.beyond_orders):.1f}% | {r.beyond_seeds:.2f} | {r.lost} |")
    count, moved = plans
    out += ["", f"The stored plans' {count} confirmations looked at again under the plan's level: "
            + ("each stops where it stopped." if not moved else f"{len(moved)} would stop elsewhere: " + "; ".join(moved) + ".")]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = regimes_parser("confirm-replay", __doc__, "the stored truths (always: this entry trains nothing)")
    parser.add_argument("--levels", type=float, nargs="+", default=list(LEVELS), help="futility levels to replay")
    opts = parser.parse_args(argv)
    at_root()
    from benchmarks.harness import machine, write_section

    regimes = opts.regime or list(REGIMES)
    rows = candidates(regimes, opts.seeds)
    lines = section(replay(rows, opts.levels, opts.seeds), rows, stored_plans(regimes), machine(), opts.seeds)
    print("\n".join(lines))
    write_section(Path(opts.out), TITLE, lines)
    print(f"wrote the section '{TITLE}' of {opts.out}")
    return 0
