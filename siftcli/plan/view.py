"""A plan record in, the rich renderable the CLI prints out: every candidate, the confirmation, the decision."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from siftcli.plan.record import SHORT_JOB_SECONDS, Confirmation, Look, PlanRecord
from siftcli.report.tables import show_value
from siftcli.tasks import METRICS

#: The search table's columns, as :func:`search_rows` gives them (the terminal leaves out the family).
SEARCH_COLUMNS = ("candidate", "family", "rung", "seconds", "validation", "baseline at that rung", "gap ± noise",
                  "time ratio", "outcome")


def search_rows(record: PlanRecord) -> list[list[str]]:
    """One row per trial (a row per candidate never tried), the screen's baseline first: what the terminal, report.html
    and the benchmark section all show. The gap is in metric points over the baseline at the same rung, with, for
    accuracy, the validation loss's difference the screen ranks by (negative: lower loss, better); a candidate that
    trains fewer steps by design shows the share of its own schedule it trained to match that baseline's steps; the
    time ratio is at that rung, the reference paid."""
    noise = "" if record.screen_noise is None else f"noise {record.screen_noise:.2f}"
    counts = record.metric in METRICS and METRICS[record.metric].counts_correct  # ranked by the loss, not the metric
    rows = [["baseline", "everything", f"{record.screen_fidelity:.2f}", "", show_value(record.baseline_metric), "", noise, "1.00",
             f"the yardstick (a full run: {show_value(record.baseline_seconds, '{:.0f}')} s, {record.unit_source or 'not yet known'})"]]
    for c in record.candidates:
        if not c.trials:
            rows.append([c.arm, c.family, "—", "—", "—", "—", "—", "—", c.outcome])
        for i, t in enumerate(c.trials):
            gap = "—" if t.gap is None else f"{t.gap:+.2f} ± {t.noise or 0.0:.2f}"
            if t.signal_gap is not None and t.metric is not None and counts:  # the loss it was ranked by
                gap += f" (loss {-t.signal_gap:+.3f} ± {t.signal_noise or 0.0:.3f})"
            rung = f"{t.fidelity:.2f}" if t.rung is None or t.rung == t.fidelity else \
                f"{t.fidelity:.2f} of its own, {t.steps} steps (vs {t.rung:.2f})"
            rows.append([c.arm if i == 0 else "", c.family if i == 0 else "", rung,
                         f"{t.seconds:.0f}", show_value(t.metric), show_value(t.baseline_metric), gap,
                         show_value(t.time_ratio, "{:.2f}") + (" (short: noise)" if t.short else ""),
                         (c.outcome if i == len(c.trials) - 1 else "") + (f" ({t.error})" if t.error else "")])
    return rows


def short_note(record: PlanRecord) -> str:
    """Say so when jobs ran too short for their time ratios to mean much ("" when none did)."""
    n = sum(t.short for c in record.candidates for t in c.trials)
    if not n:
        return ""
    return (f"{n} job(s) or their baselines ran under {SHORT_JOB_SECONDS:g} s: their time ratios (marked short) are "
            "within the clock's noise, and a faster/slower call on them is not evidence; a longer recipe or a larger "
            "--budget gives jobs that can be timed")


def screen_note(record: PlanRecord) -> str:
    """Where the screen was read and why there: the untrained level, and each probe of the baseline's rung."""
    if record.untrained_metric is None:
        return f"screened at {record.screen_fidelity:.2f} of each candidate's schedule"
    probes = ", ".join(f"{v:.3f} at {f:.2f}" for f, v in record.probes)
    said = "" if record.screen_learned else (": the baseline had not left the untrained level there either, so the "
                                             "screen's gaps are no evidence (a larger --budget reaches a deeper rung)")
    return (f"screened at {record.screen_fidelity:.2f} of each candidate's schedule (untrained "
            f"{record.untrained_metric:.3f}; the baseline {probes}){said}")


def lean_note(lean: Look) -> str:
    """A favoured pick's interval, in words (:func:`~siftcli.plan.confirm.lean`)."""
    return f"{100 * (1 - lean.alpha):.0f}% interval {lean.low:+.2f} to {lean.high:+.2f}"


def stopping(c: Confirmation) -> str:
    """Why the confirmation's seeds stopped, and after how many, in words."""
    last = c.looks[-1] if c.looks else None
    at = f" (look {last.n}: {last.low:+.2f} to {last.high:+.2f} at alpha {last.alpha:.4f})" if last else ""
    return {"within": "within the tolerance", "worse": "worse than the tolerance", "failed": "a run failed",
            "slower": "not faster than the baseline",
            "inconclusive": "inconclusive at the last seed", "": "running"}.get(c.stopped, c.stopped) + \
        f" after {len(c.seeds)} seeds{at}" + (f"; favoured, not confirmed ({lean_note(c.lean)})" if c.favoured and c.lean
                                              else "")


