"""Numbers a sceptic accepts: time-to-accuracy, equal-epoch ratio, seeds, and a plain verdict."""

from __future__ import annotations

import copy
import math
import statistics
from dataclasses import asdict, is_dataclass
from typing import Any


def metric_value(run: dict[str, Any]) -> float | None:
    return (run.get("final") or {}).get(run["metric"])


def target_for(baseline: dict[str, Any], drop_points: float) -> float | None:
    """Baseline's final value, loosened by ``drop_points`` (accuracy points, or percent for loss-like metrics)."""
    final = metric_value(baseline)
    if final is None:
        return None
    if baseline["higher_is_better"]:
        return final - drop_points / 100.0
    return final * (1.0 + drop_points / 100.0)


def time_to_target(run: dict[str, Any], target: float | None) -> float | None:
    """Training seconds at the first evaluation that reached ``target`` (``None`` if never)."""
    if target is None:
        return None
    higher = run["higher_is_better"]
    for point in run.get("curve", []):
        value = point.get(run["metric"])
        if value is not None and (value >= target - 1e-12 if higher else value <= target + 1e-12):
            return point["train_seconds"]
    return None


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not b:
        return None
    return a / b


def compare_pair(runs: dict[str, dict[str, Any]], drop_points: float = 0.5, subject: str = "sifted",
                 reference: str = "baseline") -> dict[str, Any]:
    """Everything the compare table shows for one seed: ``subject`` (the sifted arm) against ``reference`` (the
    full baseline) on time, and against every other arm that ran (``vs``) on the final metric.

    Sifted minus equal-time is the value of the *trade* (fewer samples for the same time); sifted minus random-keep
    (same kept fraction, chosen uniformly) is the value of *selection* itself; sifted minus static-filter, the value
    of deciding online rather than once before training.
    """
    baseline, sifted = runs[reference], runs[subject]
    m = metric_info(baseline["metric"])
    target = target_for(baseline, drop_points)
    b_tta, s_tta = time_to_target(baseline, target), time_to_target(sifted, target)
    b_val, s_val = metric_value(baseline), metric_value(sifted)
    out = {
        "metric": baseline["metric"],
        "higher_is_better": baseline["higher_is_better"],
        "subject": subject,
        "target": target,
        "target_drop": drop_points,
        "baseline_time_to_target": b_tta,
        "sifted_time_to_target": s_tta,
        "time_to_target_ratio": _ratio(s_tta, b_tta),
        "baseline_target_fraction_of_run": _ratio(b_tta, baseline["train_seconds"]),
        "equal_epoch_ratio": _ratio(sifted["train_seconds"], baseline["train_seconds"]),
        "paid_ratio": _ratio(paid_seconds(sifted), baseline["train_seconds"]),
        "total_ratio": _ratio(sifted["total_seconds"], baseline["total_seconds"]),
        "speedup": _ratio(baseline["train_seconds"], sifted["train_seconds"]),
        "metric_delta": _diff(s_val, b_val, m),
        "predicted_ratio": sifted.get("predicted_ratio"),
        "scoring_cost": sifted.get("scoring_cost"),
        "achieved_keep": (sifted.get("keep") or {}).get("achieved"),
        "target_keep": (sifted.get("keep") or {}).get("target"),
        "vs": {arm: {"metric": metric_value(run), "seconds": run["train_seconds"],
                     "paid_ratio": _ratio(paid_seconds(run), baseline["train_seconds"]),
                     "diff": _diff(s_val, metric_value(run), m)}
               for arm, run in runs.items() if arm != subject},
    }
    noise = sifted.get("label_noise") or {}
    if noise.get("kept_share_after_delay") is not None:
        out["noisy_share_kept"] = noise["kept_share_after_delay"]
        out["noise_rate"] = noise["rate"]
    return out


def metric_info(name: str) -> Any:
    from siftcli.tasks import metric

    return metric(name)


def _diff(a: float | None, b: float | None, m: Any) -> float | None:
    """``a - b`` in the metric's reporting unit, signed so that positive means ``a`` is better."""
    if a is None or b is None:
        return None
    return (a - b) * m.scale * (1 if m.higher_is_better else -1)


