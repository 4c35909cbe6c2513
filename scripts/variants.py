"""Tune sifting settings against one baseline: the numbers behind docs/tuning.md and the default recipe.

Per seed it trains the baseline once, then every variant (recipe overrides, as ``--set`` takes them)
and every short baseline (the baseline's schedule cut to a fraction of its steps, learning rate fully
decayed: the honest opponent of a variant that saves that much time), all from the same initial
weights in one process, and prints one markdown row per run. Speed numbers live here, never in tests.

    python scripts/variants.py                                   # default recipe, the variants below
    python scripts/variants.py recipes/benchmarks/sst2-minilm.yaml --seeds 0,1 \\
        --variant "b2=sift.beta=2,sift.sift_delay_fraction=0.05" --short 0.5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_VARIANTS = [
    "default=",
    "calibrated=sift.mode=calibrated",
    "delay5=sift.sift_delay=0,sift.sift_delay_fraction=0.05,sift.mode=calibrated",
    "beta2-delay5=sift.beta=2,sift.sift_delay=0,sift.sift_delay_fraction=0.05,sift.mode=calibrated",
    "beta3-delay5=sift.beta=3,sift.sift_delay=0,sift.sift_delay_fraction=0.05,sift.mode=calibrated",
    "fp32-scoring=sift.precision=fp32",
]


def _parse_variant(text: str) -> tuple[str, list[str]]:
    from siftcli.errors import SiftcliError

    name, _, sets = text.partition("=")
    if not name:
        raise SiftcliError(f"--variant {text!r}: expected NAME=key=value,key=value")
    return name, [s for s in _split(sets) if s]


def _parse_seeds(text: str) -> list[int]:
    from siftcli.errors import SiftcliError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        seeds = []
    if not seeds:
        raise SiftcliError(f"--seeds {text!r}: expected comma-separated integers such as 0,1,2")
    return seeds


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipe", nargs="?", help="recipe YAML (default: the embedded default recipe)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds, e.g. 0,1,2")
    parser.add_argument("--variant", action="append", help="NAME=key=value,key=value (repeatable); default: a set of six")
    parser.add_argument("--short", action="append", type=float, default=[],
                        help="also a baseline cut to this fraction of its steps (repeatable), e.g. 0.5")
    parser.add_argument("--set", action="append", default=[], help="override for every run, as siftcli --set")
    parser.add_argument("-o", "--output", default=None, help="run folder (default: runs/<name>-variants-<time>)")
    args = parser.parse_args()
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from siftcli.analysis import compare_pair
    from siftcli.config import load_recipe
    from siftcli.errors import SiftcliError
    from siftcli.runio import atomic_write_json
    from siftcli.runner import prepare, run_arm

    try:
        recipe = load_recipe(args.recipe, args.set)
        variants = [_parse_variant(v) for v in (args.variant or DEFAULT_VARIANTS)]
        variant_recipes = {name: load_recipe(args.recipe, args.set + sets) for name, sets in variants}
        seeds = _parse_seeds(args.seeds)
        bad_short = [f for f in args.short if not 0 < f <= 1]
        if bad_short:
            raise SiftcliError(f"--short {bad_short[0]:g}: expected a fraction of the baseline's steps in (0, 1]")
        workload, run_dir, initial = prepare(recipe, args.output, "-variants")
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
        base = run_arm(workload, initial, base_recipe, run_dir / f"seed{seed}" / "baseline", "baseline")
        print(f"| {seed} | baseline | {base['train_seconds']:.1f} | 1.00 | {_f(base['final'].get(base['metric']), '{:.4f}')} "
              "| — | — | — | 100% | — |", flush=True)
        runs: list[tuple[str, dict[str, Any]]] = []
        for frac in args.short:
            steps = max(1, int(round(frac * base["optimizer_steps"])))
            short = base_recipe.model_copy(update={"max_steps": steps})
            runs.append((f"baseline x{frac:g}", run_arm(workload, initial, short, run_dir / f"seed{seed}" / f"short-{frac:g}", "baseline")))
        for name, _ in variants:
            vr = variant_recipes[name].model_copy(update={"seed": seed})
            runs.append((name, run_arm(workload, initial, vr, run_dir / f"seed{seed}" / name,
                                       "sifted" if vr.sift.enabled else "baseline", sift=vr.sift.enabled)))
        for name, run in runs:
            p = compare_pair(base, run, recipe.eval.target_drop)
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
