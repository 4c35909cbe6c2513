"""``siftcli plan`` on the benchmark regimes: what it picked, what that cost, and whether the pick holds up.

For each regime (relevance, structured noise, redundancy, the default recipe) the plan runs with its defaults (budget
2 baseline runs to decide, tolerance 1 point, up to 5 confirming seeds) into ``runs/plan-<recipe>/``; a plan already finished there is
read back (``--report-only`` reads only). The section written to ``docs/benchmarks.md`` holds, per regime, every
candidate with its rungs and seconds, the confirmation (paired differences ± SE against the baseline and a random subset
of the same size), the plan's cost in baseline runs and its pay-back, beside what the regime's 5-seed benchmark entry
found best (``KNOWN_BEST``, from the sections above it in the same file).

    python -m benchmarks plan-regimes [--report-only] [--regime relevance-mr ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
from pathlib import Path
from typing import Any

from benchmarks.entry import DOC, ROOT
from siftcli.plan.run import load_record
from siftcli.plan.view import SEARCH_COLUMNS, search_rows

REGIMES = {
    "relevance-mr": ("recipes/benchmarks/relevance-mr.yaml", "relevance"),
    "noise-structured-agnews": ("recipes/benchmarks/noise-structured-agnews.yaml", "structured noise"),
    "redundancy-mr": ("recipes/benchmarks/redundancy-mr.yaml", "redundancy"),
    "default": ("recipes/default.yaml", "default recipe"),
}
#: The families the regime's own benchmark measurements found best, or within their noise of the best
#: (docs/benchmarks.md "Findings"; docs/tuning.md for the default recipe), for the decision accuracy.
KNOWN_BEST = {
    "relevance-mr": (("filter",), "filter once by an n-gram reference: full accuracy at 0.16 of the time (relevance-ngram, "
                                  "5 seeds)"),
    "noise-structured-agnews": (("filter",), "filter once by naive Bayes: +16.35 ± 0.62 at 0.25 of the time "
                                             "(noise-structured, 5 seeds)"),
    "redundancy-mr": (("dedup",), "drop near-copies: 71.62 ± 0.86 against the baseline's 70.40 ± 1.22 at 0.58 "
                                  "(redundancy, 5 seeds)"),
    "default": (("online", "fewer-epochs"), "sifting from memory ties the full baseline at 0.70 of its time (94.61 ± 0.25 "
                                            "against 94.68 ± 0.35) and ties a baseline given the same time "
                                            "(+0.74 ± 0.61): online or fewer epochs, within noise (docs/tuning.md, 3 seeds)"),
}
TITLE = "siftcli plan on the benchmark regimes"


def _prepare(name: str) -> None:
    from benchmarks import data

    {"relevance-mr": lambda: data.relevance(600, 1200), "redundancy-mr": lambda: data.redundancy(600, 50, 12),
     "noise-structured-agnews": lambda: data.structured_noise(2000, 0.4, 400, 2000)}.get(name, lambda: None)()


def _plan(name: str, report_only: bool) -> dict[str, Any] | None:
    folder = ROOT / "runs" / f"plan-{name}"
    done = folder / "plan.json"
    if done.exists():
        record = json.loads(done.read_text())
        if record["status"] == "completed" or report_only:
            return record
        if not report_only:
            from siftcli.plan.run import run_plan

            return dataclasses.asdict(run_plan(None, resume=str(folder))[1])
    if report_only:
        return None
    from benchmarks.harness import machine
    from siftcli.plan.run import run_plan
    from siftcli.recipe.reader import load_recipe

    _prepare(name)
    record = dataclasses.asdict(run_plan(load_recipe(REGIMES[name][0]), output=str(folder))[1])
    (folder / "machine.txt").write_text(machine() + "\n")
    return record


def _section(records: dict[str, dict[str, Any]]) -> list[str]:
    machines = sorted({(ROOT / "runs" / f"plan-{n}" / "machine.txt").read_text().strip()
                       for n in records if (ROOT / "runs" / f"plan-{n}" / "machine.txt").exists()})
    where = "; ".join(machines) or f"{platform.machine()}, {os.cpu_count()} cores"
    lines = [f"## {TITLE}", "",
             f"`python -m benchmarks plan-regimes` ({where}; each plan with its defaults: budget 2 baseline runs for the "
             "search, tolerance 1 point, up to 5 confirming seeds, one process). Search on a validation half of each "
             "evaluation set, confirmation on the other half with fresh seeds. Times are ratios within one plan. "
             "'measured best' is what the regime's own benchmark measurements found best or within their noise of it "
             "(5 seeds; 3 for the default recipe); 'agrees' whether the plan picked that family. A plan's cost is its "
             "search (held to the budget: what it spent deciding) plus its confirmation, every job's seconds summed; "
             "'tried' counts the candidates screened and those trained at the second rung.", ""]
    right = 0
    summary = ["| regime | pick | time ratio | vs baseline (points) | vs random subset | tried (screen / rung 2 of all) | "
               "search cost (runs) | plan cost (runs) | wall-clock | pays back after | measured best | agrees |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    # the screen is the lowest rung a candidate trained at, the second rung the one above it
    for name, r in records.items():
        unit = r["baseline_seconds"] or 1.0
        conf = next((c for c in r["confirmations"] if c["arm"] == r["pick"]), None)
        vs = {v["opponent"].partition(":")[0]: v for v in (conf or {}).get("versus", [])}
        cell = lambda v: "—" if not v or not v["n"] else f"{v['mean']:+.2f} ± {v['se']:.2f}"  # noqa: E731
        families, why = KNOWN_BEST[name]
        family = " or ".join(families)
        agrees = r["pick_family"] in families
        right += agrees
        payback = "—" if r["payback_runs"] is None else f"{r['payback_runs']:.1f} runs"
        cheap = sum(1 for c in r["candidates"] if c["trials"])
        full = sum(1 for c in r["candidates"] if len(c["trials"]) > 1)
        wall = r.get("wall_seconds") or 0.0
        summary.append(f"| {REGIMES[name][1]} | {r['pick']} | {r['pick_time_ratio']:.2f} | {cell(vs.get('baseline'))} | "
                       f"{cell(vs.get('random-subset'))} | {cheap} / {full} of {len(r['candidates'])} | "
                       f"{r['search_seconds'] / unit:.2f} | "
                       f"{(r['search_seconds'] + r['confirm_seconds']) / unit:.2f} | {wall / 60:.0f} min | {payback} | {family} | "
                       f"{'yes' if agrees else 'no'} |")
    lines += summary + ["", f"Decision accuracy: the pick's family is the measured best in {right} of {len(records)} "
                             "regimes.", ""]
    for name in records:
        lines.append(f"- {REGIMES[name][1]}: {KNOWN_BEST[name][1]}")
    lines.append("")
    for name, r in records.items():
        unit = r["baseline_seconds"] or 1.0
        lines += [f"### {REGIMES[name][1]} (`{REGIMES[name][0]}`)", "",
                  f"Baseline on validation: {r['baseline_metric']:.4f} {r['metric']} in {unit:.0f} s (the unit). "
                  f"Answer: {r['answer']}.", "",
                  "| " + " | ".join(SEARCH_COLUMNS) + " |", "|" + "---|" * len(SEARCH_COLUMNS)]
        lines += ["| " + " | ".join(row) + " |" for row in search_rows(load_record(r))]
        for c in r["confirmations"]:
            vs = "; ".join(f"vs {v['opponent']}: {v['mean']:+.2f} ± {v['se']:.2f} (95% {v['ci95'][0]:+.2f} to "
                           f"{v['ci95'][1]:+.2f})" for v in c["versus"] if v["n"])
            lines.append(f"\nConfirmed `{c['arm']}` over seeds {c['seeds']}: time ratio {c['time_ratio']:.2f}; {vs}; "
                         f"within tolerance: {'yes' if c['within_tolerance'] else 'no'}.")
        if r["skipped"]:
            lines.append("\nSkipped: " + "; ".join(f"{s['family']}: {s['why']}" for s in r["skipped"]) + ".")
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks plan-regimes", description=__doc__.splitlines()[0])
    parser.add_argument("--report-only", action="store_true", help="only read the plans already in runs/plan-*/")
    parser.add_argument("--regime", action="append", choices=list(REGIMES), help="only these (default: all)")
    parser.add_argument("--out", default=str(DOC))
    opts = parser.parse_args(argv)
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    records = {}
    for name in opts.regime or list(REGIMES):
        record = _plan(name, opts.report_only)
        if record is not None:
            records[name] = record
    if not records:
        print("plan-regimes: no plan to report (run without --report-only)")
        return 1
    from benchmarks.harness import write_section

    write_section(Path(opts.out), TITLE, _section(records))
    print(f"wrote the section '{TITLE}' of {opts.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
