"""Scale out: the default recipe on 1 process and on 2 torchrun processes (gloo, CPU), sifted and not.

Runs ``siftcli compare --seeds N`` twice, the same way a user would:

  1 process     siftcli compare --seeds N                         (batch 32)
  2 processes   torchrun --standalone --nproc-per-node=2 --no-python siftcli compare --seeds N --set batch_size=16
                (16 per rank: the same global batch of 32, the same steps and learning rate as the 1-process run)

and reports per arm and number of processes: training wall-clock, optimizer steps (the same on every rank by
construction), kept fraction per rank and over both, kept samples dropped to keep the ranks in step, whether the
ranks' weights ended identical, and final accuracy over seeds. Writes the "Scale out" section of docs/benchmarks.md.
On a 2-core CPU two processes of one thread each share the same cores one process of two threads uses, so the
wall-clock says what distribution costs, not what more hardware buys.

    python -m benchmarks scale-out             # 3 seeds (about 20 min on 2 CPU cores)
    python -m benchmarks scale-out --report-only
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import _cpu, mean_sd, write_section
from benchmarks.entry import ROOT  # noqa: E402
from siftcli.runio import read_json

OUT = ROOT / "runs" / "scale-out"
ARMS = ("baseline", "sifted")


def siftcli() -> str:
    return str(Path(sys.executable).parent / "siftcli")


def launch(procs: int, seeds: int, folder: Path) -> float:
    """One ``compare`` invocation; returns its wall-clock. An existing finished folder is reused."""
    if (folder / "compare.json").exists():
        return float("nan")
    cmd = [siftcli(), "compare", "--seeds", str(seeds), "-o", str(folder), "-q"]
    if procs > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}", "--no-python",
               *cmd, "--set", f"batch_size={32 // procs}"]
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True)
    return time.perf_counter() - t0


def runs(folder: Path, seeds: int) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ARMS}
    for seed in range(seeds):
        base = folder / (f"seed{seed}" if seeds > 1 else "")
        for arm in ARMS:
            out[arm].append(read_json(base / arm / "metrics.json"))
    return out


def report(by_procs: dict[int, dict[str, list[dict[str, Any]]]], seeds: int, walls: dict[int, float]) -> list[str]:
    import torch

    lines = [
        "## Scale out: the default recipe on 1 and 2 torchrun processes (CPU, gloo)",
        "",
        f"`python -m benchmarks scale-out` ({platform.machine()}, {os.cpu_count()} cores, {_cpu()}, torch {torch.__version__}, "
        f"{seeds} seeds, {time.strftime('%Y-%m-%d')}). One process trains with batch 32; two processes with 16 each "
        "(`torchrun --standalone --nproc-per-node=2 --no-python siftcli compare --set batch_size=16`), so the global "
        "batch, the steps and the learning rate are the same. Both share the same 2 cores (two processes of one thread "
        "against one of two), so the times say what distributing costs here, not what more hardware buys. Kept: what "
        "the rule chose on each rank over its raw samples (delay included); the dropped samples were kept by a rank with "
        "more full batches than the other at an epoch's end (so both step equally) and not trained on.",
        "",
        "| processes | arm | training s | steps (every rank) | kept per rank | kept, both | dropped to stay in step | "
        "weights identical on every rank | accuracy % |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for procs, arms in sorted(by_procs.items()):
        for arm in ARMS:
            ms = arms[arm]
            steps = sorted({m["optimizer_steps"] for m in ms})
            par = [m.get("parallel") or {} for m in ms]
            per_rank = "—"
            if procs > 1 and arm == "sifted":
                ranks = list(zip(*[p["ranks"] for p in par]))
                per_rank = ", ".join(f"{mean_sd([r['kept_fraction'] for r in rk], 100, '{:.1f}')}" for rk in ranks)
            kept = mean_sd([(m.get("keep") or {}).get("achieved") for m in ms], 100, "{:.1f}") if arm == "sifted" else "100"
            dropped = sum((m.get("keep") or {}).get("dropped_to_sync", 0) or 0 for m in ms) / len(ms)
            in_sync = "yes" if procs > 1 and all(p.get("ranks_in_sync") for p in par) else ("—" if procs == 1 else "NO")
            acc = mean_sd([m["final"].get("accuracy") for m in ms], 100)
            lines.append(f"| {procs} | {arm} | {mean_sd([m['train_seconds'] for m in ms], 1, '{:.1f}')} | "
                         f"{'/'.join(map(str, steps))} | {per_rank} | {kept} | {dropped:.0f} | {in_sync} | {acc} |")
    lines.append("")
    for procs, arms in sorted(by_procs.items()):
        ratios = [s["train_seconds"] / b["train_seconds"] for b, s in zip(arms["baseline"], arms["sifted"])]
        took = walls.get(procs)
        wall = f"; the whole `compare` took {took / 60:.1f} min" if took is not None and math.isfinite(took) else ""
        lines.append(f"- {procs} process{'es' if procs > 1 else ''}: sifted / baseline training time {mean_sd(ratios)}{wall}.")
    one, two = by_procs.get(1), by_procs.get(2)
    if one and two:
        for arm in ARMS:
            gap = [(b["final"]["accuracy"] - a["final"]["accuracy"]) * 100 for a, b in zip(one[arm], two[arm])]
            time_ratio = [b["train_seconds"] / a["train_seconds"] for a, b in zip(one[arm], two[arm])]
            lines.append(f"- {arm}: 2 processes − 1 process accuracy {mean_sd(gap)} points (paired by seed); "
                         f"time 2 / 1 processes {mean_sd(time_ratio)}.")
    lines += ["", "The no-hang proof is `tests/test_distributed.py` (every sifting mode, one rank keeping far fewer samples "
              "than the other, equal batches and one gathered history on both ranks, under a 120 s deadline) and "
              "`tests/test_parallel.py` (torchrun through the CLI: train, SIGTERM on one rank, resume to identical weights, "
              "ZeRO, compare), each launch under a timeout.", ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--report-only", action="store_true", help="re-read finished runs and rewrite the section")
    parser.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = parser.parse_args(argv)
    saved = OUT / "walls.json"  # each compare's wall-clock, so --report-only can say it too
    walls: dict[int, float] = {int(k): v for k, v in json.loads(saved.read_text()).items()} if saved.exists() else {}
    by_procs = {}
    for procs in (1, 2):
        folder = OUT / f"{procs}proc"
        if not args.report_only:
            took = launch(procs, args.seeds, folder)
            walls[procs] = took if math.isfinite(took) else walls.get(procs, took)  # a reused folder keeps its time
        by_procs[procs] = runs(folder, args.seeds)
    if not args.report_only:
        saved.write_text(json.dumps(walls))
    section = report(by_procs, args.seeds, walls)
    print("\n".join(section))
    write_section(Path(args.out), "## Scale out", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
