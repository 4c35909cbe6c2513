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


def compare_pair(baseline: dict[str, Any], sifted: dict[str, Any], drop_points: float = 0.5,
                 equal_time: dict[str, Any] | None = None, random_keep: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the compare table shows, for one seed.

    Sifted minus equal-time is the value of the *trade* (fewer samples for the same time); sifted
    minus random-keep (same kept fraction, chosen uniformly) is the value of *selection* itself.
    """
    target = target_for(baseline, drop_points)
    b_tta, s_tta = time_to_target(baseline, target), time_to_target(sifted, target)
    b_val, s_val = metric_value(baseline), metric_value(sifted)
    scale = 100.0 if baseline["metric"] == "accuracy" else 1.0
    delta = (s_val - b_val) * scale if b_val is not None and s_val is not None else None
    out = {
        "metric": baseline["metric"],
        "higher_is_better": baseline["higher_is_better"],
        "target": target,
        "target_drop": drop_points,
        "baseline_time_to_target": b_tta,
        "sifted_time_to_target": s_tta,
        "time_to_target_ratio": _ratio(s_tta, b_tta),
        "baseline_target_fraction_of_run": _ratio(b_tta, baseline["train_seconds"]),
        "equal_epoch_ratio": _ratio(sifted["train_seconds"], baseline["train_seconds"]),
        "total_ratio": _ratio(sifted["total_seconds"], baseline["total_seconds"]),
        "speedup": _ratio(baseline["train_seconds"], sifted["train_seconds"]),
        "metric_delta": delta,
        "predicted_ratio": sifted.get("predicted_ratio"),
        "scoring_cost": sifted.get("scoring_cost"),
        "achieved_keep": (sifted.get("keep") or {}).get("achieved"),
        "target_keep": (sifted.get("keep") or {}).get("target"),
    }
    if equal_time is not None:
        e_val = metric_value(equal_time)
        out["equal_time_metric"] = e_val
        out["equal_time_seconds"] = equal_time["train_seconds"]
        out["sifted_minus_equal_time"] = (s_val - e_val) * scale if e_val is not None and s_val is not None else None
    if random_keep is not None:
        r_val = metric_value(random_keep)
        out["random_keep_metric"] = r_val
        out["random_keep_seconds"] = random_keep["train_seconds"]
        out["sifted_minus_random"] = (s_val - r_val) * scale if r_val is not None and s_val is not None else None
    noise = sifted.get("label_noise") or {}
    if noise.get("kept_share_after_delay") is not None:
        out["noisy_share_kept"] = noise["kept_share_after_delay"]
        out["noise_rate"] = noise["rate"]
    return out


def summarise_seeds(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and spread of each number over seeds; a difference inside 2 standard errors is noise."""
    keys = ["time_to_target_ratio", "equal_epoch_ratio", "metric_delta", "speedup", "achieved_keep", "sifted_minus_equal_time",
            "sifted_minus_random", "noisy_share_kept"]
    out: dict[str, Any] = {"seeds": len(pairs)}
    for key in keys:
        values = [p[key] for p in pairs if p.get(key) is not None]
        if not values:
            continue
        mean = statistics.fmean(values)
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        out[key] = {"mean": mean, "std": sd, "n": len(values), "values": values}
    for key in ("metric_delta", "sifted_minus_equal_time", "sifted_minus_random"):
        delta = out.get(key)
        if delta and delta["n"] > 1:
            se = delta["std"] / math.sqrt(delta["n"])
            delta["within_noise"] = abs(delta["mean"]) <= 2 * se
            delta["beats"] = delta["mean"] > 2 * se  # ahead by more than two standard errors
    return out


def verdict(pair: dict[str, Any], sift: dict[str, Any] | None, seeds: dict[str, Any] | None = None) -> str:
    """Plain sentences a user can act on: first against the honest opponents (a baseline given the same time,
    random keep at the same rate) where they ran, then time-to-target; says "train less" when that is the answer."""
    ratio = pair.get("time_to_target_ratio")
    eq = pair.get("equal_epoch_ratio")
    delta = pair.get("metric_delta")
    pred = pair.get("predicted_ratio")
    unit = " points" if pair["metric"] == "accuracy" else ""
    parts: list[str] = []
    eqt, rnd = pair.get("sifted_minus_equal_time"), pair.get("sifted_minus_random")
    won_trade = _beats(eqt, (seeds or {}).get("sifted_minus_equal_time"))
    if eqt is not None:
        parts.append(f"Sifting beat a baseline given the same time ({eqt:+.2f}{unit})" if won_trade else
                     f"Train less: the equal-time baseline matched or beat the sifted run ({-eqt:+.2f}{unit})")
    if rnd is not None:
        won = _beats(rnd, (seeds or {}).get("sifted_minus_random"))
        parts.append(f"selection {'beat' if won else 'did not beat'} keeping the same fraction at random ({rnd:+.2f}{unit})")
    reached = (seeds or {}).get("time_to_target_ratio") or {}
    if seeds and reached and reached["n"] < seeds["seeds"]:  # some seeds got there, some never did
        parts.append(
            f"Sifting reached the target in only {reached['n']} of {seeds['seeds']} seeds (time-to-target ratio "
            f"{reached['mean']:.2f} where it did) — not a reliable saving here"
        )
    elif pair.get("sifted_time_to_target") is None:
        parts.append(f"Sifting never reached the target ({_fmt(pair.get('target'))}) — it did not pay here")
    elif ratio is not None and ratio <= 0.95:
        parts.append(f"Sifting reached the target in {ratio:.2f}x the baseline's time to it")
        if delta is not None:
            parts.append(f"and ended {delta:+.2f}{unit} from the baseline")
    elif won_trade and delta is not None and delta > 0:
        parts.append(f"it ended {delta:+.2f}{unit} above the full baseline, which reached its own final value at "
                     f"{_fmt(pair.get('baseline_target_fraction_of_run'))} of its run and did not improve after")
    else:
        parts.append(
            f"Sifting did not reach the target sooner (time-to-target ratio {_fmt(ratio)}); "
            f"the baseline itself got there at {_fmt(pair.get('baseline_target_fraction_of_run'))} of its run, "
            "so the honest saving is to train the baseline for fewer steps"
        )
    if pred is not None and pred >= 1.0:
        parts.append(f"at this beta the scoring pass costs more than it saves (s + a = {pred:.2f} >= 1): raise beta, "
                     "or use sift.scoring memory (remembered losses need no scoring forward)")
    elif eq is not None and eq > 0.97:
        parts.append(f"the epochs took {eq:.2f}x the baseline's time, so there was little to save")
    if seeds and isinstance(seeds.get("metric_delta"), dict) and seeds["metric_delta"].get("within_noise"):
        parts.append(f"over {seeds['seeds']} seeds the accuracy difference is within the noise")
    parts.append(_next_step(pair, sift))
    return "; ".join(parts) + "."


def _beats(single: float | None, over_seeds: dict[str, Any] | None) -> bool:
    """Ahead by more than two standard errors over seeds; with one seed, ahead by more than 0.25."""
    if isinstance(over_seeds, dict) and over_seeds.get("n", 0) > 1:
        return bool(over_seeds.get("beats"))
    return single is not None and single > 0.25


def _next_step(pair: dict[str, Any], sift: dict[str, Any] | None) -> str:
    """The one change worth trying next, from where the time went."""
    beta = (sift or {}).get("beta")
    ratio = pair.get("time_to_target_ratio")
    if beta is None:
        return "next: enable sifting"
    if pair.get("sifted_time_to_target") is None:
        return f"next: try beta {beta / 2:g} or a longer sift_delay"
    if ratio is not None and ratio <= 0.95:
        return f"next: try beta {beta * 2:g} for a bigger saving, and --seeds 3 --equal-time to confirm"
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
