"""Benchmarks where selection should pay, and where it should not, against the honest opponents.

Data siftcli does not ship (SST-2 and AG News from ../shared/data). For every regime and seed, in one
process and from the same initial weights, it trains five arms:

  baseline     the full schedule
  loss         sifting that ranks the plain loss (the recipe, with sift.score=loss)
  reducible    sifting that ranks loss - reference loss (RHO-LOSS; the recipe, with sift.score=reducible);
               its cross-fitted reference models are trained first, on its clock
  equal-time   a baseline given the reducible run's wall-clock, learning rate fully decayed
  random-keep  the reducible run's kept fraction after its delay, chosen uniformly at random (no selection)

and writes docs/benchmarks.md: per arm the time ratio to the baseline (every cost on the clock),
accuracy mean ± std over seeds and the share of flipped labels among kept samples, and per regime
whether reducible sifting beat the equal-time baseline and the random-keep control by more than two
standard errors. Speed numbers live here, never in tests.

    python scripts/benchmark.py                                  # every regime, 3 seeds (about an hour, 2 CPU cores)
    python scripts/benchmark.py --only noise-agnews-20 --seeds 1 # one regime, one seed
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# name: (recipe in recipes/benchmarks, overrides, what the regime is)
REGIMES: dict[str, tuple[str, list[str], str]] = {
    "noise-agnews-20": ("agnews-noise.yaml", ["data.label_noise=0.2"], "label noise 20%, AG News, from scratch, 8 epochs"),
    "noise-agnews-40": ("agnews-noise.yaml", ["data.label_noise=0.4"], "label noise 40%, AG News, from scratch, 8 epochs"),
    "noise-sst2-20": ("sst2-noise.yaml", ["data.label_noise=0.2"], "label noise 20%, SST-2, from scratch, 8 epochs"),
    "noise-sst2-40": ("sst2-noise.yaml", ["data.label_noise=0.4"], "label noise 40%, SST-2, from scratch, 8 epochs"),
    "long-agnews": ("agnews-long.yaml", [], "many epochs on clean data: AG News, from scratch, 12 epochs"),
    "short-agnews-minilm": ("agnews-minilm.yaml", ["data.max_train_samples=1000", "data.max_eval_samples=2000", "eval.every_steps=40"],
                            "short fine-tune: pretrained MiniLM, AG News, 2 epochs on 1,000 texts (the benchmark recipe, halved)"),
}
ARMS = ("baseline", "loss", "reducible", "equal-time", "random-keep")


def run_regime(name: str, seeds: list[int], extra: list[str], out_root: Path) -> dict[str, Any]:
    """Every arm of one regime over ``seeds``; returns per-seed metrics (brief) by arm."""
    from siftcli.config import load_recipe
    from siftcli.runner import equal_time_recipe, prepare, random_keep_fraction, run_arm

    recipe_file, overrides, _ = REGIMES[name]
    path = ROOT / "recipes" / "benchmarks" / recipe_file
    recipe = load_recipe(path, overrides + extra)
    workload, run_dir, initial = prepare(recipe, str(out_root / name), "")
    per_seed: list[dict[str, Any]] = []
    for seed in seeds:
        r = recipe.model_copy(update={"seed": seed})
        folder = run_dir / f"seed{seed}"
        arms: dict[str, Any] = {}
        arms["baseline"] = run_arm(workload, initial, r, folder / "baseline", "baseline")
        for score in ("loss", "reducible"):
            arms[score] = run_arm(workload, initial, r, folder / score, "sifted", sift=True, score=score)
        arms["equal-time"] = run_arm(workload, initial, equal_time_recipe(r, arms["baseline"], arms["reducible"]),
                                     folder / "equal-time", "equal-time")
        arms["random-keep"] = run_arm(workload, initial, r, folder / "random-keep", "random-keep", sift=True, mode="random",
                                      score="loss", keep_fraction=random_keep_fraction(arms["reducible"]))
        per_seed.append({arm: _brief(m) for arm, m in arms.items()})
        base = arms["baseline"]["final"]["accuracy"]
        print(f"  {name} seed {seed}: " + ", ".join(
            f"{a} {m['final']['accuracy']:.4f} ({m['train_seconds'] / arms['baseline']['train_seconds']:.2f}x)" for a, m in arms.items())
            + f" (baseline {base:.4f})", flush=True)
    return {"recipe": recipe_file, "overrides": overrides + extra, "seeds": seeds, "runs": per_seed}


def _brief(m: dict[str, Any]) -> dict[str, Any]:
    return {k: m.get(k) for k in ("final", "train_seconds", "optimizer_steps", "samples_scored", "samples_from_memory",
                                  "samples_trained", "raw_samples", "phases", "label_noise", "keep", "scoring_cost")}


def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Mean ± std per arm, and reducible minus each opponent with its standard error."""
    runs = result["runs"]
    out: dict[str, Any] = {"arms": {}, "vs": {}}
    for arm in ARMS:
        acc = [100 * r[arm]["final"]["accuracy"] for r in runs]
        ratio = [r[arm]["train_seconds"] / r["baseline"]["train_seconds"] for r in runs]
        noise = [(r[arm].get("label_noise") or {}).get("kept_share_after_delay") or (r[arm].get("label_noise") or {}).get("kept_share")
                 for r in runs]
        out["arms"][arm] = {"acc": _ms(acc), "ratio": _ms(ratio), "noisy": _ms([x for x in noise if x is not None]),
                            "scored": _ms([r[arm]["samples_scored"] / r[arm]["raw_samples"] for r in runs])}
    for rival in ("equal-time", "random-keep", "baseline"):
        diff = [100 * (r["reducible"]["final"]["accuracy"] - r[rival]["final"]["accuracy"]) for r in runs]
        mean, std = _ms(diff)
        se = std / math.sqrt(len(diff)) if len(diff) > 1 else math.inf
        out["vs"][rival] = {"mean": mean, "std": std, "se": se, "beats": len(diff) > 1 and mean > 2 * se, "values": diff}
    return out


