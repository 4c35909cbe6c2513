"""PNG plots for a run folder (matplotlib, headless)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from siftcli.analysis.sweep import SweepResult
from siftcli.runio import atomic_write
from siftcli.training.record import RunMetrics

COLORS = {"baseline": "#444444", "sifted": "#d62728", "equal-time": "#1f77b4", "random-keep": "#2ca02c"}
#: ``SIFTCLI_PLOTS=0``: no PNG plots. Importing matplotlib and drawing a run's figures costs a process about 1.5 s on
#: a 2-core CPU, more than a small run's training; a cluster's hundred jobs, or a test suite, read metrics.json instead.
PLOTS_ENV = "SIFTCLI_PLOTS"


def plots_wanted() -> bool:
    """Whether runs, comparisons and sweeps draw their PNGs: unless ``SIFTCLI_PLOTS`` is ``0``."""
    import os

    return os.environ.get(PLOTS_ENV, "").strip() != "0"


def write_plots(run_dir: Path, runs: list[RunMetrics]) -> list[Path]:
    """Metric against training wall-clock for every arm; keep rate over raw batches; kept vs rejected losses."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    paths: list[Path] = []
    metric = runs[0]["metric"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        pts = [(p["train_seconds"], p[metric]) for p in run.get("curve", []) if p.get(metric) is not None]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", ms=3, label=run["arm"], color=COLORS.get(run["arm"]))
    ax.set_xlabel("training wall-clock (s, evaluation excluded)")
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} against time")
    ax.grid(alpha=0.3)
    paths.append(_save(fig, ax, run_dir / "metric_vs_time.png"))

    sifted = next((r for r in runs if r.get("keep")), None)
    if sifted and sifted["keep"].get("trace"):
        trace = sifted["keep"]["trace"]
        window = max(1, len(trace) // 50)
        xs, ys = [], []
        for i in range(0, len(trace), window):
            chunk = trace[i:i + window]
            xs.append(chunk[-1][0])
            ys.append(sum(c[2] for c in chunk) / max(1, sum(c[1] for c in chunk)))
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(xs, ys, color=COLORS["sifted"], label="achieved")
        ax.axhline(sifted["keep"]["target"], ls="--", color="black", label="target 1/(1+beta)")
        ax.set_ylim(0, 1.05)
        ax.set_xlabel("raw batch")
        ax.set_ylabel("kept fraction")
        ax.set_title("keep rate over training")
        paths.append(_save(fig, ax, run_dir / "keep_rate.png"))

    loss_files = list(run_dir.glob("**/sift_losses.json"))
    if loss_files:
        data = json.loads(loss_files[0].read_text())
        if data.get("kept") or data.get("rejected"):
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.hist([data.get("kept", []), data.get("rejected", [])], bins=40, label=["kept", "rejected"],
                    color=[COLORS["sifted"], "#999999"], histtype="stepfilled", alpha=0.6)
            ax.set_xlabel("per-sample loss at scoring")
            ax.set_ylabel("samples")
            ax.set_title("losses of kept and rejected samples")
            paths.append(_save(fig, ax, run_dir / "loss_histogram.png"))
    return paths


def _save(fig: Any, ax: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    ax.legend()
    fig.tight_layout()
    try:  # written beside and renamed over: a link planted at the name is replaced, never written through
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    finally:
        plt.close(fig)
    return path


def write_sweep_plot(sweep_dir: Path, result: SweepResult) -> Path:
    """Metric against training wall-clock: every trial (pruned ones at their last evaluation), the
    non-dominated trials joined up, and the baseline frontier."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    done = [r for r in result["trials"] if r["state"] == "complete" and r.get("value") is not None]
    pruned = [r for r in result["trials"] if r["state"] == "pruned" and r.get("value") is not None]
    if done:
        ax.scatter([r["train_seconds"] for r in done], [r["value"] for r in done], color=COLORS["sifted"], label="sifted trials")
    if pruned:
        ax.scatter([r["train_seconds"] for r in pruned], [r["value"] for r in pruned], marker="x", color="#999999",
                   label="pruned (at its last evaluation)")
    front = sorted((r for r in done if r["number"] in set(result.get("front", []))), key=lambda r: r["train_seconds"])
    if front:
        ax.plot([r["train_seconds"] for r in front], [r["value"] for r in front], color=COLORS["sifted"], ls="--", label="front")
    base = [p for p in result["frontier"] if p.get("value") is not None]
    ax.plot([p["train_seconds"] for p in base], [p["value"] for p in base], marker="s", color=COLORS["baseline"],
            label="baseline frontier")
    if result.get("target") is not None:
        ax.axhline(result["target"], ls=":", color="black", label="target")
    ax.set_xlabel("training wall-clock (s, evaluation excluded)")
    ax.set_ylabel(result["metric"])
    ax.set_title("sweep: metric against time")
    ax.grid(alpha=0.3)
    return _save(fig, ax, Path(sweep_dir) / "sweep.png")
