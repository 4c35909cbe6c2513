"""Benchmarks on data siftcli does not ship: SST-2 and AG News from ../shared/data.

Runs ``compare --equal-time`` on each benchmark recipe (baseline, sifted and equal-time
baseline in one process) and writes docs/benchmarks.md. Speed numbers live here, never in tests.

    python scripts/benchmark.py                      # all four recipes (about 20 min on 2 CPU cores)
    python scripts/benchmark.py --only sst2-minilm   # one
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ["sst2-minilm", "agnews-minilm", "sst2-scratch", "agnews-scratch"]


def _f(x: float | None, fmt: str = "{:.2f}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _spread(result: dict, key: str, single: str, fmt: str = "{:.2f}") -> str:
    """With --seeds N: seed 0's value, then mean ± std over all seeds."""
    summary = (result.get("seeds_summary") or {}).get(key)
    if not summary:
        return single
    return f"{single} (mean {fmt.format(summary['mean'])} ± {summary['std']:.2f}, n={summary['n']})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=RECIPES, help="run just these recipes")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value, for every recipe")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    os.chdir(ROOT)  # recipes name ../shared/data relative to the repo root
    if not (ROOT.parent / "shared" / "data").is_dir():
        print("benchmark: ../shared/data not found beside the repository", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from siftcli.config import load_recipe
    from siftcli.runner import run_compare

    rows = []
    for name in args.only or RECIPES:
        recipe = load_recipe(ROOT / "recipes" / "benchmarks" / f"{name}.yaml", args.set)
        t0 = time.perf_counter()
        run_dir, result = run_compare(recipe, output=str(ROOT / "runs" / f"bench-{name}"), seeds=args.seeds, equal_time=True)
        rows.append((name, recipe, result, time.perf_counter() - t0))
        print(f"{name}: {result['verdict']}", flush=True)

    lines = [
        "# Benchmarks",
        "",
        f"Produced by `{' '.join(['python scripts/benchmark.py', *sys.argv[1:]])}` on {platform.machine()}, "
        f"{os.cpu_count()} CPU cores, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}.",
        "Each row is one `compare --equal-time` run: baseline, sifted and an equal-time baseline (a baseline whose schedule",
        "is sized to the sifted run's wall-clock, learning rate fully decayed), same seed, data order and initial weights.",
        "Times are training wall-clock with evaluation excluded; ratios are sifted over baseline, measured in one process.",
        "Target = baseline final accuracy − 0.5 points; time-to-target is the first evaluation at or above it.",
        "With `--seeds N` the columns show seed 0's run; Δ and the time-to-target ratio add the mean ± std over seeds.",
        "",
        "| recipe | baseline s | sifted s | equal-epoch ratio | baseline acc | sifted acc | Δ pts | equal-time acc |"
        " baseline→target s | sifted→target s | time-to-target ratio | kept (target/achieved) | s | s+a |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, _recipe, result, _ in rows:
        r = result["runs"][0]
        p = result["pairs"][0]
        b, s = r["baseline"], r["sifted"]
        lines.append(
            f"| {name} | {b['train_seconds']:.1f} | {s['train_seconds']:.1f} | {_f(p['equal_epoch_ratio'])} | "
            f"{_f(b['final'].get('accuracy'), '{:.4f}')} | {_f(s['final'].get('accuracy'), '{:.4f}')} | "
            f"{_spread(result, 'metric_delta', _f(p['metric_delta'], '{:+.2f}'), '{:+.2f}')} | "
            f"{_f(p.get('equal_time_metric'), '{:.4f}')} | "
            f"{_f(p['baseline_time_to_target'], '{:.1f}')} | {_f(p['sifted_time_to_target'], '{:.1f}')} | "
            f"{_spread(result, 'time_to_target_ratio', _f(p['time_to_target_ratio']))} | "
            f"{100 * s['keep']['target']:.0f}% / {100 * s['keep']['achieved']:.1f}% | "
            f"{_f(p['scoring_cost'])} | {_f(p['predicted_ratio'])} |"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    existing = out.read_text() if out.exists() else ""
    rerun = {name for name, *_ in rows}
    kept_rows = [ln for ln in existing.splitlines() if ln.startswith("| ") and ln.split(" | ")[0][2:] in set(RECIPES) - rerun]
    kept_verdicts = [ln for ln in existing.splitlines() if ln.startswith("- **") and ln[4:].split("**")[0] in set(RECIPES) - rerun]
    if kept_rows:  # rows of recipes not rerun this time stay, marked as from an earlier invocation
        lines += [ln if ln.endswith("(earlier run) |") else ln + " (earlier run) |" for ln in kept_rows]
    lines += ["", "## Verdicts", ""] + kept_verdicts
    for name, _, result, secs in rows:
        lines.append(f"- **{name}** ({secs / 60:.1f} min for all arms): {result['verdict']}")
    marker = "\n## Notes"
    notes = existing[existing.index(marker):] if marker in existing else ""
    from siftcli.runio import atomic_write_text

    atomic_write_text(out, "\n".join(lines) + "\n" + notes)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