def plan_view(record: PlanRecord, folder: str) -> Group:
    """The search table (candidate, rung, seconds, validation metric, outcome), the confirmation and the answer."""
    search = Table(title=f"siftcli plan: {record.recipe} (validation {record.validation_rows} rows, budget "
                         f"{record.budget:g} baseline runs, tolerance {record.tolerance:g} points)")
    search.add_column("candidate", overflow="fold", ratio=3)
    for col in ("rung", "s", f"val {record.metric}", "baseline", "gap", "time"):
        search.add_column(col, no_wrap=True)
    search.add_column("outcome", overflow="fold", ratio=2)
    for row in search_rows(record):
        search.add_row(row[0], *row[2:])
    parts: list = [search, Text(screen_note(record), style="dim")]
    short = short_note(record)
    if short:
        parts.append(Text(short, style="yellow"))
    if record.skipped:
        parts.append(Text("skipped: " + "; ".join(f"{s.family}: {s.why}" for s in record.skipped), style="dim"))
    if record.confirmations:
        conf = Table(title=f"confirmation on the evaluation split ({record.evaluation_rows} rows), paired seeds")
        conf.add_column("candidate", overflow="fold", ratio=3)
        for col in ("seeds", "time", "vs baseline", "vs random subset"):
            conf.add_column(col, no_wrap=True)
        conf.add_column("stopped", overflow="fold", ratio=2)
        for c in record.confirmations:
            vs = {p.opponent.partition(":")[0]: p for p in c.versus}
            cell = lambda p: "—" if p is None or p.n == 0 else f"{p.mean:+.2f} ± {p.se:.2f}"  # noqa: E731
            conf.add_row(c.arm, str(len(c.seeds)), f"{c.time_ratio:.2f}", cell(vs.get("baseline")),
                         cell(vs.get("random-subset")), stopping(c))
        parts.append(conf)
    cost = record.search_seconds + record.confirm_seconds
    unit = record.baseline_seconds or 1.0
    lines = [f"answer: {record.answer}",
             f"the plan cost {cost:.0f} s = {cost / unit:.1f} baseline runs (search {record.search_seconds / unit:.1f}"
             + (f": {record.search_seconds:.0f} s of its {record.search_budget_seconds:.0f} s budget"
                if record.search_budget_seconds else "") + f", confirmation {record.confirm_seconds / unit:.1f})"
             + (f"; it pays back after {record.payback_runs:.1f} training runs" if record.payback_runs else ""),
             f"recipe: {record.recipe_out}" + (f" (trains on {record.data_out})" if record.data_out else ""),
             f"folder: {folder}"]
    parts.append(Text("\n".join(lines)))
    return Group(*parts)


def plan_html(record: PlanRecord) -> str:
    """``report.html``: the decision, its cost and pay-back, every candidate and the confirmation, as one self-contained
    page (no script, no network); every name in it is escaped."""
    from html import escape

    def row(cells: list[str], head: bool = False) -> str:
        tag = "th" if head else "td"
        return "<tr>" + "".join(f"<{tag}>{escape(c)}</{tag}>" for c in cells) + "</tr>"

    unit = record.baseline_seconds or 1.0
    cost = record.search_seconds + record.confirm_seconds
    search = [row(list(SEARCH_COLUMNS), head=True)] + [row(r) for r in search_rows(record)]
    confirm = [row(["candidate", "seeds", "time ratio", "opponent", "paired difference (points)", "95% interval",
                    "stopped"], head=True)]
    for c in record.confirmations:
        for v in c.versus:
            confirm.append(row([c.arm, ", ".join(map(str, c.seeds)), f"{c.time_ratio:.2f}", v.opponent,
                                "—" if not v.n else f"{v.mean:+.2f} ± {v.se:.2f}",
                                "—" if not v.n else f"{v.ci95[0]:+.2f} to {v.ci95[1]:+.2f}",
                                stopping(c)]))
    skipped = "".join(f"<li>{escape(s.family)}: {escape(s.why)}</li>" for s in record.skipped)
    payback = f"; it pays back after {record.payback_runs:.1f} training runs" if record.payback_runs else ""
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>siftcli plan: {escape(record.recipe)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:75em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}th{{background:#f3f3f3}}</style></head><body>
<h1>siftcli plan: {escape(record.recipe)}</h1>
<p><strong>{escape(record.answer)}</strong></p>
<p>The plan cost {cost:.0f} s = {cost / unit:.1f} baseline runs (search {record.search_seconds / unit:.1f} of a budget of
{record.budget:g}, confirmation {record.confirm_seconds / unit:.1f}){escape(payback)}. Tolerance {record.tolerance:g} points;
validation {record.validation_rows} rows, evaluation {record.evaluation_rows} rows.</p>
<h2>Search (validation split)</h2><p>{escape(screen_note(record))}. {escape(short_note(record))}</p><table>{''.join(search)}</table>
<h2>Confirmation (evaluation split, paired seeds)</h2><table>{''.join(confirm)}</table>
<h2>Not tried</h2><ul>{skipped}</ul>
<p>Recipe: {escape(str(record.recipe_out))}{escape(f' (trains on {record.data_out})' if record.data_out else '')}</p>
</body></html>
"""
