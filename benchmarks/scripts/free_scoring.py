"""Scoring that costs nothing: fresh vs memory scoring vs InfoBatch's rule, against the honest opponents.

For every workload and seed, in one process, from the same initial weights and data order:

  baseline     the full schedule
  fresh        the recipe's sifting (probabilistic, beta 1): a scoring forward over every raw batch
  memory       the same with ``scoring: memory``: remembered losses (mostly the training forward's) decide
               samples without a forward, and a raw batch it can decide whole is decided at the sampler
  infobatch    InfoBatch's unbiased rule from memory (prune_fraction 0.5 below the mean, weights 1/(1-r)),
               the first epoch trained in full (it fills the memory for free), anneal_fraction 0.125, never rescored
  auto         memory scoring with ``sift_delay: auto`` (only its start step and cost are the point)

and, for fresh, memory and infobatch, an equal-time baseline (that arm's wall-clock, learning rate fully
decayed) and a random-keep control (that arm's kept fraction after its delay, same delay and anneal).
It writes the "Scoring that costs nothing" section of docs/benchmarks.md: per arm the time ratio to the
baseline, the kept fraction a, the measured scoring cost s, the predicted ratio, the share of raw samples
scored by a forward after the first epoch, and accuracy mean ± std over seeds, with each sifted arm minus
its opponents (two standard errors).

    python -m benchmarks free-scoring                         # both workloads, 3 seeds (about an hour, 2 CPU cores)
    python -m benchmarks free-scoring --only long-agnews --seeds 1
"""

from __future__ import annotations

import argparse
import copy
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import _cpu, _fmt, _ms, publish
from benchmarks.entry import ROOT  # noqa: E402
from siftcli.arms.context import SeedContext
from siftcli.arms.run import run_one
from siftcli.recipe.reader import load_recipe
from siftcli.runio import atomic_write_json
from siftcli.workload.build import build_workload

FAST_EVAL = ["eval.per_epoch=false", "eval.every_steps=100"]
# name: (recipe, overrides, what it is)
WORKLOADS: dict[str, tuple[str, list[str], str]] = {
    "long-agnews": ("recipes/benchmarks/agnews-long.yaml",
                    ["sift.score=loss", "sift.mode=probabilistic", "sift.beta=1", "sift.sift_delay_fraction=0.1", *FAST_EVAL],
                    "10 epochs: a 2-layer BERT from scratch on 3,000 AG News texts, 2,000 test texts"),
    "default": ("recipes/default.yaml", FAST_EVAL, "the default recipe: MiniLM, 2 epochs on ~5,650 VADER words"),
}
SIFTED = ("fresh", "memory", "infobatch")
ARMS = ("baseline", *SIFTED, "auto")


def arm_changes(arm: str, batches_per_epoch: int) -> dict[str, Any]:
    """The engine settings that make each arm (on top of the recipe's ``sift`` section)."""
    return {
        "fresh": {"scoring": "fresh"},
        "memory": {"scoring": "memory"},
        "infobatch": {"mode": "infobatch", "scoring": "memory", "memory_max_age": None, "prune_fraction": 0.5,
                      "anneal_fraction": 0.125, "sift_delay": batches_per_epoch},
        "auto": {"scoring": "memory", "sift_delay": "auto"},
    }[arm]


def run_workload(name: str, seeds: list[int], out_root: Path) -> dict[str, Any]:
    import yaml


    path, overrides, _ = WORKLOADS[name]
    recipe = load_recipe(ROOT / path, overrides)
    run_dir = out_root / name
    runs: list[dict[str, Any]] = []
    for seed in seeds:
        r = recipe.model_copy(update={"seed": seed})
        workload = build_workload(r)  # each seed its own initial weights
        per_epoch = math.ceil(len(workload.train_data) / recipe.batch_size)
        ctx = SeedContext(r, workload, copy.deepcopy(workload.model.state_dict()))
        folder = run_dir / f"seed{seed}"
        m: dict[str, Any] = {"baseline": run_one(ctx, "baseline", folder / "baseline")}
        ctx.runs["baseline"] = m["baseline"]
        names = {arm: "sifted:" + ",".join(f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
                                           for k, v in arm_changes(arm, per_epoch).items()) for arm in (*SIFTED, "auto")}
        for arm in (*SIFTED, "auto"):
            m[arm] = ctx.runs[names[arm]] = run_one(ctx, names[arm], folder / arm)
        for arm in SIFTED:  # each variant's own opponents: its clock, its kept fraction, its delay and anneal
            ctx.subject = names[arm]
            m[f"{arm}/equal-time"] = run_one(ctx, "equal-time", folder / f"{arm}-equal-time")
            m[f"{arm}/random-keep"] = run_one(ctx, "random-keep", folder / f"{arm}-random-keep")
        runs.append({k: _brief(v) for k, v in m.items()})
        base = m["baseline"]
        print(f"  {name} seed {seed}: " + ", ".join(
            f"{k} {v['final']['accuracy']:.4f} ({v['train_seconds'] / base['train_seconds']:.2f}x)" for k, v in m.items()), flush=True)
    return {"recipe": path, "overrides": overrides, "seeds": seeds, "runs": runs}


def _brief(m: dict[str, Any]) -> dict[str, Any]:
    keep = m.get("keep") or {}
    return {"final": m["final"], "train_seconds": m["train_seconds"], "raw_samples": m["raw_samples"],
            "samples_scored": m["samples_scored"], "samples_from_memory": m["samples_from_memory"],
            "samples_trained": m["samples_trained"], "scoring_cost": m["scoring_cost"], "predicted_ratio": m["predicted_ratio"],
            "kept": keep.get("achieved"), "scored_after_first_epoch": keep.get("scored_after_first_epoch"),
            "sift_started_at": keep.get("sift_started_at"), "anneal_started_at": keep.get("anneal_started_at"),
            "phases": m["phases"]}


