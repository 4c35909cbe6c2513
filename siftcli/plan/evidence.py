"""The study's finished jobs in, the record's evidence out: every candidate's trials (each held against the baseline at
its rung: the gap, its noise, the continuous signal's gap, whether it trained enough steps to count) and outcome, the
unit, the rungs and the screen's baseline. The same on every process: a reading of the study, no decision of its own
(those are :mod:`siftcli.plan.search`'s, whose ``learned`` it reads through the module: one rule, one place to
change it)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from siftcli.analysis.stats import diff_points
from siftcli.plan import search as searching
from siftcli.plan.costs import full_seconds, full_time, online_ratio, steps_share, teacher_saving, teacher_share, unit_from
from siftcli.plan.record import SHORT_JOB_SECONDS, Candidate, PlannerNotes, PlanRecord, Trial
from siftcli.plan.search import (
    EVIDENCE_STEPS,
    FASTER,
    MEMORY_SHARE,
    PROMOTION_STEP,
    SCREEN,
    SCREENING,
    SKIPPED,
    dropped,
    find,
    held,
    noise_points,
    probe_values,
    rung_baselines,
    rung_runs,
    screen_rung,
    signal_of,
)
from siftcli.plan.study import Job, Result
from siftcli.training.record import final_value, paid_seconds


def fill_search(record: PlanRecord, jobs: list[Job], results: dict[int, Result], extra: PlannerNotes, seed: int,
                metric: Any) -> None:
    """Every candidate's trials and outcome, the unit, the rungs and the screen's baseline, from the study (the same on
    every process)."""
    first = find(results, "baseline", SCREEN, seed, "validation")
    if first is not None and first.run is not None:
        record.setup_seconds = max(0.0, first.seconds - float(first.run["train_seconds"]))
        record.teacher_share = teacher_share(first.run)
        if record.unit_source != "measured":
            record.baseline_seconds = unit_from(first.seconds, first.run, SCREEN)
            record.unit_source = "predicted"
    rows, untrained = record.validation_rows, extra.get("untrained")
    record.untrained_metric = untrained
    probes = probe_values(results, seed)
    record.screen_fidelity = screen = screen_rung(probes, untrained, metric, rows)
    record.probes = [[f, v] for f, v in probes]
    record.screen_learned = all(searching.learned(v, untrained, metric, rows) for f, v in record.probes if f == screen)
    record.promotion_fidelity = screen * PROMOTION_STEP if screen * PROMOTION_STEP < 1 else None
    values = rung_baselines(results, seed, screen)
    record.baseline_metric = statistics.fmean(values) if values else None
    record.screen_noise = noise_points(values, metric, rows) if values else None
    # the baselines that had not learned yet: a candidate at the untrained level after no more steps is no evidence
    unlearned = [r.job.fidelity for r in results.values() if r.job.arm == "baseline" and r.job.split == "validation"
                 and r.run and not searching.learned(final_value(r.run), untrained, metric, rows)]
    # the steps the baseline had when it first left the untrained level: no trial with fewer is evidence
    first_learned = find(results, "baseline", screen, seed, "validation") if record.screen_learned else None
    least = EVIDENCE_STEPS * first_learned.run["optimizer_steps"] \
        if first_learned is not None and first_learned.run and first_learned.run.get("optimizer_steps") else None
    queued = {j.arm for j in jobs if j.phase == SCREENING}
    pools, fixed, upfront = extra.get("pools", {}), extra.get("fixed", {}), extra.get("upfront", {})
    rungs = {}  # per rung, what every candidate there is held against: the baselines' mean, its noise, its clock
    for fidelity in (screen, record.promotion_fidelity):
        if fidelity is None:
            continue
        rungs[fidelity] = _rung(results, seed, fidelity, values, metric, rows)
    for c in record.candidates:
        c.pool_fraction = pools.get(c.arm, c.pool_fraction)
        c.fixed_cost = fixed.get(c.arm, c.fixed_cost)
        c.upfront_cost = upfront.get(c.arm, c.upfront_cost)
        if c.family == "teacher-cache" and record.teacher_share is not None:  # the saving measured, not guessed
            c.extra_cost = -teacher_saving(record.teacher_share, record.epochs)
        c.trials = []
        for fidelity, held_against in rungs.items():
            r = held(results, c, fidelity, screen, seed)
            if r is None:
                continue
            own = r.job.fidelity
            if r.run is None:
                skipped = (r.error or "").startswith(SKIPPED)
                c.trials.append(Trial(c.arm, own, r.seconds, None, held_against.metric, None,
                                      "skipped" if skipped else "failed", r.error, rung=fidelity))
                continue
            value = final_value(r.run)
            subset = r.run.get("subset")
            if c.pool_fraction is None and subset:
                c.pool_fraction = subset["samples"] / max(1, subset["of"])
            ref = r.run.get("reference") or {}
            paid, base_paid = paid_seconds(r.run), held_against.paid  # type: ignore[arg-type]
            full = full_seconds(r.run, own, record.epochs, MEMORY_SHARE if c.first_epoch_cost else None)
            ratio = full * fidelity / base_paid if base_paid else None
            if c.family == "online" and (priced := online_ratio(r.run, own, record.epochs, MEMORY_SHARE
                                                                if c.first_epoch_cost else None)) is not None:
                ratio = _runs(priced, record) + c.fixed_cost + c.upfront_cost  # its structure, priced at the unit
            steps = r.run.get("optimizer_steps")
            if least is not None and steps is not None:  # too few steps to say anything, whatever it scored
                informative = steps >= least or searching.learned(value, untrained, metric, rows) and value is not None and \
                    held_against.metric is not None and (diff_points(value, held_against.metric, metric) or 0.0) > 0
            else:  # the baseline never learned, or an older record: at the untrained level after no more steps
                informative = searching.learned(value, untrained, metric, rows) or not any(
                    g >= own * steps_share(c) - 1e-9 for g in unlearned)
            signal = signal_of(r.run, metric)
            c.trials.append(Trial(c.arm, own, r.seconds, value, held_against.metric,
                                  paid / base_paid if base_paid else None,
                                  "complete", gap=diff_points(value, held_against.metric, metric),
                                  noise=held_against.noise, fixed_seconds=float(ref.get("seconds") or 0.0),
                                  predicted_ratio=ratio,
                                  informative=informative,
                                  short=bool(base_paid) and min(paid, base_paid) < SHORT_JOB_SECONDS,
                                  rung=fidelity, steps=steps, signal=signal,
                                  signal_gap=None if signal is None or held_against.signal is None
                                  else signal - held_against.signal,
                                  signal_noise=held_against.signal_noise))
        c.outcome = _outcome(c, record, queued, extra)


def _runs(training: float, record: PlanRecord) -> float:
    """``training`` runs of the baseline's training (its setup and evaluation once) in runs of the unit."""
    unit = record.baseline_seconds or 0.0
    if unit <= 0:
        return training
    setup = min(record.setup_seconds, unit)
    return (setup + (unit - setup) * training) / unit


