"""Training less read from one run: does a ``wsd`` baseline match the recipe's schedule, and do its forks tell training
less apart as the recipe's own runs do?

For every regime of ``plan-accuracy`` and every seed of its stored truth (``benchmarks/truths/<regime>/seed<N>.json``:
the recipe's baseline and its ``train-less`` arms, each trained apart on the recipe's linear schedule), the same seed
(the same initial weights and data order) trains the baseline under ``optim.schedule=wsd`` (warm-up, stable, a linear
decay over the last ``decay_fraction``), writing a checkpoint at each train-less fraction's fork point, and each
``train-less:fraction=F`` is read from its fork (its decay alone: :mod:`siftcli.arms.forks`). Reported per regime, paired
by seed (mean ± SE in points, 95% interval): the wsd baseline against the recipe's; each fork against the recipe's
train-less run of the same fraction; the gap that decides training less (train-less minus its own baseline) under each;
and the seconds the wsd seed cost against the recipe's baseline and train-less runs apart. Kept in the repository as data
(``benchmarks/truths/<regime>/wsd-seed<N>.json``) beside the truths; a report reuses them.

    python -m benchmarks wsd-forks [--regime long ...] [--report-only]
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.scripts.plan_accuracy import (
    OUT,
    REGIMES,
    TRUTH_SEED,
    TRUTHS,
    _drop_weights,
    _recipe,
    at_root,
    regimes_parser,
)

TITLE = "Training less read from forks of one wsd run"
#: The fractions forked: the plan's two train-less candidates, and 0.7 (no truth of its own to pair with).
FRACTIONS = (0.35, 0.5, 0.7)
#: Points: the plan's default tolerance; "equivalent" is a paired 95% interval inside plus or minus this.
TOLERANCE = 1.0


def less(f: float) -> str:
    return f"train-less:fraction={f:g}"


def measure(name: str, seeds: int, report_only: bool) -> list[dict[str, Any]]:
    """Each truth seed's wsd runs (trained here unless stored), with the seed's truth runs beside them."""
    from siftcli.arms.run import run_arms
    from siftcli.recipe.reader import apply_override
    from siftcli.recipe.schema import validate_recipe
    from siftcli.runio import atomic_write_json
    from siftcli.training.record import brief

    recipe = _recipe(name)
    raw = recipe.model_dump(mode="json")
    apply_override(raw, "optim.schedule=wsd")
    wsd = validate_recipe(raw, "wsd")
    out = []
    for i in range(seeds):
        seed = recipe.seed + TRUTH_SEED + i
        truth_path, path = TRUTHS / name / f"seed{seed}.json", TRUTHS / name / f"wsd-seed{seed}.json"
        if not truth_path.exists():
            break
        if not path.exists():
            if report_only:
                break
            folder = OUT / name / "wsd" / f"seed{seed}"
            if folder.exists():
                shutil.rmtree(folder)
            starts: list[tuple[str, float]] = []

            def on_event(kind: str, data: Any) -> None:
                if kind == "arm":
                    starts.append((data["arm"], time.perf_counter()))

            t0 = time.perf_counter()
            runs = run_arms(wsd, ["baseline", *map(less, FRACTIONS)], [seed], folder, on_event=on_event)[0]
            ends = [t for _, t in starts[1:]] + [time.perf_counter()]
            wall = {arm: end - start for (arm, start), end in zip(starts, ends)}  # each arm's own process seconds
            record = {"seed": seed, "seconds": time.perf_counter() - t0, "decay_fraction": wsd.optim.decay_fraction,
                      "runs": {arm: brief(run) | {"forked": "forked_from" in run, "wall_seconds": wall.get(arm)}
                               for arm, run in runs.items()}}
            atomic_write_json(path, record)
            _drop_weights(folder)
            print(f"wsd-forks: {name} seed {seed}: {record['seconds']:.0f} s", flush=True)
        out.append({"wsd": json.loads(path.read_text()), "truth": json.loads(truth_path.read_text())})
    return out


def _paired(diffs: list[float]) -> str:
    from siftcli.analysis.stats import paired

    if len(diffs) < 2:
        return "—"
    p = paired(diffs)
    return f"{p['mean']:+.2f} ± {p['se']:.2f} ({p['ci95'][0]:+.2f} to {p['ci95'][1]:+.2f})"


def _within(diffs: list[float]) -> str:
    """How a paired difference reads: equivalent (its 95% interval inside the tolerance), within noise (the interval
    holds 0), or which way it differs."""
    from siftcli.analysis.stats import paired

    if len(diffs) < 2:
        return "—"
    p = paired(diffs)
    low, high = p["ci95"]
    if -TOLERANCE <= low and high <= TOLERANCE:
        return "equivalent"
    if low <= 0 <= high:
        return "within noise"
    return "wsd better" if low > 0 else "wsd worse"


def rows(name: str, seeds: list[dict[str, Any]]) -> dict[str, Any]:
    from siftcli.analysis.stats import diff_points
    from siftcli.tasks import metric
    from siftcli.training.record import final_value

    def diff(a: dict[str, Any], b: dict[str, Any]) -> float:
        return diff_points(final_value(a), final_value(b), metric(b["metric"]))

    base = [diff(s["wsd"]["runs"]["baseline"], s["truth"]["runs"]["baseline"]) for s in seeds]
    forks, gaps_wsd, gaps_linear = {}, {}, {}
    for f in FRACTIONS:
        have = [s for s in seeds if less(f) in s["truth"]["runs"]]
        forks[f] = [diff(s["wsd"]["runs"][less(f)], s["truth"]["runs"][less(f)]) for s in have]
        gaps_wsd[f] = [diff(s["wsd"]["runs"][less(f)], s["wsd"]["runs"]["baseline"]) for s in seeds]
        gaps_linear[f] = [diff(s["truth"]["runs"][less(f)], s["truth"]["runs"]["baseline"]) for s in have]
    # what the three train-less arms added to the baseline, in its runs: their decays' wall seconds over the wsd
    # baseline's (apart, their schedules' share of it: 0.35 + 0.5 + 0.7 = 1.55, by structure)
    added = [sum(s["wsd"]["runs"][less(f)]["wall_seconds"] for f in FRACTIONS) / s["wsd"]["runs"]["baseline"]["wall_seconds"]
             for s in seeds]
    return {"base": base, "forks": forks, "gaps_wsd": gaps_wsd, "gaps_linear": gaps_linear, "added": added,
            "all_forked": all(s["wsd"]["runs"][less(f)].get("forked") for s in seeds for f in FRACTIONS)}


def section(results: dict[str, list[dict[str, Any]]], machine: str) -> list[str]:
    command = "".join(f" --regime {n}" for n in results) if len(results) < len(REGIMES) else ""
    lines = [f"## {TITLE}", "", f"`python -m benchmarks wsd-forks{command}` ({machine}). Per regime, paired by seed over "
             f"the truth's seeds (each its own initial weights, shared by its runs): the baseline under `optim.schedule="
             "wsd` (decay over the last 0.2) against the recipe's own schedule; each `train-less` fork (the wsd "
             "baseline's checkpoint at its fork point, its decay trained alone) against the recipe's train-less run "
             "apart; the decision a plan reads (train-less minus its own baseline) under each. Points ± SE (95% "
             "interval). 'Equivalent': the interval inside ±1 point; 'within noise': it holds 0. 'Forks cost': the wall "
             "seconds of the three train-less arms (0.35, 0.5, 0.7) read from forks, in runs of the wsd baseline (its "
             "own wall seconds, with the checkpoints it wrote); trained apart they cost 1.55 by structure.", "",
             "| regime | seeds | wsd baseline − recipe's | reads | fork 0.35 − apart | fork 0.5 − apart | "
             "gap 0.35: wsd / recipe's | gap 0.5: wsd / recipe's | gap 0.7 (wsd) | forks cost (runs) |",
             "|---|---:|---|---|---|---|---|---|---|---:|"]
    for name, seeds in results.items():
        if not seeds:
            lines.append(f"| {name} | 0 | | | | | | | | |")
            continue
        r = rows(name, seeds)

        def gap(f: float) -> str:
            return f"{_paired(r['gaps_wsd'][f])} / {_paired(r['gaps_linear'][f])}"

        ratio = statistics.fmean(r["added"])
        lines.append(f"| {name} | {len(seeds)} | {_paired(r['base'])} | {_within(r['base'])} | "
                     f"{_paired(r['forks'][0.35])} | {_paired(r['forks'][0.5])} | {gap(0.35)} | {gap(0.5)} | "
                     f"{_paired(r['gaps_wsd'][0.7])} | {ratio:.2f}{'' if r['all_forked'] else ' (some apart)'} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    opts = regimes_parser("wsd-forks", __doc__ or "", "the stored wsd seeds").parse_args(argv)
    at_root()
    from benchmarks.harness import machine, write_section

    results = {}
    for name in opts.regime or list(REGIMES):
        if not opts.report_only:
            REGIMES[name].prepare()
        results[name] = measure(name, opts.seeds, opts.report_only)
    write_section(Path(opts.out), TITLE, section(results, machine()))
    print(f"wrote the section '{TITLE}' of {opts.out}")
    return 0
