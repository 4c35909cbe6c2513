"""Tune sifting settings against one baseline: the numbers behind docs/tuning.md and the default recipe.

Per seed it trains the baseline once, then every variant (recipe overrides, as ``--set`` takes them)
and every short baseline (the baseline's schedule cut to a fraction of its steps, learning rate fully
decayed: the honest opponent of a variant that saves that much time), all from the same initial
weights in one process, and prints one markdown row per run. Speed numbers live here, never in tests.

    python -m benchmarks variants                                   # default recipe, the variants below
    python -m benchmarks variants recipes/benchmarks/sst2-minilm.yaml --seeds 2 \\
        --variant "b2=sift.beta=2,sift.sift_delay_fraction=0.05" --short 0.5
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from typing import Any

from benchmarks.entry import ROOT  # noqa: E402
from siftcli.analysis.stats import compare_pair
from siftcli.arms.context import SeedContext, prepare
from siftcli.arms.run import run_one
from siftcli.errors import SiftcliError
from siftcli.recipe.reader import load_recipe
from siftcli.runio import atomic_write_json
from siftcli.workload.build import build_workload

DEFAULT_VARIANTS = [
    "default=",
    "calibrated=sift.mode=calibrated",
    "delay5=sift.sift_delay=0,sift.sift_delay_fraction=0.05,sift.mode=calibrated",
    "beta2-delay5=sift.beta=2,sift.sift_delay=0,sift.sift_delay_fraction=0.05,sift.mode=calibrated",
    "beta3-delay5=sift.beta=3,sift.sift_delay=0,sift.sift_delay_fraction=0.05,sift.mode=calibrated",
    "fp32-scoring=sift.precision=fp32",
]


def _parse_variant(text: str) -> tuple[str, list[str]]:
    name, _, sets = text.partition("=")
    if not name:
        raise SiftcliError(f"--variant {text!r}: expected NAME=key=value,key=value")
    return name, [s for s in _split(sets) if s]


def _split(sets: str) -> list[str]:
    """Split ``a.b=1,c=2`` on the commas that start a new ``key=`` (values may hold commas in brackets)."""
    out: list[str] = []
    depth = 0
    cur = ""
    for ch in sets:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    return out + [cur]


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if x is None else "—" if x != x else fmt.format(x)  # x != x: NaN, e.g. s of an unsifted run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", help="recipe YAML (default: the embedded default recipe)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1, each its own initial weights")
    parser.add_argument("--variant", action="append", help="NAME=key=value,key=value (repeatable); default: a set of six")
    parser.add_argument("--short", action="append", type=float, default=[],
                        help="also a baseline cut to this fraction of its steps (repeatable), e.g. 0.5")
    parser.add_argument("--set", action="append", default=[], help="override for every run, as siftcli --set")
    parser.add_argument("-o", "--output", default=None, help="run folder (default: runs/<name>-variants-<time>)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


    try:
        recipe = load_recipe(args.recipe, args.set)
        variants = [_parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
        for _, sets in variants:  # every variant is checked before anything trains
            load_recipe(args.recipe, args.set + sets)
        if args.seeds < 1:
            raise SiftcliError(f"--seeds must be at least 1, got {args.seeds}")
        seeds = list(range(recipe.seed, recipe.seed + args.seeds))
        bad_short = [f for f in args.short if not 0 < f <= 1]
        if bad_short:
            raise SiftcliError(f"--short {bad_short[0]:g}: expected a fraction of the baseline's steps in (0, 1]")
        workload, run_dir = prepare(recipe, args.output, "-variants")
    except SiftcliError as exc:
        print(f"variants: error: {exc}", file=sys.stderr)
        return 2
    header = ("| seed | run | train s | ratio to baseline | accuracy | Δ pts | time-to-target ratio | "
              "baseline reached target at | kept | s |")
    print(header + "\n|---|---|---|---|---|---|---|---|---|---|", flush=True)
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for seed in seeds:
        base_recipe = recipe.model_copy(update={"seed": seed})
        workload = workload if seed == recipe.seed else build_workload(base_recipe)  # each seed its own weights
        ctx = SeedContext(base_recipe, workload, copy.deepcopy(workload.model.state_dict()))
        base = ctx.runs["baseline"] = run_one(ctx, "baseline", run_dir / f"seed{seed}" / "baseline")
        print(f"| {seed} | baseline | {base['train_seconds']:.1f} | 1.00 | {_f(base['final'].get(base['metric']), '{:.4f}')} "
              "| — | — | — | 100% | — |", flush=True)
        runs: list[tuple[str, dict[str, Any]]] = []
        for frac in args.short:
            runs.append((f"baseline x{frac:g}", run_one(ctx, f"train-less:fraction={frac:g}", run_dir / f"seed{seed}" / f"short-{frac:g}")))
        for name, sets in variants:
            runs.append((name, run_one(ctx, "variant:" + ",".join(sets), run_dir / f"seed{seed}" / name)))
        for name, run in runs:
            p = compare_pair({"baseline": base, "sifted": run}, recipe.eval.target_drop)
            row = {"seed": seed, "run": name, **p, "train_seconds": run["train_seconds"], "final": run["final"]}
            rows.append(row)
            kept = (run.get("keep") or {}).get("achieved")
            print(f"| {seed} | {name} | {run['train_seconds']:.1f} | {_f(p['equal_epoch_ratio'])} | "
                  f"{_f(run['final'].get(run['metric']), '{:.4f}')} | {_f(p['metric_delta'], '{:+.2f}')} | "
                  f"{_f(p['time_to_target_ratio'])} | {_f(p['baseline_target_fraction_of_run'])} of its run | "
                  f"{'100%' if kept is None else f'{100 * kept:.1f}%'} | {_f(p['scoring_cost'])} |", flush=True)
    if len(seeds) > 1:
        print("\n| run | ratio to baseline (mean) | Δ pts (mean ± std) | time-to-target ratio (mean, seeds that reached it) |")
        print("|---|---|---|---|")
        for name in dict.fromkeys(r["run"] for r in rows):
            mine = [r for r in rows if r["run"] == name]
            deltas = [r["metric_delta"] for r in mine if r["metric_delta"] is not None]
            ttts = [r["time_to_target_ratio"] for r in mine if r["time_to_target_ratio"] is not None]
            ratio = statistics.fmean(r["equal_epoch_ratio"] for r in mine)
            delta = f"{statistics.fmean(deltas):+.2f} ± {statistics.stdev(deltas) if len(deltas) > 1 else 0:.2f}" if deltas else "n/a"
            ttt = f"{statistics.fmean(ttts):.2f} ({len(ttts)}/{len(mine)})" if ttts else f"n/a (0/{len(mine)})"
            print(f"| {name} | {ratio:.2f} | {delta} | {ttt} |")
    atomic_write_json(run_dir / "variants.json", {"recipe": recipe.name, "argv": sys.argv[1:], "rows": rows})
    print(f"\n{len(rows)} runs against {len(seeds)} baseline(s) in {(time.perf_counter() - t_start) / 60:.1f} min; "
          f"written to {run_dir / 'variants.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