@dataclass(frozen=True)
class HeldAgainst:
    """What every candidate at a rung is held against: the baselines' mean metric there and its noise (a paired gap's
    standard error), the same for the continuous signal (:func:`signal_of`), and the baseline's paid seconds."""

    metric: float | None
    noise: float
    signal: float | None
    signal_noise: float | None
    paid: float | None


def _rung(results: dict[int, Result], seed: int, fidelity: float, screen_values: list[float], metric: Any,
          rows: int) -> HeldAgainst:
    runs = rung_runs(results, seed, fidelity)
    here = [v for run in runs if (v := final_value(run)) is not None]
    b = find(results, "baseline", fidelity, seed, "validation")
    noise = noise_points(here if len(here) > 1 else screen_values, metric, rows) if (here or screen_values) else 0.0
    pairing = math.sqrt(1 + 1 / max(1, len(here)))  # the candidate's own noise beside the baselines' mean
    signals = [v for run in runs if (v := signal_of(run, metric)) is not None]
    signal_noise = None
    if signals:
        spread = statistics.stdev(signals) if len(signals) > 1 else 0.0
        sds = [float(run["final"].get("loss_sd") or 0.0) for run in runs] if metric.counts_correct else []
        floor = statistics.fmean(sds) / math.sqrt(rows) if sds and rows > 0 else 0.0  # one row's pull on the mean
        signal_noise = max(spread, floor) * pairing if metric.counts_correct else noise * pairing
    return HeldAgainst(statistics.fmean(here) if here else None, noise * pairing,
                       statistics.fmean(signals) if signals else None, signal_noise,
                       paid_seconds(b.run) if b is not None and b.run else None)  # type: ignore[arg-type]


def _outcome(c: Candidate, record: PlanRecord, queued: set, extra: PlannerNotes) -> str:
    over = extra.get("over_budget", {})
    unit = record.baseline_seconds or 0.0
    if not c.trials:
        if c.arm in over:
            seconds = over[c.arm]
            return f"over budget: predicted {seconds:.0f} s at the screen" if seconds >= 1 else \
                f"over budget: predicted {seconds:.2f} s at the screen"
        if c.arm in queued:
            return "screening"
        return "waiting"
    failed = next((t for t in c.trials if t.status == "failed"), None)
    if failed is not None:
        return "failed"
    skipped = next((t for t in c.trials if t.status == "skipped"), None)
    complete = [t for t in c.trials if t.status == "complete"]
    if not complete:
        return f"over budget: {skipped.error}" if skipped is not None else "waiting"
    last = complete[-1]
    at = last.fidelity if last.rung is None else last.rung
    rung = "screen" if at == record.screen_fidelity else "rung 2"
    if full_time(c, unit) > FASTER * unit:
        return f"stopped at the {rung}: not faster than the baseline (predicted over {FASTER:g} of its time)"
    if c.exact:
        return (f"the baseline's training at {full_time(c, unit) / unit:.2f} of its time (predicted): nothing to confirm, "
                "its results are the baseline's")
    if dropped(last, record.tolerance):
        return f"dropped at the {rung}: worse beyond the tolerance and its noise"
    short = "" if last.informative else " (too short to tell)"
    if skipped is not None:  # promoted, but rung 2 was not reached
        return f"promoted, over budget at rung 2 ({skipped.error}): the screen decides"
    if at == record.screen_fidelity and c.arm in extra.get("promoted", []):
        return "promoted: rung 2" + short
    if at == record.screen_fidelity and c.arm in extra.get("over_budget_promotion", {}):
        return (f"promoted, over budget at rung 2 (predicted {extra['over_budget_promotion'][c.arm]:.0f} s): the screen "
                "decides")
    return f"stopped at the {rung}" + short