def _ms(values: list[float]) -> tuple[float, float] | None:
    if not values:
        return None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _fmt(ms: tuple[float, float] | None, fmt: str = "{:.1f}", pct: bool = False) -> str:
    if ms is None:
        return "—"
    mean, std = (100 * ms[0], 100 * ms[1]) if pct else ms
    return f"{fmt.format(mean)} ± {fmt.format(std)}"


def mean_sd(values: list[float | None], scale: float = 1.0, fmt: str = "{:.2f}") -> str:
    """``mean ± std`` of the values present (``None`` skipped), times ``scale``; one value alone; none: —."""
    got = [v * scale for v in values if v is not None]
    return fmt.format(got[0]) if len(got) == 1 else _fmt(_ms(got), fmt)


def report(results: dict[str, dict[str, Any]], argv: list[str], minutes: float) -> list[str]:
    import torch

    lines = [
        "## Selection regimes: reducible-loss sifting against the honest opponents",
        "",
        f"Produced by `{' '.join(['python scripts/benchmark.py', *argv])}` ({minutes:.0f} min) on {platform.machine()}, "
        f"{os.cpu_count()} CPU cores ({_cpu()}), torch {torch.__version__}, {time.strftime('%Y-%m-%d')}.",
        "Arms per seed, one process, same initial weights and data order: baseline (full schedule); loss (sifting ranks the",
        "loss); reducible (sifting ranks loss − reference loss, cross-fitted references trained first and **on its clock**);",
        "equal-time (a baseline given the reducible run's wall-clock, learning rate fully decayed); random-keep (the reducible",
        "run's kept fraction, uniformly at random). Time = training wall-clock over the same seed's baseline (evaluation",
        "excluded). Accuracy in points, mean ± std over seeds; 'flipped kept' = share of kept samples whose label was flipped.",
        "",
    ]
    for name, result in results.items():
        s = summarise(result)
        sets = " ".join("--set " + o for o in result["overrides"]) or "(no overrides)"
        lines += [f"### {name}: {REGIMES[name][2]}", "",
                  f"`recipes/benchmarks/{result['recipe']}` with `{sets}`, seeds {','.join(map(str, result['seeds']))}, "
                  f"{result.get('minutes', 0):.1f} min.", "",
                  "| arm | time / baseline | accuracy (pts) | flipped kept | scored / raw |", "|---|---|---|---|---|"]
        for arm in ARMS:
            a = s["arms"][arm]
            lines.append(f"| {arm} | {_fmt(a['ratio'], '{:.2f}')} | {_fmt(a['acc'], '{:.2f}')} | {_fmt(a['noisy'], pct=True)} | "
                         f"{_fmt(a['scored'], '{:.2f}')} |")
        lines.append("")
        for rival in ("equal-time", "random-keep", "baseline"):
            v = s["vs"][rival]
            word = "**beats**" if v["beats"] else "does not beat"
            lines.append(f"- reducible − {rival}: {v['mean']:+.2f} ± {v['std']:.2f} pts (2 SE = {2 * v['se']:.2f}): {word} it "
                         f"by more than two standard errors (per seed {', '.join(f'{x:+.2f}' for x in v['values'])})")
        ratio = s["arms"]["reducible"]["ratio"][0]
        met = s["vs"]["equal-time"]["beats"] and s["vs"]["random-keep"]["beats"] and ratio <= 0.6
        lines += [f"- target (beats both by > 2 SE at ≤ 0.6 of the baseline's time): **{'met' if met else 'missed'}** "
                  f"(time ratio {ratio:.2f})", ""]
    return lines


