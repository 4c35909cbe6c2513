"""One run's ``metrics.json``: what the loop measured, summarised (final metric, clock, phases, keep rates, the
scoring cost ``s`` and the cost model, noisy labels and groups kept), and under torchrun every rank's merged."""

from __future__ import annotations

import copy
import functools
import math
from dataclasses import asdict, is_dataclass
from typing import Any

import torch

from siftcli.sift.stats import add_counts
from siftcli.tasks import metric
from siftcli.training.record import GroupStats, KeepStats, NoiseStats, RankStats, RunMetrics


def _share(part: list[int], whole: list[int]) -> float | None:
    return sum(part) / sum(whole) if sum(whole) else None


def summarise_run(workload: Any, recipe: Any, run: Any, arm: str, status: str, total_seconds: float,
                  world: int = 1) -> RunMetrics:
    """One run's metrics.json (of one rank, under torchrun: :func:`merge_ranks` joins them), section by section:
    final metric, times, phases, keep rates, the scoring cost s and the cost model, flipped labels, groups.

    ``s`` = scoring seconds per scored sample over training seconds per trained sample; the predicted
    equal-epoch ratio is ``scored/raw * s + kept fraction`` (plus a reference model's share, if any).
    """
    sift, loader, state, device = run.sift, run.loader, run.state, run.device
    st = loader.stats
    final = state.curve[-1] if state.curve else {}
    raw, scored, trained, phases = st.raw_samples, st.scored_samples, state.trained, state.phases
    distill = getattr(recipe, "distill", None)
    train_compute = phases["forward_backward"] + phases["optimizer"] + phases.get("teacher", 0.0)  # a teacher's forward too
    per_trained = train_compute / trained if trained else float("nan")
    s_cost = (phases["scoring"] / scored) / per_trained if scored and trained and per_trained > 0 else float("nan")
    achieved = trained / raw if raw else float("nan")
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
        "higher_is_better": metric(workload.metric).higher_is_better,
        "final": {k: final.get(k) for k in ("loss", workload.metric, "loss_sd") if k in final},
        "train_seconds": state.train_clock,
        "total_seconds": total_seconds,
        "optimizer_steps": state.step,
        "raw_samples": raw,
        "samples_scored": scored,
        "samples_from_memory": st.memory_samples,
        "samples_trained": trained,
        "samples_teacher": state.teacher_samples if distill is not None else None,
        "teacher": {"cached": bool(distill.cache), "inputs_change": recipe.data.augment is not None} if distill else None,
        # the learning rate is the recipe's, never rescaled (docs/scale-out.md says how to scale it)
        "parallel": {"world_size": world, "per_rank_batch": recipe.batch_size, "global_batch": recipe.batch_size * world,
                     "lr": recipe.optim.lr, "optimizer_steps": state.step, "zero": bool(recipe.optim.zero and world > 1)},
        "keep": _keep(st, state, achieved) if sift is not None else None,
        "label_noise": _noise(workload, state, st, sifted=sift is not None),
        "groups": _groups(workload, state),
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


def _keep(st: Any, state: Any, achieved: float) -> KeepStats:
    """The keep section: what the rule kept, per epoch, when it started, and how old its scores were."""
    later = st.epochs[1:]
    return {
        "target": st.target_keep_fraction, "achieved": achieved, "achieved_after_delay": st.sifted_kept_fraction,
        "sifted_raw": st.sifted_raw_samples, "sifted_kept": st.sifted_kept_samples,
        "per_epoch": [{"epoch": e.epoch, "raw": e.raw_samples, "kept": e.kept_samples, "kept_fraction": e.kept_fraction,
                       "after_delay": e.sifted_kept_fraction, "scored": e.scored_samples, "from_memory": e.memory_samples,
                       "sifted_raw": e.sifted_raw_samples, "sifted_kept": e.sifted_kept_samples}
                      for e in st.epochs],
        "dropped_to_sync": st.dropped_to_sync,
        "sift_started_at": st.sift_started_at, "anneal_started_at": st.anneal_started_at,
        "scored_after_first_epoch": _share([e.scored_samples for e in later], [e.raw_samples for e in later]),
        "nonfinite": st.nonfinite, "trace": state.keep_trace,
        "score_ages": list(st.score_ages), "score_unknown": st.score_unknown, "kept_overlap": list(st.kept_overlap),
    }


def _noise(workload: Any, state: Any, st: Any, sifted: bool) -> NoiseStats | None:
    """Where data.label_noise flipped labels: how many of them were kept."""
    if getattr(workload, "noisy", None) is None:
        return None
    return {"rate": float(workload.noisy.float().mean()), "flipped": int(workload.noisy.sum()),
            "kept_flipped": state.noisy_kept, "kept_flipped_after_delay": state.noisy_kept_after_delay,
            "kept_share": state.noisy_kept / st.kept_samples if st.kept_samples else None,
            "kept_share_after_delay": (state.noisy_kept_after_delay / st.sifted_kept_samples
                                       if st.sifted_kept_samples and sifted else None)}


def _groups(workload: Any, state: Any) -> dict[str, GroupStats] | None:
    """Which part of a mixed pool (data.group_column) the kept samples came from."""
    if getattr(workload, "groups", None) is None:
        return None
    sizes = torch.bincount(workload.groups, minlength=len(workload.group_names)).tolist()
    kept = (state.group_kept + [0] * len(sizes))[: len(sizes)]
    total = sum(kept)
    return {name: {"samples": n, "kept": k, "share_of_kept": k / total if total else None, "share_of_data": n / max(1, sum(sizes))}
            for name, n, k in zip(workload.group_names, sizes, kept)}


_SUMMED = ("raw_samples", "samples_scored", "samples_from_memory", "samples_trained", "samples_teacher")


def merge_ranks(runs: list[RunMetrics], ranks: list[RankStats]) -> RunMetrics:
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
        keep["score_ages"] = functools.reduce(add_counts, (k.get("score_ages") or [] for k in keeps), [])
        keep["score_unknown"] = sum(k.get("score_unknown", 0) for k in keeps)
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
