"""The GPU benchmark: baseline vs sifted vs equal-time baseline, eager vs torch.compile, on CUDA in bf16.

Recipe: recipes/gpu/bert-base-config-sst2.yaml (a BERT-base-sized model from config, so nothing is downloaded;
SST-2 from ../shared/data, 67k training sentences, the 6,735-sentence dev set for evaluation). Steps:

    python -m benchmarks gpu --prepare                # here: copy ../shared/data/sst2 to .gpu-data/ (ignored)
    # on the GPU machine (the device tool; carry .gpu-data and write the run folders back through $OUT):
    python -m benchmarks gpu --compile off --seeds 1 --copy-to "$OUT"
    python -m benchmarks gpu --compile on --seeds 1 --copy-to "$OUT"
    # here, with the folders copied back under runs/gpu-benchmark/:
    python -m benchmarks gpu --report-only            # the GPU section of docs/benchmarks.md
    python -m benchmarks gpu --smoke                  # CPU, tiny model, a few hundred rows: checks this script

Each ``--compile`` run is one ``siftcli compare --equal-time`` (baseline, sifted, a baseline given the sifted
run's time) into runs/gpu-benchmark/{eager,compiled}; the report gives the GPU's name, s, a, the equal-epoch and
time-to-target ratios, accuracy, sifted − equal-time, and torch.compile's graphs and compilations.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from benchmarks.common import mean_sd, write_section
from benchmarks.entry import ROOT  # noqa: E402
from siftcli.commands import run_compare
from siftcli.recipe.reader import load_recipe

RECIPE = ROOT / "recipes" / "gpu" / "bert-base-config-sst2.yaml"
DATA = ROOT / ".gpu-data" / "sst2"
OUT = ROOT / "runs" / "gpu-benchmark"
SMOKE = ["device=cpu", "precision=fp32", "num_workers=0", "epochs=1", "batch_size=16", "eval.every_steps=5",
         "eval.batch_size=64", "data.max_train_samples=320", "data.max_eval_samples=200", "max_length=32",
         'model.config_overrides={"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 64}']


def prepare() -> None:
    source = ROOT.parent / "shared" / "data" / "sst2"
    DATA.mkdir(parents=True, exist_ok=True)
    for name in ("train.tsv", "dev.tsv", "SOURCE.md"):
        shutil.copy2(source / name, DATA / name)
    print(f"copied {source} to {DATA} ({sum(f.stat().st_size for f in DATA.iterdir()) / 1e6:.1f} MB)")


def device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({os.cpu_count()} cores)"


def run(compiled: bool, seeds: int, smoke: bool, out: Path) -> Path:
    overrides = [f"compile={str(compiled).lower()}", *(SMOKE if smoke else [])]
    recipe = load_recipe(RECIPE, overrides)
    folder = out / ("compiled" if compiled else "eager")
    if folder.exists():
        shutil.rmtree(folder)
    t0 = time.perf_counter()
    run_dir, _ = run_compare(recipe, output=str(folder), seeds=seeds, arms=["baseline", "sifted", "equal-time"])
    (run_dir / "device.json").write_text(json.dumps({"device": device_name(), "seconds": time.perf_counter() - t0}))
    return run_dir


def _arms(folder: Path) -> list[dict[str, dict[str, Any]]]:
    seeds = sorted(folder.glob("seed*")) or [folder]
    return [{arm: json.loads((s / arm / "metrics.json").read_text()) for arm in ("baseline", "sifted", "equal-time")}
            for s in seeds]


def report(out: Path) -> list[str]:
    rows, device = [], "?"
    for kind in ("eager", "compiled"):
        folder = out / kind
        if not (folder / "compare.json").exists():
            continue
        device = json.loads((folder / "device.json").read_text())["device"] if (folder / "device.json").exists() else device
        pairs = json.loads((folder / "compare.json").read_text())["pairs"]
        runs = _arms(folder)
        for arm in ("baseline", "sifted", "equal-time"):
            ms = [r[arm] for r in runs]
            c = [m.get("compile") or {} for m in ms]
            counts = f"{c[0]['graphs']} / {c[0]['compilations']}" if c[0] else "—"
            ratio = {"sifted": mean_sd([p["equal_epoch_ratio"] for p in pairs]),
                     "equal-time": mean_sd([m["train_seconds"] / r["baseline"]["train_seconds"] for m, r in zip(ms, runs)])}
            rows.append(
                f"| {kind} | {arm} | {mean_sd([m['train_seconds'] for m in ms], 1, '{:.1f}')} | {ratio.get(arm, '1')} | "
                f"{mean_sd([p['time_to_target_ratio'] for p in pairs]) if arm == 'sifted' else '—'} | "
                f"{mean_sd([m.get('scoring_cost') for m in ms]) if arm == 'sifted' else '—'} | "
                f"{mean_sd([(m.get('keep') or {}).get('achieved') for m in ms]) if arm == 'sifted' else '1'} | "
                f"{mean_sd([m['final'].get('accuracy') for m in ms], 100)} | "
                f"{mean_sd([p.get('sifted_minus_equal_time') for p in pairs]) if arm == 'sifted' else '—'} | {counts} |")
        base = [r["baseline"]["train_seconds"] for r in runs]
        rows.append(f"| {kind} | (baseline seconds per run: {', '.join(f'{b:.1f}' for b in base)}) |||||||||")
    return [
        "## GPU: BERT-base from config on SST-2, eager and compiled (bf16)",
        "",
        f"`python -m benchmarks gpu` on {device} ({time.strftime('%Y-%m-%d')}). Per `--compile` setting one "
        "`siftcli compare --equal-time`; ratios are against that setting's own baseline; s is the scoring cost, a the "
        "achieved kept fraction; time-to-target is against the baseline's own time to its final accuracy − 0.5 points.",
        "",
        "| forward | arm | training s | time / baseline | time-to-target ratio | s | a | accuracy % | sifted − equal-time "
        "| graphs / compilations |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepare", action="store_true", help="copy ../shared/data/sst2 into .gpu-data/ and stop")
    parser.add_argument("--compile", choices=("on", "off"), help="run one compare with torch.compile on or off")
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny model, few rows, both settings: checks the script")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--copy-to", help="also copy the run folders here (the device tool's $OUT)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the recipe names .gpu-data/ relative to the repo root
    if args.prepare:
        prepare()
        return 0
    out = OUT if not args.smoke else ROOT / "runs" / "gpu-benchmark-smoke"
    todo = [] if args.report_only else (["off", "on"] if args.smoke else [args.compile] if args.compile else [])
    if not todo and not args.report_only:
        parser.error("give --compile on|off, --smoke, --report-only or --prepare")
    if todo and not (DATA / "train.tsv").exists():
        parser.error(f"{DATA} is missing: run python -m benchmarks gpu --prepare first (and carry .gpu-data)")
    for setting in todo:
        run(setting == "on", args.seeds, args.smoke, out)
    section = report(out)
    print("\n".join(section))
    if args.copy_to:
        shutil.copytree(out, Path(args.copy_to) / out.name, dirs_exist_ok=True)
    if not args.smoke:
        write_section(Path(args.out), "## GPU:", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
