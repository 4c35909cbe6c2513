"""The harness: entries, one results format, one report writer, statistics done once.

An :class:`Entry` is a workload (a recipe and overrides, and a function that makes its data where the data is
derived from ``../shared/data``) × a list of arms. Running it runs every seed through
:func:`siftcli.arms.run.run_arms`, saves ``runs/bench/NAME/results.json`` after every seed (what finished is kept) and
writes the entry's section of ``docs/benchmarks.md``. Legacy script entries (:data:`SCRIPTS`) keep their own
drivers but are reached the same way, with ``--seeds`` a whole number everywhere.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import entries
from benchmarks.entry import DOC, OUT, ROOT, Entry  # noqa: F401  (Entry, ROOT: public here too)
from siftcli.analysis.stats import paired
from siftcli.arms.run import run_arms
from siftcli.errors import SiftcliError
from siftcli.recipe.reader import load_recipe
from siftcli.runio import atomic_write_json, atomic_write_text, read_json
from siftcli.sift.stats import add_counts
from siftcli.tasks import metric
from siftcli.training.record import brief, kept_fraction, paid_seconds


def _registry() -> dict[str, Entry]:
    return {e.name: e for e in entries.ENTRIES}


#: Older drivers, run through this harness (``python -m benchmarks NAME``), each writing its own section.
SCRIPTS = {"free-scoring": "benchmarks.scripts.free_scoring",
           "variants": "benchmarks.scripts.variants", "sweep-cost": "benchmarks.scripts.sweep_cost",
           "scale-out": "benchmarks.scripts.scale_out", "compile-cost": "benchmarks.scripts.compile_cost",
           "scoring-precision": "benchmarks.scripts.scoring_precision", "gpu": "benchmarks.scripts.gpu_benchmark",
           "gpu-step": "benchmarks.scripts.gpu_step",
           "overhead": "benchmarks.scripts.overhead", "library-shapes": "benchmarks.scripts.library_shapes",
           "plan-regimes": "benchmarks.scripts.plan_regimes", "curation": "benchmarks.scripts.curation",
           "sift-overhead": "benchmarks.scripts.sift_overhead", "plan-accuracy": "benchmarks.scripts.plan_accuracy",
           "wsd-forks": "benchmarks.scripts.wsd_forks", "confirm-replay": "benchmarks.scripts.confirm_replay",
           "truth-check": "benchmarks.scripts.truth_check"}


def run_entry(entry: Entry, seeds: int, sets: list[str], *, fresh: bool = False) -> dict[str, Any]:
    """Every seed of ``entry``; returns (and saves after each seed) the results document.

    An interrupted run resumes: the seeds already in ``results.json`` for the same recipe, overrides and arms are kept
    and the run goes on from the next one (a seed cut short runs again whole, since its arms share one start).
    ``fresh`` discards them. Results from another machine are never mixed in: a seed's ratios compare only within it,
    but the report names one machine."""
    if entry.prepare is not None:
        entry.prepare()
    recipe = load_recipe(ROOT / entry.recipe, list(entry.overrides) + sets)
    folder = OUT / entry.name
    folder.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"entry": entry.name, "recipe": entry.recipe, "overrides": list(entry.overrides) + sets,
                              "arms": list(entry.arms), "subjects": list(entry.subjects), "seeds": [], "runs": [],
                              "machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M")}
    earlier = 0.0
    if not fresh and (folder / "results.json").exists():
        result, earlier = _resumable(folder / "results.json", result)
    started = time.perf_counter()
    for seed in range(recipe.seed, recipe.seed + seeds):
        if seed in result["seeds"]:
            continue
        t0 = time.perf_counter()
        runs = run_arms(recipe, list(entry.arms), [seed], folder / f"seed{seed}", subject=entry.subjects[0])[0]
        result["seeds"].append(seed)
        result["runs"].append({arm: brief(m) for arm, m in runs.items()})
        result["minutes"] = earlier + (time.perf_counter() - started) / 60
        atomic_write_json(folder / "results.json", result)
        print(f"{entry.name} seed {seed} ({(time.perf_counter() - t0) / 60:.1f} min): " + ", ".join(
            f"{arm} {_metric(m):.4f} ({m['train_seconds'] / runs['baseline']['train_seconds']:.2f}x)" for arm, m in runs.items()),
            flush=True)
    return result


#: What must match for a saved results document to be continued rather than started again.
_SAME_RUN = ("entry", "recipe", "overrides", "arms", "subjects", "machine")


def _resumable(path: Path, new: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """The saved document to continue and its minutes so far, or ``new`` if nothing in it can be kept."""
    saved = read_json(path)  # unreadable: one line from read_json
    if not isinstance(saved, dict):
        raise SiftcliError(f"{path}: not a results document the harness wrote; move it away or pass --fresh")
    if not saved.get("seeds"):
        return new, 0.0
    for key in _SAME_RUN:
        if saved.get(key) != new[key]:
            raise SiftcliError(f"{path}: its {key} is {saved.get(key)!r}, this run's {new[key]!r}; its {len(saved['seeds'])} "
                               "finished seed(s) cannot be continued: pass --fresh to start over (they are replaced)")
    print(f"{new['entry']}: resuming after seed(s) {', '.join(map(str, saved['seeds']))} (from {path})", flush=True)
    return saved, float(saved.get("minutes", 0.0))


def _metric(m: dict[str, Any]) -> float:
    return (m.get("final") or {}).get(m["metric"], math.nan)


def machine() -> str:
    import torch

    bf16 = bool(getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)())
    return (f"{platform.machine()}, {os.cpu_count()} CPU cores ({_cpu_model()}; {'AVX512-BF16' if bf16 else 'no AVX512-BF16'}), "
            f"torch {torch.__version__}")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# -- the report ------------------------------------------------------------------------------------

def summarise(result: dict[str, Any]) -> dict[str, Any]:
    """Per arm: time over the full baseline as run and with the reference paid in full, the metric, group shares;
    per subject: the paired difference against every other arm (:func:`siftcli.analysis.stats.paired`)."""
    runs = result["runs"]
    m = metric(runs[0]["baseline"]["metric"])
    sign = 1 if m.higher_is_better else -1
    arms: dict[str, Any] = {}
    for arm in runs[0]:
        got = [r[arm] for r in runs if arm in r]
        base = [r["baseline"]["train_seconds"] for r in runs if arm in r]
        groups = [((g.get("groups") or {}).get(result.get("target_group") or "", {}) or {}).get("share_of_kept") for g in got]
        arms[arm] = {
            "ratio": _ms([g["train_seconds"] / b for g, b in zip(got, base)]),
            "paid_ratio": _ms([paid_seconds(g) / b for g, b in zip(got, base)]),
            "metric": _ms([m.scale * _metric(g) for g in got]),
            "kept": _ms([kept_fraction(g) for g in got]),
            "target_share": _ms([x for x in groups if x is not None]),
            "reference": _ms([(g.get("reference") or {}).get("build_seconds") / b for g, b in zip(got, base) if g.get("reference")]),
            "teacher": _ms([g["samples_teacher"] for g in got if g.get("samples_teacher") is not None]),
            "ages": _ages([g.get("keep") or {} for g in got]),
            "overlap": _ms([statistics.fmean(k) for k in ((g.get("keep") or {}).get("kept_overlap") for g in got) if k]),
        }
    vs: dict[str, dict[str, Any]] = {}
    for subject in result["subjects"]:
        vs[subject] = {}
        for arm in runs[0]:
            if arm == subject:
                continue
            diffs = [sign * m.scale * (_metric(r[subject]) - _metric(r[arm])) for r in runs if subject in r and arm in r]
            vs[subject][arm] = paired(diffs)
    return {"arms": arms, "vs": vs, "unit": m.unit, "metric": m.name}


def _ages(keeps: list[dict[str, Any]]) -> list[float] | None:
    """Share of ranked decisions made by a loss 0, 1, 2, ... epochs old (the last bucket: that or older), over seeds;
    the last entry: decided by no loss yet."""
    total = functools.reduce(add_counts, (k.get("score_ages") or [] for k in keeps), [])
    unknown = sum(k.get("score_unknown") or 0 for k in keeps)
    n = sum(total) + unknown
    return [c / n for c in total] + [unknown / n] if n else None


def _ms(values: list[float]) -> tuple[float, float] | None:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _fmt(ms: tuple[float, float] | None, fmt: str = "{:.2f}", scale: float = 1.0) -> str:
    if ms is None:
        return "—"
    return f"{fmt.format(ms[0] * scale)} ± {fmt.format(ms[1] * scale)}"


def report(entry: Entry, result: dict[str, Any]) -> list[str]:
    """The entry's section of docs/benchmarks.md, every number from ``result``."""
    result = {**result, "target_group": entry.extra.get("target_group")}
    s = summarise(result)
    n = len(result["runs"])
    cmd = f"python -m benchmarks {entry.name}" + (f" --seeds {n}" if n != entry.seeds else "")
    sets = " ".join(f"--set {o}" for o in result["overrides"] if o not in entry.overrides)
    lines = [f"## {entry.title}", "", *([entry.about, ""] if entry.about else []),
             f"Produced by `{cmd}{' ' + sets if sets else ''}` ({result.get('minutes', 0):.0f} min, {n} seeds, "
             f"{result['started']}) on {result['machine']}. Recipe `{entry.recipe}`"
             + (f" with `{' '.join(entry.overrides)}`" if entry.overrides else "") + ". "
             "Each seed: its own initial weights; every arm of a seed the same weights and data order. Time = training "
             "wall-clock over the same seed's full baseline (evaluation excluded), *as run* (a reference found cached costs "
             "only its read) and *reference paid* (its full build cost added: the honest figure for one run).", ""]
    share_col = " | target share of kept" if entry.extra.get("target_group") else ""
    lines += [f"| arm | time, as run | time, reference paid | {s['metric']} ({s['unit'].strip() or 'value'}) | kept{share_col} |",
              "|---|---|---|---|---|" + ("---|" if share_col else "")]
    for arm, a in s["arms"].items():
        share = f" | {_fmt(a['target_share'], '{:.0f}%', 100)}" if share_col else ""
        lines.append(f"| {arm} | {_fmt(a['ratio'])} | {_fmt(a['paid_ratio'])} | {_fmt(a['metric'])} | "
                     f"{_fmt(a['kept'])}{share} |")
    lines.append("")
    teacher = [(arm, a["teacher"]) for arm, a in s["arms"].items() if a["teacher"] is not None]
    if teacher:
        lines += ["Teacher forwards per run (samples; a cached teacher runs once per sample): "
                  + "; ".join(f"{arm} {_fmt(t, '{:,.0f}')}" for arm, t in teacher) + ".", ""]
    memory = [(arm, a) for arm, a in s["arms"].items() if a["ages"] and (a["overlap"] or len(a["ages"]) > 2)]
    if memory:
        lines += ["How old the scores behind ranked decisions were (share of decisions by a loss 0, 1, 2, ... epochs old, "
                  "the last bucket that or older; then by none yet), and the mean Jaccard overlap of consecutive epochs' "
                  "kept sets:", ""]
        for arm, a in memory:
            ages = ", ".join(f"{i}: {100 * v:.0f}%" for i, v in enumerate(a["ages"][:-1]))
            lines.append(f"- {arm}: {ages}; none yet: {100 * a['ages'][-1]:.0f}%; kept-set overlap "
                         f"{_fmt(a['overlap'])}")
        lines.append("")
    for subject, rivals in s["vs"].items():
        lines.append(f"Paired differences, {subject} − each arm ({s['unit'].strip() or 'metric'}; mean ± SE over {n} seeds; "
                     "'beats' = 95% Student-t interval above zero and beyond 2 SE):")
        lines.append("")
        for arm, v in rivals.items():
            se = "n/a" if not math.isfinite(v["se"]) else f"{v['se']:.2f}"
            lines.append(f"- − {arm}: {v['mean']:+.2f} ± {se} → **{v['status']}** (per seed "
                         f"{', '.join(f'{x:+.2f}' for x in v['values'])})")
        ratio = s["arms"][subject]["paid_ratio"][0]
        missing = [o for o in entry.opponents if o not in rivals]
        met = all(rivals[o]["status"] == "beats" for o in entry.opponents if o in rivals) and ratio <= entry.aim_ratio
        word = f"not measured** (missing {', '.join(missing)}; " if missing else f"{'met' if met else 'missed'}** ("
        lines += [f"- aim (beats {', '.join(entry.opponents)} at ≤ {entry.aim_ratio} of the full baseline's time, reference paid): "
                  f"**{word}time {ratio:.2f})", ""]
    return lines