def paid_seconds(run: dict[str, Any]) -> float:
    """A run's training clock with its reference paid in full, also where this run found it cached (amortised)."""
    ref = run.get("reference") or {}
    return run["train_seconds"] - float(ref.get("paid_seconds") or 0.0) + float(ref.get("build_seconds") or 0.0)


# Two-sided 95% Student-t quantiles by degrees of freedom (beyond the table: the next lower row's, conservative).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}
#: An accuracy claim needs at least this many seeds (each its own initial weights and split).
MIN_SEEDS = 5


def t975(df: int) -> float:
    return _T975[max(k for k in _T975 if k <= df)] if df >= 1 else math.inf


def paired(values: list[float]) -> dict[str, Any]:
    """Mean and standard error of per-seed paired differences, and what they allow us to say.

    ``beats``/``loses`` only when the 95% Student-t interval excludes zero *and* the mean is beyond two standard
    errors; fewer than :data:`MIN_SEEDS` seeds, or no spread at all, is ``too few seeds`` whatever the mean.
    """
    n = len(values)
    mean = statistics.fmean(values) if values else math.nan
    sd = statistics.stdev(values) if n > 1 else 0.0
    se = sd / math.sqrt(n) if n > 1 else math.nan
    half = t975(n - 1) * se if n > 1 else math.inf
    if n < MIN_SEEDS or sd == 0:
        status = "too few seeds"
    elif mean - half > 0 and mean > 2 * se:
        status = "beats"
    elif mean + half < 0 and -mean > 2 * se:
        status = "loses"
    else:
        status = "within noise"
    return {"mean": mean, "std": sd, "se": se, "n": n, "values": values, "ci95": [mean - half, mean + half],
            "status": status, "beats": status == "beats", "within_noise": status == "within noise"}