def _cpu() -> str:
    import torch

    bf16 = bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())
    return "AVX512-BF16" if bf16 else "no AVX512-BF16"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=list(REGIMES), help="run just these regimes (repeatable)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value, for every regime")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args()
    os.chdir(ROOT)  # recipes name ../shared/data relative to the repo root
    if not (ROOT.parent / "shared" / "data").is_dir():
        print("benchmark: ../shared/data not found beside the repository", file=sys.stderr)
        return 2
    if args.seeds < 1:
        print(f"benchmark: --seeds must be at least 1, got {args.seeds}", file=sys.stderr)
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from siftcli.errors import SiftcliError
    from siftcli.runio import atomic_write_json

    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    out_root = ROOT / "runs" / "bench"
    try:
        for name in args.only or list(REGIMES):
            t0 = time.perf_counter()
            results[name] = run_regime(name, list(range(args.seeds)), args.set, out_root)
            results[name]["minutes"] = (time.perf_counter() - t0) / 60
            atomic_write_json(out_root / "results.json", results)  # what finished is kept
    except SiftcliError as exc:
        print(f"benchmark: error: {exc}", file=sys.stderr)
        return 2
    minutes = (time.perf_counter() - started) / 60
    section = report(results, sys.argv[1:], minutes)
    write_section(Path(args.out), "## Selection regimes", section)
    print("\n".join(section))
    print(f"wrote {args.out} and {out_root / 'results.json'} ({minutes:.1f} min)")
    return 0


def write_section(out: Path, marker: str, section: list[str]) -> None:
    """Replace the ``## ...`` section that starts with ``marker`` in ``out`` (or append it), atomically."""
    from siftcli.runio import atomic_write_text

    existing = out.read_text() if out.exists() else "# Benchmarks\n"
    head = existing[: existing.index(marker)] if marker in existing else existing.rstrip() + "\n\n"
    rest = existing[existing.index(marker):] if marker in existing else ""
    tail = rest[rest.index("\n## ", 3):] if "\n## " in rest[3:] else ""
    atomic_write_text(out, head + "\n".join(section) + "\n" + tail)


if __name__ == "__main__":
    raise SystemExit(main())
