"""What warm workers and Hyperband pruning save a sweep, and one study shared by two sweep commands on PostgreSQL,
measured on the default recipe.

The baseline frontier is trained once first and copied into every sweep (so no sweep's wall-clock carries it):

  budget    --trials N with Hyperband pruning (TPE sampler), one warm worker
  replay    the budget sweep's trials, same parameters, every one run to the end in a fresh process each
            (--fresh-processes --no-prune): what a sweep cost before warm workers and pruning
  pareto    --trials N, two objectives (metric, wall-clock), no pruning, one warm worker
  shared    two `siftcli sweep-beta` commands (one warm worker each) on one PostgreSQL study (a server from the
            pgserver package), --trials N between them

and writes the "Sweeps" section of docs/benchmarks.md: each sweep's trials, wall-clock of budget against replay,
start-up per trial, the shared study's trials, duplicates and wall-clock, the frontier and each recommendation.

    python -m benchmarks sweep-cost                 # 8 trials each (about 30 min on 2 CPU cores)
    python -m benchmarks sweep-cost --trials 4 --set epochs=1
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import _cpu, publish
from benchmarks.entry import ROOT  # noqa: E402
from siftcli.recipe.reader import load_recipe
from siftcli.runio import atomic_write_json, read_json
from siftcli.sweep.run import run_frontier, run_sweep
from siftcli.sweep.settings import SweepSettings
from siftcli.sweep.space import parse_space


def _sweep(recipe: Any, settings: Any, out: Path, frontier_from: Path) -> dict[str, Any]:
    """One sweep, or the one a run before left finished in ``out`` (``--reuse``). Its wall-clock is the sweep's own
    (``sweep_seconds``: from the study's opening to the summary, the frontier copied in, not trained)."""
    if (out / "sweep.json").exists() and read_json(out / "sweep.json").get("status") == "completed":
        result = read_json(out / "sweep.json")
    else:
        out.mkdir(parents=True, exist_ok=True)  # the same frontier: trained once, reused by every sweep
        shutil.copy(frontier_from / "frontier.json", out / "frontier.json")
        _, result = run_sweep(recipe, settings, output=str(out), jobs=1)
    result["wall_seconds"] = result["sweep_seconds"]
    return result


def _shared(recipe_path: Path, trials: int, root: Path, frontier_from: Path, sets: list[str]) -> dict[str, Any]:
    """Two sweep commands on one PostgreSQL study, started together; both summaries, their wall-clock, duplicates."""
    import pgserver

    for scratch in ("postgres", "shared-a", "shared-b"):  # a fresh database and folders: nothing from an earlier try
        shutil.rmtree(root / scratch, ignore_errors=True)
    server = pgserver.get_server(root / "postgres", cleanup_mode="stop")
    try:
        folders = [root / "shared-a", root / "shared-b"]
        for f in folders:
            f.mkdir(parents=True, exist_ok=True)
            shutil.copy(frontier_from / "frontier.json", f / "frontier.json")
        t0 = time.perf_counter()
        # two machines of one core each: two torch thread pools on two cores would thrash (measured: 5x slower trials)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        procs = [subprocess.Popen([sys.executable, "-m", "siftcli", "sweep-beta", str(recipe_path), "--trials", str(trials),
                                   "--beta-range", "0.25:8", "--storage", server.get_uri(), "--study", "shared",
                                   "-o", str(f), "--json", "-q", *[a for s in sets for a in ("--set", s)]],
                                  stdout=subprocess.PIPE, text=True, env=env) for f in folders]
        outs = [p.communicate()[0] for p in procs]
        wall = time.perf_counter() - t0
    finally:
        server.cleanup()
    results = [json.loads(o) for o in outs]
    failed = [r["error"] for r in results if "error" in r]
    if failed:
        raise SystemExit(f"sweep-cost: a shared sweep command failed: {failed}")
    for r in results:
        r.pop("sweep_seconds", None), r.pop("run_dir", None), r.pop("plot", None)
    numbers = [t["number"] for t in results[0]["trials"]]
    in_both = [n for n in numbers if all((f / f"trial-{n}" / "trial.json").exists() for f in folders)]
    params = [json.dumps(t["params"], sort_keys=True) for t in results[0]["trials"]]
    return {"summary": results[0], "same": results[0] == results[1], "wall_seconds": wall, "trials": len(numbers),
            "run_by_both": in_both, "repeated_params": len(params) - len(set(params)),
            "per_machine": [sum((f / f"trial-{n}" / "trial.json").exists() for n in numbers) for f in folders]}


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


def _startup(result: dict[str, Any]) -> tuple[float | None, list[float]]:
    """(the first trial's start-up, the later ones')."""
    rows = sorted(result["trials"], key=lambda t: t["number"])
    ups = [t["startup_seconds"] for t in rows if t.get("startup_seconds") is not None]
    return (ups[0] if ups else None), ups[1:]