def write_section(out: Path, title: str, section: list[str]) -> None:
    """Replace the ``## title`` section of ``out`` (or append it), atomically; other sections stay as they are."""
    marker = f"## {title}"
    existing = out.read_text() if out.exists() else "# Benchmarks\n"
    if marker in existing:
        head = existing[: existing.index(marker)]
        rest = existing[existing.index(marker) + len(marker):]
        tail = rest[rest.index("\n## ") + 1:] if "\n## " in rest else ""
    else:
        head, tail = existing.rstrip() + "\n\n", ""
    body = "\n".join(section).rstrip() + "\n"
    atomic_write_text(out, head + body + ("\n" + tail if tail else ""))


def main(argv: list[str]) -> int:
    registry = _registry()
    if argv and argv[0] in SCRIPTS and ("-h" in argv or "--help" in argv):  # a driver's help lists its own options
        sys.argv = [f"benchmarks {argv[0]}", "--help"]
        return int(importlib.import_module(SCRIPTS[argv[0]]).main(["--help"]) or 0)
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("name", nargs="?", help="an entry (none: list them)")
    parser.add_argument("--seeds", type=int, default=None, help="seeds (default: the entry's, at least 5 for a claim)")
    parser.add_argument("--report-only", action="store_true", help="re-render the section from runs/bench/NAME/results.json")
    parser.add_argument("--set", action="append", default=[], help="recipe override key=value")
    parser.add_argument("--fresh", action="store_true", help="start over, replacing the seeds an earlier run finished")
    parser.add_argument("--out", default=str(DOC))
    args, rest = parser.parse_known_args(argv)
    if args.name is None:
        for e in registry.values():
            print(f"{e.name:24} {e.title} ({', '.join(e.arms)}; {e.seeds} seeds)")
        for name, module in SCRIPTS.items():
            print(f"{name:24} driver {module}")
        return 0
    if args.name in SCRIPTS:
        module = importlib.import_module(SCRIPTS[args.name])
        # the driver's own options, and --set/--out where given (the parser above took them for the entries)
        forwarded = ([f"--seeds={args.seeds}"] if args.seeds is not None else []) + rest + [f"--set={s}" for s in args.set] \
            + (["--report-only"] if args.report_only else []) \
            + ([f"--out={args.out}"] if args.out != str(DOC) else [])
        sys.argv = [f"benchmarks {args.name}", *forwarded]  # drivers print their own command line from sys.argv[1:]
        return int(module.main(forwarded) or 0)
    if args.name not in registry:
        print(f"benchmarks: unknown entry {args.name!r}; known: {', '.join([*registry, *SCRIPTS])}", file=sys.stderr)
        return 2
    if rest:
        print(f"benchmarks: unknown arguments {rest}", file=sys.stderr)
        return 2
    entry = registry[args.name]
    os.chdir(ROOT)  # recipes name ../shared/data and runs/ relative to the repository
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    path = OUT / entry.name / "results.json"
    try:
        if args.report_only:
            if not path.exists():
                print(f"benchmarks: {path} not found; run the entry first", file=sys.stderr)
                return 2
            result = read_json(path)
        else:
            seeds = args.seeds or entry.seeds
            if seeds < 1:
                print(f"benchmarks: --seeds must be at least 1, got {seeds}", file=sys.stderr)
                return 2
            result = run_entry(entry, seeds, args.set, fresh=args.fresh)
    except SiftcliError as exc:
        print(f"benchmarks: error: {exc}", file=sys.stderr)
        return 2
    section = report(entry, result)
    write_section(Path(args.out), entry.title, section)
    print("\n".join(section))
    return 0
