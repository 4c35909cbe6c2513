"""What Hyperband pruning saves a sweep, measured on the default recipe (issue #11).

Three sweeps of the same recipe on one machine, sharing one baseline frontier (trained once, copied):

  budget    --trials N with Hyperband pruning (TPE sampler)
  replay    the budget sweep's trials, same parameters, every one run to the end (no pruning)
  pareto    --trials N, two objectives (metric, wall-clock), no pruning

and writes the "Sweeps" section of docs/benchmarks.md: each sweep's trials (parameters, state, metric, wall-clock,
where pruned), total trial-process wall-clock of budget against replay, the frontier and each recommendation.

    python -m benchmarks sweep-cost                 # 8 trials each (about 40 min on 2 CPU cores)
    python -m benchmarks sweep-cost --trials 4 --set epochs=1
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import _cpu, publish
from benchmarks.harness import ROOT  # noqa: E402


def _sweep(recipe: Any, settings: Any, out: Path, frontier_from: Path | None) -> dict[str, Any]:
    from siftcli.sweep import run_sweep

    if frontier_from is not None:  # the same frontier: trained once, reused by every sweep
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(frontier_from / "frontier.json", out / "frontier.json")
    t0 = time.perf_counter()
    _, result = run_sweep(recipe, settings, output=str(out), jobs=1)
    result["wall_seconds"] = time.perf_counter() - t0
    return result


def _rows(result: dict[str, Any]) -> list[str]:
    lines = ["| trial | parameters | state | accuracy | train s | process s |", "|---|---|---|---|---|---|"]
    for t in sorted(result["trials"], key=lambda t: t["number"]):
        params = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in t["params"].items())
        state = f"pruned at raw batch {t['pruned_at_raw_batch']}" if t["state"] == "pruned" else t["state"]
        mark = " (front)" if t["number"] in result["front"] else ""
        value = "—" if t["value"] is None else f"{100 * t['value']:.2f}"
        train = "—" if t["train_seconds"] is None else f"{t['train_seconds']:.1f}"
        lines.append(f"| {t['number']}{mark} | {params} | {state} | {value} | {train} | {t['process_seconds'] or 0:.1f} |")
    return lines


def report(results: dict[str, dict[str, Any]], argv: list[str], minutes: float) -> list[str]:
    import torch

    budget, replay, pareto = results["budget"], results["replay"], results["pareto"]
    frontier = budget["frontier"]
    lines = [
        "## Sweeps: Hyperband pruning and the baseline frontier (default recipe)",
        "",
        f"Produced by `{' '.join(['python -m benchmarks sweep-cost', *argv])}` ({minutes:.0f} min) on {platform.machine()}, "
        f"{os.cpu_count()} CPU cores ({_cpu()}), torch {torch.__version__}, {time.strftime('%Y-%m-%d')}. One trial process at "
        "a time; accuracy in points; train s = training wall-clock (evaluation excluded); process s = the trial process "
        "end to end (start-up, model build, evaluation included).",
        "",
        "Baseline frontier (each fully decayed; trained once, shared by the three sweeps):",
        "",
        "| fraction of the steps | accuracy | train s |", "|---|---|---|",
        *[f"| {p['fraction']:g} | {100 * p['value']:.2f} | {p['train_seconds']:.1f} |" for p in frontier],
        "",
        f"Target: accuracy ≥ {100 * budget['target']:.2f} (the full baseline less `eval.target_drop`).",
        "",
        f"### budget mode, Hyperband: {budget['counts']['complete']} complete, {budget['counts']['pruned']} pruned, "
        f"{budget['counts']['fail']} failed",
        "",
        *_rows(budget),
        "",
        f"- trial processes: **{budget['trial_process_seconds']:.0f} s** with pruning against **{replay['trial_process_seconds']:.0f} s** "
        f"for the same trials run to the end (replay below): {budget['trial_process_seconds'] / replay['trial_process_seconds']:.2f}x",
        f"- recommendation: {budget['recommendation']['text']}",
        "",
        "### replay: the same trials, no pruning",
        "",
        *_rows(replay),
        "",
        f"- recommendation: {replay['recommendation']['text']}",
        "",
        f"### pareto mode: {pareto['counts']['complete']} complete (no pruning in multi-objective studies)",
        "",
        *_rows(pareto),
        "",
        f"- trial processes {pareto['trial_process_seconds']:.0f} s; non-dominated trials: {', '.join(map(str, pareto['front']))}",
        f"- recommendation: {pareto['recommendation']['text']}",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "default.yaml"))
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from siftcli.config import load_recipe
    from siftcli.runio import atomic_write_json
    from siftcli.sweep import SweepSettings, parse_space

    recipe = load_recipe(args.recipe, args.set)
    root = ROOT / "runs" / f"sweep-cost-{time.strftime('%Y%m%d-%H%M%S')}"
    space, _ = parse_space(recipe, betas=None, beta_range="0.25:8", params=None)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    results["budget"] = _sweep(recipe, SweepSettings(mode="budget", trials=args.trials, space=space, study="budget"),
                               root / "budget", None)
    replayed = [t["params"] for t in sorted(results["budget"]["trials"], key=lambda t: t["number"])]
    results["replay"] = _sweep(recipe, SweepSettings(mode="budget", trials=len(replayed), space=space, prune=False,
                                                     enqueue=replayed, study="replay"), root / "replay", root / "budget")
    results["pareto"] = _sweep(recipe, SweepSettings(mode="pareto", trials=args.trials, space=space, study="pareto"),
                               root / "pareto", root / "budget")
    atomic_write_json(root / "results.json", results)
    minutes = (time.perf_counter() - started) / 60
    section = report(results, sys.argv[1:], minutes)
    publish(Path(args.out), "## Sweeps:", section, root / "results.json", minutes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