def report(results: dict[str, dict[str, Any]], argv: list[str], minutes: float) -> list[str]:
    import statistics


    budget, replay, pareto, shared = results["budget"], results["replay"], results["pareto"], results["shared"]
    frontier = budget["frontier"]
    first_warm, later_warm = _startup(budget)
    first_fresh, later_fresh = _startup(replay)
    first_pareto, later_pareto = _startup(pareto)
    ratio = budget["wall_seconds"] / replay["wall_seconds"]
    median = statistics.median
    lines = [
        "## Sweeps: warm workers, Hyperband pruning, the baseline frontier and a shared PostgreSQL study (default recipe)",
        "",
        f"Produced by `{' '.join(['python -m benchmarks sweep-cost', *argv])}` ({minutes:.0f} min"
        + (", the frontier and the first three sweeps read from that folder's earlier run" if "--reuse" in " ".join(argv) else "")
        + f") on {_cpu()}, {time.strftime('%Y-%m-%d')}. One worker per "
        "sweep; accuracy in points; train s = training wall-clock (evaluation excluded); process s = the trial from "
        "hand-over to its answer (start-up, model build, evaluation included); start-up = hand-over to the first "
        "training step's setup (imports, study, recipe, workload).",
        "",
        "Baseline frontier (each fully decayed; trained once before the sweeps, shared by all of them):",
        "",
        "| fraction of the steps | accuracy | train s |", "|---|---|---|",
        *[f"| {p['fraction']:g} | {100 * p['value']:.2f} | {p['train_seconds']:.1f} |" for p in frontier],
        "",
        f"Target: accuracy ≥ {100 * budget['target']:.2f} (the full baseline less `eval.target_drop`).",
        "",
        "| sweep | trials | sweep wall-clock s | start-up, first trial s | start-up, later trials s (median, max) |",
        "|---|---|---|---|---|",
        f"| budget: warm worker, Hyperband | {len(budget['trials'])} | **{budget['wall_seconds']:.0f}** | "
        f"{first_warm or 0:.2f} | {median(later_warm) if later_warm else 0:.2f}, {max(later_warm, default=0):.2f} |",
        f"| replay: the same trials to the end, a fresh process each | {len(replay['trials'])} | **{replay['wall_seconds']:.0f}** | "
        f"{first_fresh or 0:.2f} | {median(later_fresh) if later_fresh else 0:.2f}, {max(later_fresh, default=0):.2f} |",
        f"| pareto: warm worker, no pruning | {len(pareto['trials'])} | {pareto['wall_seconds']:.0f} | "
        f"{first_pareto or 0:.2f} | {median(later_pareto) if later_pareto else 0:.2f}, {max(later_pareto, default=0):.2f} |",
        "",
        f"- **budget / replay wall-clock: {ratio:.2f}** (aim: at most 0.5).",
        "",
        f"### budget mode, Hyperband: {budget['counts']['complete']} complete, {budget['counts']['pruned']} pruned, "
        f"{budget['counts']['fail']} failed",
        "",
        *_rows(budget),
        "",
        f"- recommendation: {budget['recommendation']['text']}",
        "",
        "### replay: the same trials, no pruning, a fresh process each",
        "",
        *_rows(replay),
        "",
        f"- recommendation: {replay['recommendation']['text']}",
        "",
        f"### pareto mode: {pareto['counts']['complete']} complete (no pruning in multi-objective studies)",
        "",
        *_rows(pareto),
        "",
        f"- non-dominated trials: {', '.join(map(str, pareto['front']))}",
        f"- recommendation: {pareto['recommendation']['text']}",
        "",
        "### two sweep commands on one PostgreSQL study",
        "",
        f"Both started at once with `--storage postgresql://… --study shared --trials {shared['trials']}` (one warm worker "
        f"each, one core each: `OMP_NUM_THREADS=1`): **{shared['trials']} trials in {shared['wall_seconds']:.0f} s**, run "
        f"{shared['per_machine'][0]} + {shared['per_machine'][1]} by the two commands; trials run by both: "
        f"{len(shared['run_by_both'])}; parameter sets run twice: {shared['repeated_params']}; the two printed summaries "
        f"{'are identical' if shared['same'] else 'DIFFER'} (all but each machine's own wall-clock).",
        "",
        *_rows(shared["summary"]),
        "",
        f"- recommendation: {shared['summary']['recommendation']['text']}",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--shared-trials", type=int, default=4, help="trials of the two-command PostgreSQL study")
    parser.add_argument("--recipe", default=str(ROOT / "recipes" / "default.yaml"))
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--reuse", help="a sweep-cost folder of an earlier run: its finished sweeps are read, the rest run")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    recipe = load_recipe(args.recipe, args.set)
    root = Path(args.reuse) if args.reuse else ROOT / "runs" / f"sweep-cost-{time.strftime('%Y%m%d-%H%M%S')}"
    space, _ = parse_space(recipe, betas=None, beta_range="0.25:8", params=None)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    frontier = root / "frontier"
    run_frontier(recipe, SweepSettings(), frontier, None, lambda kind, data: None)  # a finished one is read, not rerun
    results["budget"] = _sweep(recipe, SweepSettings(mode="budget", trials=args.trials, space=space, study="budget"),
                               root / "budget", frontier)
    replayed = [t["params"] for t in sorted(results["budget"]["trials"], key=lambda t: t["number"])]
    results["replay"] = _sweep(recipe, SweepSettings(mode="budget", trials=len(replayed), space=space, prune=False,
                                                     enqueue=replayed, study="replay", fresh_processes=True),
                               root / "replay", frontier)
    results["pareto"] = _sweep(recipe, SweepSettings(mode="pareto", trials=args.trials, space=space, study="pareto"),
                               root / "pareto", frontier)
    results["shared"] = _shared(Path(args.recipe), args.shared_trials, root, frontier, args.set)
    atomic_write_json(root / "results.json", results)
    minutes = (time.perf_counter() - started) / 60
    section = report(results, sys.argv[1:], minutes)
    publish(Path(args.out), "## Sweeps:", section, root / "results.json", minutes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