def summarise_seeds(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and spread of each ratio over seeds; paired statistics (:func:`paired`) of every difference."""
    out: dict[str, Any] = {"seeds": len(pairs)}
    for key in ("time_to_target_ratio", "equal_epoch_ratio", "paid_ratio", "speedup", "achieved_keep", "noisy_share_kept"):
        values = [p[key] for p in pairs if p.get(key) is not None]
        if values:
            out[key] = {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                        "n": len(values), "values": values}
    deltas = [p["metric_delta"] for p in pairs if p.get("metric_delta") is not None]
    if deltas:
        out["metric_delta"] = paired(deltas)
    out["vs"] = {}
    for arm in pairs[0].get("vs", {}):
        diffs = [p["vs"][arm]["diff"] for p in pairs if (p.get("vs", {}).get(arm) or {}).get("diff") is not None]
        if diffs:
            out["vs"][arm] = paired(diffs)
    return out


def verdict(pair: dict[str, Any], sift: dict[str, Any] | None, seeds: dict[str, Any] | None = None) -> str:
    """Plain sentences a user can act on: first against the honest opponents that ran (a baseline given the same
    time, random keep at the same rate, a static filter), then time-to-target; says what to do instead where
    sifting did not win."""
    ratio = pair.get("time_to_target_ratio")
    eq = pair.get("equal_epoch_ratio")
    pred = pair.get("predicted_ratio")
    m = metric_info(pair["metric"])
    parts: list[str] = []
    over = (seeds or {}).get("vs", {})
    outcomes = {arm: _outcome(v.get("diff"), over.get(arm), m.unit) for arm, v in pair.get("vs", {}).items() if arm != "baseline"}
    for arm, (status, text) in outcomes.items():
        parts.append(f"against {OPPONENT_NAMES.get(arm, arm)}: {status} ({text})")
    lost = [arm for arm, (status, _) in outcomes.items() if status in ("lost", "matched or beat it")]
    if lost:
        parts.insert(0, _instead(lost[0]))
    reached = (seeds or {}).get("time_to_target_ratio") or {}
    if seeds and reached and reached["n"] < seeds["seeds"]:  # some seeds got there, some never did
        parts.append(f"sifting reached the target in only {reached['n']} of {seeds['seeds']} seeds (time-to-target ratio "
                     f"{reached['mean']:.2f} where it did): not a reliable saving here")
    elif pair.get("sifted_time_to_target") is None:
        parts.append(f"sifting never reached the target ({_fmt(pair.get('target'))}): it did not pay here")
    elif ratio is not None and ratio <= 0.95:
        parts.append(f"sifting reached the target in {ratio:.2f}x the baseline's time to it")
    else:
        parts.append(f"sifting did not reach the target sooner (time-to-target ratio {_fmt(ratio)}); the baseline got there "
                     f"at {_fmt(pair.get('baseline_target_fraction_of_run'))} of its run")
    if pred is not None and pred >= 1.0:
        parts.append(f"at this beta the scoring pass costs more than it saves (s + a = {pred:.2f} >= 1): raise beta, "
                     "or use sift.scoring memory (remembered losses need no scoring forward)")
    elif eq is not None and eq > 0.97:
        parts.append(f"the epochs took {eq:.2f}x the baseline's time, so there was little to save")
    delta = (seeds or {}).get("metric_delta")
    if isinstance(delta, dict):
        parts.append(f"against the full baseline over {delta['n']} seeds: {_STATUS_WORDS[delta['status']]} "
                     f"({delta['mean']:+.2f}{m.unit} ± {_se(delta)})")
    elif pair.get("metric_delta") is not None:
        parts.append(f"it ended {pair['metric_delta']:+.2f}{m.unit} from the full baseline (one seed)")
    if not lost:
        parts.append(_next_step(pair, sift))
    text = "; ".join(parts) + "."
    return text[0].upper() + text[1:]


#: How the verdict names each opponent.
OPPONENT_NAMES = {"equal-time": "a baseline given the same time", "random-keep": "keeping the same fraction at random",
                  "static-filter": "the same fraction chosen once by the reference (static filter)"}
_STATUS_WORDS = {"beats": "ahead beyond two paired standard errors", "loses": "behind beyond two paired standard errors",
                 "within noise": "within the noise", "too few seeds": f"too few seeds to tell (needs {MIN_SEEDS}, with spread)"}


def _se(stat: dict[str, Any]) -> str:
    return "n/a" if not math.isfinite(stat.get("se", math.nan)) else f"{stat['se']:.2f} SE"


def _outcome(single: float | None, over_seeds: dict[str, Any] | None, unit: str) -> tuple[str, str]:
    """``(word, numbers)`` for one opponent: from the paired statistics over seeds, or from one seed (never "beat")."""
    if isinstance(over_seeds, dict) and over_seeds.get("n", 0) > 1:
        word = {"beats": "beat it", "loses": "lost", "within noise": "within noise",
                "too few seeds": "too few seeds to tell"}[over_seeds["status"]]
        return word, f"{over_seeds['mean']:+.2f}{unit} ± {_se(over_seeds)} over {over_seeds['n']} seeds"
    if single is None:
        return "no value", "n/a"
    word = "matched or beat it" if single <= 0 else "ahead on one seed, too few seeds to tell"
    return word, f"{single:+.2f}{unit}"


def _instead(arm: str) -> str:
    """What to do instead of sifting, from the opponent that matched or beat it."""
    return {"equal-time": "Train less: a baseline given the sifted run's time did as well",
            "random-keep": "Selection did not pay: keeping the same fraction at random did as well; train on a random subset",
            "static-filter": "Filter once instead: the static filter (siftcli filter writes the kept subset) did as well",
            }.get(arm, f"{arm} did as well as sifting")


def _next_step(pair: dict[str, Any], sift: dict[str, Any] | None) -> str:
    """The one change worth trying next, from where the time went."""
    beta = (sift or {}).get("beta")
    ratio = pair.get("time_to_target_ratio")
    if beta is None:
        return "next: enable sifting"
    if pair.get("sifted_time_to_target") is None:
        return f"next: try beta {beta / 2:g} or a longer sift_delay"
    if ratio is not None and ratio <= 0.95:
        return f"next: try beta {beta * 2:g} for a bigger saving, and --seeds 5 to confirm"
    return "next: a shorter sift_delay (sifting cannot speed up the part of the run it does not sift) or sift.mode calibrated"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _share(part: list[int], whole: list[int]) -> float | None:
    return sum(part) / sum(whole) if sum(whole) else None


def summarise_run(workload: Any, recipe: Any, sift: Any, loader: Any, arm: str, status: str, state: Any,
                  total_seconds: float, device: Any, world: int = 1) -> dict[str, Any]:
    """One run's metrics.json (of one rank, under torchrun: :func:`merge_ranks` joins them): final metric, times,
    phases, keep rates, the scoring cost s and the cost model.

    ``s`` = scoring seconds per scored sample over training seconds per trained sample; the predicted
    equal-epoch ratio is ``scored/raw * s + kept fraction`` (plus a reference model's share, if any).
    """
    import torch

    st = loader.stats
    final = state.curve[-1] if state.curve else {}
    raw, scored, trained, phases = st.raw_samples, st.scored_samples, state.trained, state.phases
    train_compute = phases["forward_backward"] + phases["optimizer"] + phases.get("teacher", 0.0)  # a teacher's forward too
    per_trained = train_compute / trained if trained else float("nan")
    s_cost = (phases["scoring"] / scored) / per_trained if scored and trained and per_trained > 0 else float("nan")
    achieved = trained / raw if raw else float("nan")
    keep = None
    if sift is not None:
        keep = {
            "target": st.target_keep_fraction, "achieved": achieved, "achieved_after_delay": st.sifted_kept_fraction,
            "sifted_raw": st.sifted_raw_samples, "sifted_kept": st.sifted_kept_samples,
            "per_epoch": [{"epoch": e.epoch, "raw": e.raw_samples, "kept": e.kept_samples, "kept_fraction": e.kept_fraction,
                           "after_delay": e.sifted_kept_fraction, "scored": e.scored_samples, "from_memory": e.memory_samples,
                           "sifted_raw": e.sifted_raw_samples, "sifted_kept": e.sifted_kept_samples}
                          for e in st.epochs],
            # kept samples dropped at epochs' ends so every rank yields as many batches (torchrun only)
            "dropped_to_sync": st.dropped_to_sync,
            # raw batch at which sifting started (the delay's end; chosen by the rule with sift_delay auto), and
            # at which the anneal began keeping everything again; None: never
            "sift_started_at": st.sift_started_at, "anneal_started_at": st.anneal_started_at,
            "scored_after_first_epoch": _share([e.scored_samples for e in st.epochs[1:]], [e.raw_samples for e in st.epochs[1:]]),
            "nonfinite": st.nonfinite, "trace": state.keep_trace,
        }
    noise = None
    if getattr(workload, "noisy", None) is not None:
        noise = {"rate": float(workload.noisy.float().mean()), "flipped": int(workload.noisy.sum()),
                 "kept_flipped": state.noisy_kept, "kept_flipped_after_delay": state.noisy_kept_after_delay,
                 "kept_share": state.noisy_kept / st.kept_samples if st.kept_samples else None,
                 "kept_share_after_delay": (state.noisy_kept_after_delay / st.sifted_kept_samples
                                            if st.sifted_kept_samples and sift is not None else None)}
    groups = None
    if getattr(workload, "groups", None) is not None:  # which part of a mixed pool the kept samples came from
        sizes = torch.bincount(workload.groups, minlength=len(workload.group_names)).tolist()
        kept = (state.group_kept + [0] * len(sizes))[: len(sizes)]
        total = sum(kept)
        groups = {name: {"samples": n, "kept": k, "share_of_kept": k / total if total else None,
                         "share_of_data": n / max(1, sum(sizes))}
                  for name, n, k in zip(workload.group_names, sizes, kept)}
    predicted = None
    if sift is not None and raw and math.isfinite(s_cost):
        predicted = (scored / raw) * s_cost + achieved
    elif sift is not None and raw and not scored:
        predicted = achieved  # a rule that never scores (random keep)
    if predicted is not None and phases.get("reference") and train_compute and trained:
        predicted += phases["reference"] / (per_trained * raw)  # the reference's cost, in epochs of training
    return {
        "status": status,
        "arm": arm,
        "task": workload.task,
        "metric": workload.metric,
        "higher_is_better": workload.higher_is_better,
        "final": {k: final.get(k) for k in ("loss", workload.metric) if k in final},
        "train_seconds": state.train_clock,
        "total_seconds": total_seconds,
        "optimizer_steps": state.step,
        "raw_samples": raw,
        "samples_scored": scored,
        "samples_from_memory": st.memory_samples,
        "samples_trained": trained,
        "samples_teacher": state.teacher_samples if getattr(recipe, "distill", None) is not None else None,
        # how the run was spread: the global batch is the per-rank batch times the ranks; the learning rate
        # is the recipe's, never rescaled (README, Scale out, says how to scale it)
        "parallel": {"world_size": world, "per_rank_batch": recipe.batch_size, "global_batch": recipe.batch_size * world,
                     "lr": recipe.optim.lr, "optimizer_steps": state.step, "zero": bool(recipe.optim.zero and world > 1)},
        "keep": keep,
        "label_noise": noise,
        "groups": groups,
        "phases": phases,
        "scoring_cost": s_cost,
        "predicted_ratio": predicted,
        "curve": state.curve,
        "settings": recipe.model_dump(mode="json", exclude={"model", "data"}),
        "sift": {**(asdict(sift) if is_dataclass(sift) else dict(sift)), "scoring_precision": loader.precision,
                 "scoring_precision_timings": loader.scorer.timings or None} if sift else None,
        "device": str(device),
        "torch": torch.__version__,
    }


_SUMMED = ("raw_samples", "samples_scored", "samples_from_memory", "samples_trained", "samples_teacher")


def merge_ranks(runs: list[dict[str, Any]], ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """One metrics.json from every rank's (torchrun): rank 0's clock, curve and phases (evaluation is already
    global, and ranks step together), counts summed over ranks with the fractions recomputed from them, and
    each rank's own numbers (``ranks``: samples, kept fraction, steps, seconds, a fingerprint of its weights)."""
    out = copy.deepcopy(runs[0])
    for key in _SUMMED:
        if out.get(key) is not None:
            out[key] = sum(r[key] for r in runs)
    raw, trained = out["raw_samples"], out["samples_trained"]
    keep = out.get("keep")
    if keep is not None:
        keeps = [r["keep"] for r in runs]
        for key in ("sifted_raw", "sifted_kept", "dropped_to_sync"):
            keep[key] = sum(k[key] for k in keeps)
        keep["achieved"] = trained / raw if raw else None
        keep["achieved_after_delay"] = keep["sifted_kept"] / keep["sifted_raw"] if keep["sifted_raw"] else None
        for i, epoch in enumerate(keep["per_epoch"]):
            for key in ("raw", "kept", "scored", "from_memory", "sifted_raw", "sifted_kept"):
                epoch[key] = sum(k["per_epoch"][i][key] for k in keeps if i < len(k["per_epoch"]))
            epoch["kept_fraction"] = epoch["kept"] / epoch["raw"] if epoch["raw"] else None
            epoch["after_delay"] = epoch["sifted_kept"] / epoch["sifted_raw"] if epoch["sifted_raw"] else None
        later = keep["per_epoch"][1:]
        keep["scored_after_first_epoch"] = _share([e["scored"] for e in later], [e["raw"] for e in later])
        keep["nonfinite"] = sum(k["nonfinite"] for k in keeps)
        if out.get("predicted_ratio") is not None and out.get("scoring_cost") is not None and raw:
            out["predicted_ratio"] = out["samples_scored"] / raw * out["scoring_cost"] + trained / raw
    noise = out.get("label_noise")
    if noise is not None and keep is not None:
        kept_all = sum(e["kept"] for e in keep["per_epoch"])
        noise["kept_flipped"] = sum(r["label_noise"]["kept_flipped"] for r in runs)
        noise["kept_flipped_after_delay"] = sum(r["label_noise"]["kept_flipped_after_delay"] for r in runs)
        noise["kept_share"] = noise["kept_flipped"] / kept_all if kept_all else None
        noise["kept_share_after_delay"] = (noise["kept_flipped_after_delay"] / keep["sifted_kept"]
                                           if keep["sifted_kept"] else None)
    out["parallel"]["ranks"] = ranks
    out["parallel"]["ranks_in_sync"] = len({r["weights_sha1"] for r in ranks}) == 1
    return out
