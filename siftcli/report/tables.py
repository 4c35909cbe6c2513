"""Rich renderables for runs, comparisons and sweeps. Only the CLI prints them."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from siftcli.analysis.stats import CompareResult
from siftcli.analysis.sweep import SweepResult
from siftcli.tasks import metric
from siftcli.training.record import ParallelInfo, ReferenceCost, RunMetrics, final_value, keep_value

#: What each opponent's difference measures, in the compare table.
_VALUE_OF = {"equal-time": "value of the trade", "random-keep": "value of selection",
             "static-filter": "value of deciding online", "target-only": "distance to the ceiling"}


def _reference_cost(ref: ReferenceCost | None) -> str:
    if not ref:
        return "—"
    return f"{ref['paid_seconds']:.1f} / {ref['build_seconds']:.1f}" + (" (cached)" if ref.get("cached") else "")


def show_value(x: Any, fmt: str = "{:.3f}") -> str:
    """A table cell: a float in ``fmt``, nothing known as a dash, anything else as it prints (the plan's tables too)."""
    if x is None:
        return "—"
    if isinstance(x, float):
        return fmt.format(x)
    return str(x)


def _pct(x: Any) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def run_table(m: RunMetrics, run_dir: str | None = None) -> Table:
    metric = m["metric"]
    t = Table(title=f"siftcli train — {m['arm']} ({m['status']})", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value", justify="right")
    t.add_row(f"final {metric}", show_value(final_value(m), "{:.4f}"))
    t.add_row("eval loss", show_value(final_value(m, "loss"), "{:.4f}"))
    t.add_row("training wall-clock", f"{m['train_seconds']:.1f} s")
    t.add_row("total wall-clock", f"{m['total_seconds']:.1f} s")
    t.add_row("optimizer steps", str(m["optimizer_steps"]))
    par = m.get("parallel")
    if par:
        t.add_row("processes × batch = global batch; lr", _spread(par))
    t.add_row("samples trained / raw", f"{m['samples_trained']} / {m['raw_samples']}")
    if par and par.get("ranks"):
        per_rank = ", ".join(f"{r['rank']}: {_pct(r['kept_fraction'])} / {_pct(r['trained_fraction'])}" for r in par["ranks"])
        dropped = sum(r["dropped_to_sync"] for r in par["ranks"])
        t.add_row("kept / trained per rank", f"{per_rank}; {dropped} kept samples dropped to stay in step; "
                  f"weights {'identical' if par.get('ranks_in_sync') else 'DIFFER'} on every rank")
    if m.get("samples_teacher") is not None:
        t.add_row("teacher forwards (samples)", str(m["samples_teacher"]))
    if m.get("keep"):
        k = m["keep"]
        kept = f"{_pct(k['target'])} / {_pct(k['achieved'])} / {_pct(k['achieved_after_delay'])}"
        t.add_row("kept (target / achieved / after delay)", kept)
        t.add_row("scoring cost s, predicted ratio scored/raw·s + a",
                  f"{show_value(m.get('scoring_cost'), '{:.2f}')}, {show_value(m.get('predicted_ratio'), '{:.2f}')}")
        started = f"{_start(k.get('sift_started_at'))} / {_start(k.get('anneal_started_at'))}"
        t.add_row("sifting started / anneal started (raw batch)", started)
    if m.get("compile"):
        c = m["compile"]
        pad = f"; lengths padded to multiples of {c['pad_to_multiple_of']}" if c.get("pad_to_multiple_of") else ""
        t.add_row("torch.compile: graphs / compilations / eager fallbacks",
                  f"{c['graphs']} / {c['compilations']} / {c['eager_fallbacks']}{pad}")
        if c.get("seconds") is not None:
            t.add_row("torch.compile: seconds (on the clock) / compilations after the start",
                      f"{c['seconds']:.1f} / {c.get('steady_compilations', '—')}")
    ph = m["phases"]
    t.add_row("phases (s)", ", ".join(f"{k} {v:.1f}" for k, v in ph.items()))
    if run_dir:
        t.add_row("run folder", run_dir)
    return t


def _spread(par: ParallelInfo) -> str:
    """How a run was spread over processes, e.g. ``2 × 8 = 16; lr 0.001``."""
    return f"{par['world_size']} × {par['per_rank_batch']} = {par['global_batch']}; lr {par['lr']:g}" + (
        "; ZeRO" if par.get("zero") else "")


def _start(raw_batch: int | None) -> str:
    return "never" if raw_batch is None else str(raw_batch)


def compare_view(result: CompareResult, run_dir: str | None = None) -> Group:
    pair = result["pairs"][0] if len(result["pairs"]) == 1 else None
    runs = result["runs"][0]
    metric_name = runs["baseline"]["metric"]
    arms = list(runs)
    seed = result["pairs"][0].get("seed")
    t = Table(title="siftcli compare" + (f" (seed {seed})" if pair else f" (seed {seed}; {len(result['pairs'])} seeds)"))
    t.add_column("")
    for a in arms:
        t.add_column(a, justify="right")

    def row(label: str, fn: Any) -> None:
        t.add_row(label, *[fn(runs[a]) for a in arms])

    row("training wall-clock (s)", lambda r: f"{r['train_seconds']:.1f}")
    row("total wall-clock (s)", lambda r: f"{r['total_seconds']:.1f}")
    row("optimizer steps", lambda r: str(r["optimizer_steps"]))
    if any((runs[a].get("parallel") or {}).get("world_size", 1) > 1 for a in arms):
        row("processes × batch; lr", lambda r: _spread(r["parallel"]) if r.get("parallel") else "—")
    row("samples scored", lambda r: str(r["samples_scored"]))
    if any(runs[a].get("samples_from_memory") for a in arms):
        row("samples decided from memory", lambda r: str(r.get("samples_from_memory") or 0))
    row("samples trained on", lambda r: str(r["samples_trained"]))
    if any(runs[a].get("samples_teacher") is not None for a in arms):
        row("teacher forwards (samples)", lambda r: str(r.get("samples_teacher")))
    if "sifted" in runs and keep_value(runs["sifted"], "sift_started_at") is not None:
        row("sifting started at raw batch", lambda r: _start(keep_value(r, "sift_started_at")) if r.get("keep") else "—")
    row("accepted % (target)", lambda r: _pct(r["keep"]["target"]) if r.get("keep") else "—")
    row("accepted % (achieved)", lambda r: _pct(r["keep"]["achieved"]) if r.get("keep") else
        _pct(r["subset"]["samples"] / r["subset"]["of"]) if r.get("subset") else _pct(1.0))
    row(f"final eval {metric_name}", lambda r: show_value(final_value(r), "{:.4f}"))
    row("final eval loss", lambda r: show_value(final_value(r, "loss"), "{:.4f}"))
    if any(runs[a].get("label_noise") for a in arms):
        row("flipped labels among kept (after delay)", lambda r: _pct((r.get("label_noise") or {}).get("kept_share_after_delay")
                                                                        or (r.get("label_noise") or {}).get("kept_share")))
    if any(runs[a].get("reference") for a in arms):
        row("reference: paid here / built (s)", lambda r: _reference_cost(r.get("reference")))
    if any(runs[a].get("groups") for a in arms):
        row("kept share by group", lambda r: ", ".join(f"{g} {_pct(v['share_of_kept'])}" for g, v in (r.get("groups") or {}).items())
            or "—")
    first = result["pairs"][0]
    m = metric(metric_name)
    unit = m.unit
    s = Table(title="what sifting bought", show_header=False)
    s.add_column("what", style="bold")
    s.add_column("value", justify="right")
    s.add_row("speed-up (baseline / sifted training time)", show_value(first.get("speedup"), "{:.2f}x"))
    s.add_row("time ratio (sifted / baseline): as run; reference paid in full",
              f"{show_value(first.get('equal_epoch_ratio'), '{:.2f}')}; {show_value(first.get('paid_ratio'), '{:.2f}')}")
    s.add_row(f"{metric_name} delta (sifted − baseline)", show_value(first.get("metric_delta"), "{:+.2f}") + unit)
    s.add_row(f"target ({metric_name}, baseline final − {first['target_drop']}{unit})", show_value(first.get("target"), "{:.4f}"))
    s.add_row("time to target: baseline / sifted (s)",
              f"{show_value(first.get('baseline_time_to_target'), '{:.1f}')} / {show_value(first.get('sifted_time_to_target'), '{:.1f}')}")
    s.add_row("time-to-target ratio (sifted / baseline)", show_value(first.get("time_to_target_ratio"), "{:.2f}"))
    cost = f"{show_value(first.get('scoring_cost'), '{:.2f}')}; {show_value(first.get('predicted_ratio'), '{:.2f}')}"
    s.add_row("scoring cost s; predicted ratio scored/raw · s + a (measured: equal-epoch ratio)", cost)
    held = first.get("equal_time")
    if held:
        s.add_row("equal-time: trained / given (s)", f"{held['train_seconds']:.1f} / {held['budget_seconds']:.1f} "
                  f"({held['ratio']:.3f}{'' if held['within_3_percent'] else ', off by more than 3%'})")
    for arm, v in first.get("vs", {}).items():
        if arm != "baseline":
            s.add_row(f"sifted − {arm} ({_VALUE_OF.get(arm, 'difference')})", show_value(v.get("diff"), "{:+.2f}") + unit)
    parts: list[Any] = [t, s]
    summary = result.get("seeds_summary")
    if summary:
        st = Table(title=f"over {summary['seeds']} seeds, each its own initial weights: paired differences (mean ± SE)")
        st.add_column("number")
        st.add_column("mean", justify="right")
        st.add_column("what it allows", justify="right")
        st.add_column("per seed", justify="right")
        for key, label in (("time_to_target_ratio", "time-to-target ratio"), ("equal_epoch_ratio", "time ratio, as run"),
                           ("paid_ratio", "time ratio, reference paid"), ("achieved_keep", "achieved keep")):
            if key in summary:
                v = summary[key]
                st.add_row(label, f"{v['mean']:.3f} ± {v['std']:.3f} sd", "", ", ".join(f"{x:.3f}" for x in v["values"]))
        rows = [("metric_delta", "baseline", summary.get("metric_delta"))] + [
            (arm, arm, v) for arm, v in summary.get("vs", {}).items() if arm != "baseline"]
        for _, arm, v in rows:
            if v:
                se = "n/a" if v["se"] != v["se"] else f"{v['se']:.2f}"
                st.add_row(f"sifted − {arm}", f"{v['mean']:+.2f} ± {se}{unit}", v["status"], ", ".join(f"{x:+.2f}" for x in v["values"]))
        parts.append(st)
    for key in ("evaluation_warning", "pilot_warning"):
        if result.get(key):
            parts.append(Text(result[key], style="yellow"))
    parts.append(Text("Verdict: " + result["verdict"], style="bold"))
    for p in result.get("plots", []):
        parts.append(Text(f"plot: {p}", style="dim"))
    if run_dir:
        parts.append(Text(f"results: {run_dir}/compare.json", style="dim"))
    return Group(*parts)


def sweep_view(result: SweepResult, run_dir: str | None = None) -> Group:
    """Every trial (parameters, metric, wall-clock, time-to-target, where it was pruned), the front, the baseline
    frontier, and the recommendation with its reason."""
    metric = result["metric"]
    target = show_value(result.get("target"), "{:.4f}")
    counts = result.get("counts", {})
    t = Table(title=f"siftcli sweep-beta, {result['mode']} mode: {counts.get('complete', 0)} complete, "
                    f"{counts.get('pruned', 0)} pruned, {counts.get('fail', 0)} failed (target {metric} {target})")
    for col in ("trial", "parameters", metric, "train s", "time-to-target s", "state", ""):
        t.add_column(col, justify="left" if col in ("parameters", "state") else "right")
    best = result["recommendation"]
    front = set(result.get("front", []))
    for r in sorted(result["trials"], key=lambda r: r["number"]):
        params = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in r["params"].items())
        state = {"pruned": f"pruned at raw batch {r.get('pruned_at_raw_batch')}", "fail": f"failed: {r.get('error') or ''}"[:60]}.get(
            r["state"], r["state"])
        mark = "★" if best.get("kind") == "trial" and best.get("number") == r["number"] else ("front" if r["number"] in front else "")
        t.add_row(str(r["number"]), params, show_value(r.get("value"), "{:.4f}"), show_value(r.get("train_seconds"), "{:.1f}"),
                  show_value(r.get("time_to_target"), "{:.1f}"), state, mark)
    for p in result["frontier"]:
        mark = "★" if best.get("kind") == "baseline" and best.get("fraction") == p["fraction"] else "frontier"
        t.add_row("base", f"baseline, {p['fraction']:g} of the steps", show_value(p.get("value"), "{:.4f}"),
                  show_value(p.get("train_seconds"), "{:.1f}"), "", "complete", mark)
    parts: list[Any] = [t, Text(best["text"], style="bold")]
    startup = (result.get("startup_seconds") or {}).get("median")
    parts.append(Text(f"sweep wall-clock {result['sweep_seconds']:.0f} s; trial processes {result['trial_process_seconds']:.0f} s"
                      + (f"; start-up per trial {startup:.2f} s (median)" if startup is not None else "")
                      + f"; study {result['study']} in {result['storage']} (optuna-dashboard can open it)", style="dim"))
    if result.get("plot"):
        parts.append(Text(f"plot: {result['plot']}", style="dim"))
    if run_dir:
        parts.append(Text(f"results: {run_dir}/sweep.json", style="dim"))
    return Group(*parts)


def filter_summary_lines(summary: Any) -> list[str]:
    """``siftcli filter --report``'s summary in plain lines: rows per reason, the score histogram against the cut, the
    largest near-copy clusters with a sample each, the kept share per label and per group, the files written."""
    from siftcli.curate.report import histogram_lines

    lines = ["why: " + ", ".join(f"{reason} {count}" for reason, count in summary.reasons.items())]
    if summary.histogram is not None:
        lines.append("reference scores of the rows the cut was made over (near-copies aside):")
        lines += ["  " + line for line in histogram_lines(summary.histogram)]
    if summary.clusters:
        lines.append("largest near-copy clusters (rows, kept representative's row: its text):")
        lines += [f"  {c.size:>6}  row {c.representative}: {c.sample[:90]!r}" for c in summary.clusters]
    for name, shares in (("label", summary.kept_by_label), ("group", summary.kept_by_group)):
        if shares:
            lines.append(f"kept share per {name}: " + "; ".join(f"{k} {100 * v:.1f}%" for k, v in shares.items()))
    lines.append(f"report: {summary.report}" + (f" (histogram: {summary.plot})" if summary.plot else ""))
    return lines