def _diff(runs: list[dict[str, Any]], a: str, b: str) -> dict[str, Any]:
    d = [100 * (r[a]["final"]["accuracy"] - r[b]["final"]["accuracy"]) for r in runs]
    mean, std = _ms(d)
    se = std / math.sqrt(len(d)) if len(d) > 1 else math.inf
    return {"mean": mean, "std": std, "se": se, "beats": len(d) > 1 and mean > 2 * se, "values": d}


def _num(values: list[Any]) -> tuple[float, float] | None:
    return _ms([float(v) for v in values if v is not None and math.isfinite(float(v))])


def report(results: dict[str, dict[str, Any]], argv: list[str], minutes: float) -> list[str]:
    import torch

    lines = [
        "## Scoring that costs nothing: fresh vs memory scoring vs InfoBatch's rule",
        "",
        f"Produced by `{' '.join(['python -m benchmarks free-scoring', *argv])}` ({minutes:.0f} min) on {platform.machine()}, "
        f"{os.cpu_count()} CPU cores ({_cpu()}), torch {torch.__version__}, {time.strftime('%Y-%m-%d')}.",
        "Arms per seed in one process, same initial weights and data order (see the script's docstring). time = training",
        "wall-clock over the same seed's baseline (evaluation excluded); a = kept / raw samples over the run; s = scoring",
        "seconds per scored sample over training seconds per trained sample; predicted = scored/raw · s + a; scored after",
        "epoch 1 = raw samples that went through a scoring forward after the first epoch, over raw samples then.",
        "",
    ]
    for name, res in results.items():
        runs = res["runs"]
        lines += [f"### {name}: {WORKLOADS[name][2]}", "",
                  f"`{res['recipe']}` with `{' '.join('--set ' + o for o in res['overrides'])}`, seeds "
                  f"{','.join(map(str, res['seeds']))}, {res.get('minutes', 0):.1f} min.", "",
                  "| arm | time / baseline | a | s | predicted | scored after epoch 1 | accuracy (pts) | started at raw batch |",
                  "|---|---|---|---|---|---|---|---|"]
        keys = [k for k in runs[0] if k in ARMS or "/" in k]
        for k in sorted(keys, key=lambda k: (k.split("/")[0] not in ("baseline",), list(runs[0]).index(k))):
            ratio = _ms([r[k]["train_seconds"] / r["baseline"]["train_seconds"] for r in runs])
            kept = _num([r[k]["kept"] for r in runs]) if k != "baseline" else None
            started = [r[k]["sift_started_at"] for r in runs]
            s_cost = _num([r[k]["scoring_cost"] for r in runs])
            lines.append(f"| {k} | {_fmt(ratio, '{:.2f}')} | {_fmt(kept, '{:.2f}')} | {_fmt(s_cost, '{:.2f}')} | "
                         f"{_fmt(_num([r[k]['predicted_ratio'] for r in runs]), '{:.2f}')} | "
                         f"{_fmt(_num([r[k]['scored_after_first_epoch'] for r in runs]), '{:.2f}')} | "
                         f"{_fmt(_ms([100 * r[k]['final']['accuracy'] for r in runs]), '{:.2f}')} | "
                         f"{', '.join('never' if s is None else str(s) for s in started) if k in SIFTED + ('auto',) else ''} |")
        lines.append("")
        for arm in SIFTED:
            ratio = statistics_mean([r[arm]["train_seconds"] / r["baseline"]["train_seconds"] for r in runs])
            kept = statistics_mean([r[arm]["kept"] for r in runs])
            parts = []
            for rival in ("baseline", "equal-time", "random-keep"):
                v = _diff(runs, arm, rival if rival == "baseline" else f"{arm}/{rival}")
                parts.append(f"− {rival} {v['mean']:+.2f} ± {v['std']:.2f} (2 SE {2 * v['se']:.2f}{', **beats**' if v['beats'] else ''})")
            lines.append(f"- {arm}: time {ratio:.2f} vs a {kept:.2f} (gap {ratio - kept:+.2f}); accuracy " + "; ".join(parts))
        lines.append("")
    return lines


def statistics_mean(values: list[float]) -> float:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(WORKLOADS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    parser.add_argument("--report-only", action="store_true", help="rewrite the section from runs/free-scoring/results.json")
    args = parser.parse_args(argv)
    os.chdir(ROOT)
    if not (ROOT.parent / "shared" / "data").is_dir():
        print("free_scoring: ../shared/data not found beside the repository", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    started = time.perf_counter()
    out_root = ROOT / "runs" / "free-scoring"
    results: dict[str, dict[str, Any]] = {}
    if args.report_only:
        import json

        results = json.loads((out_root / "results.json").read_text())
    for name in [] if args.report_only else args.only or list(WORKLOADS):
        t0 = time.perf_counter()
        results[name] = run_workload(name, list(range(args.seeds)), out_root)
        results[name]["minutes"] = (time.perf_counter() - t0) / 60
        atomic_write_json(out_root / "results.json", results)  # what finished is kept
    minutes = sum(r.get("minutes", 0) for r in results.values()) if args.report_only else (time.perf_counter() - started) / 60
    argv = [a for a in sys.argv[1:] if a != "--report-only"]
    section = report(results, argv, minutes)
    publish(Path(args.out), "## Scoring that costs nothing", section, out_root / "results.json", minutes)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
