"""Plain functions behind the CLI: one run and a comparison against honest opponents (the sweep: :mod:`siftcli.sweep`).

They work without the CLI (import and call them) and write everything under a run folder.
``prepare`` and ``run_arm`` are public so scripts build other experiments from the same pieces.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from siftcli.analysis import compare_pair, summarise_seeds, verdict
from siftcli.config import Recipe, recipe_to_yaml
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.runio import atomic_write_json, atomic_write_text, claim, ensure_writable, make_run_dir, read_json

Event = Callable[[str, dict[str, Any]], None]
ARMS = ("baseline", "sifted", "equal-time", "random-keep")


def preflight(recipe: Recipe) -> None:
    """Fail on the device before loading anything or creating a run folder; under torchrun, join the process group."""
    from siftcli import parallel
    from siftcli.builders import resolve_device

    device = resolve_device(recipe.device, recipe.precision)
    parallel.init(device.type)
    if recipe.sift.enabled and recipe.sift.precision != "auto":
        try:
            resolve_device(device.type, recipe.sift.precision)
        except SiftcliError as exc:
            raise SiftcliError(f"sift.{exc}") from None


def prepare(recipe: Recipe, output: str | None, suffix: str) -> tuple[Any, Path, dict[str, Any]]:
    """Device check, workload, then the run folder (so bad input leaves none), and the initial weights."""
    from siftcli.builders import build_workload

    preflight(recipe)
    workload = build_workload(recipe)
    run_dir = make_run_dir(output, recipe.name, suffix=suffix)
    atomic_write_text(run_dir / "recipe.yaml", recipe_to_yaml(recipe))
    _write_label_noise(run_dir, workload)
    return workload, run_dir, copy.deepcopy(workload.model.state_dict())


def _write_label_noise(run_dir: Path, workload: Any) -> None:
    """Which training samples ``data.label_noise`` flipped, so every share reported can be checked."""
    if getattr(workload, "noisy", None) is not None:
        flipped = workload.noisy.nonzero().flatten().tolist()
        atomic_write_json(run_dir / "label_noise.json", {"rate": len(flipped) / len(workload.noisy), "flipped": flipped})


def run_arm(workload: Any, initial: dict[str, Any], recipe: Recipe, arm_dir: Path, arm: str, *, sift: bool = False,
            on_event: Event | None = None, **sift_changes: Any) -> dict[str, Any]:
    """One arm from the shared initial weights: the recipe's baseline, or (``sift=True``) its sifted run.

    ``sift_changes`` override the engine config (e.g. ``mode="random", keep_fraction=0.4``). A recipe
    with ``sift.score: reducible`` first trains its cross-fitted reference, on this arm's clock.
    """
    from siftcli.builders import sift_config
    from siftcli.train import train

    ensure_writable(arm_dir)
    if on_event is not None:
        on_event("arm", {"arm": arm_dir.name, "seed": recipe.seed})
    cfg = sift_config(recipe, len(workload.train_data), **sift_changes) if sift else None
    reference = _reference(cfg, workload, recipe, initial, arm_dir)
    workload.model.load_state_dict(initial)
    return train(workload, recipe, cfg, reference=reference, run_dir=arm_dir, arm=arm, on_event=on_event)


def _reference(cfg: Any, workload: Any, recipe: Recipe, initial: dict[str, Any], arm_dir: Path) -> Any:
    """Cross-fitted reference losses when the rule ranks reducible loss (else ``None``), with ``reference.json``."""
    if cfg is None or cfg.score != "reducible":
        return None
    from siftcli.reference import cross_fitted_reference

    reference, ref_runs = cross_fitted_reference(workload, recipe, initial)
    atomic_write_json(arm_dir / "reference.json", {"seconds": reference.seconds, "runs": [_brief(m) for m in ref_runs]})
    return reference


def run_train(recipe: Recipe, *, output: str | None = None, sift: bool | None = None, on_event: Event | None = None,
              resume: str | None = None, workload: Any = None) -> tuple[Path, dict[str, Any]]:
    """One fine-tune, sifted when the recipe (or ``sift``) says so."""
    from siftcli.builders import build_workload, sift_config
    from siftcli.train import train

    if resume:
        run_dir = Path(resume)
        if not run_dir.is_dir():
            raise SiftcliError(f"--resume {resume}: folder not found")
        ensure_writable(run_dir)
        claim(run_dir)
    if resume:
        recipe = _resumable(recipe, run_dir)
    use_sift = recipe.sift.enabled if sift is None else sift
    preflight(recipe)
    workload = workload or build_workload(recipe)  # before the run folder: bad data leaves no empty folder
    if not resume:
        run_dir = make_run_dir(output, recipe.name)
        atomic_write_text(run_dir / "recipe.yaml", recipe_to_yaml(recipe))
        _write_label_noise(run_dir, workload)
    if use_sift and not resume and on_event is not None:
        warning = pilot_check(recipe, workload)
        if warning:
            on_event("warning", {"message": warning})
    cfg = sift_config(recipe, len(workload.train_data)) if use_sift else None
    if resume and cfg is not None and cfg.score == "reducible":
        raise SiftcliError(f"--resume {resume}: runs with sift.score reducible cannot resume yet; start the run again")
    reference = _reference(cfg, workload, recipe, copy.deepcopy(workload.model.state_dict()), run_dir)
    metrics = train(workload, recipe, cfg, reference=reference, run_dir=run_dir, arm="sifted" if use_sift else "baseline",
                    on_event=on_event, resume=bool(resume))
    if metrics["status"] == "completed":
        from siftcli.builders import save_model

        save_model(workload, run_dir / "model")
    _maybe_plot(run_dir, [metrics])
    return run_dir, metrics


# Keys a resumed run may change: they do not touch the schedule, the data order or the saved state.
RESUMABLE_CHANGES = ("eval.", "log_every_steps", "checkpoint_every_steps", "num_workers", "name")


def _resumable(recipe: Recipe, run_dir: Path) -> Recipe:
    """The recipe a resume runs: the given one, if it differs from the saved one only where that is safe.

    The first other difference is refused in one line; allowed changes are written to the saved recipe.
    """
    from siftcli.config import load_recipe

    saved_path = run_dir / "recipe.yaml"
    if not saved_path.exists():
        return recipe
    saved = load_recipe(saved_path)
    old, new = _flatten(saved.model_dump(mode="json")), _flatten(recipe.model_dump(mode="json"))
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    for key in changed:
        if not key.startswith(RESUMABLE_CHANGES):
            raise SiftcliError(f"--resume {run_dir}: {key} is {old.get(key)!r} in the saved recipe but {new.get(key)!r} now; "
                               f"a resumed run needs the same {key} (only {', '.join(RESUMABLE_CHANGES)} may change)")
    if changed:
        atomic_write_text(saved_path, recipe_to_yaml(recipe))
    return recipe


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v and k != "config_overrides":
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _maybe_plot(run_dir: Path, runs: list[dict[str, Any]]) -> list[str]:
    from siftcli import parallel
    from siftcli.plots import write_plots

    if not parallel.is_main():
        return []
    try:
        return [str(p) for p in write_plots(run_dir, runs)]
    except ImportError:  # matplotlib missing: plots are a nicety, never a failure
        return []


def equal_time_steps(baseline: dict[str, Any], sifted: dict[str, Any]) -> int:
    """Steps a baseline can take in the sifted run's training wall-clock (reference cost included)."""
    per_step = baseline["train_seconds"] / max(1, baseline["optimizer_steps"])
    return max(1, int(round(sifted["train_seconds"] / per_step)))


def equal_time_recipe(recipe: Recipe, baseline: dict[str, Any], sifted: dict[str, Any]) -> Recipe:
    """The baseline recipe capped at the sifted run's wall-clock (schedule fully decayed at that step).

    When the sifted run took longer than the baseline (a costly reference, say), the opponent gets
    the extra epochs it needs to fill that time, so the comparison stays one of equal time.
    """
    steps = equal_time_steps(baseline, sifted)
    per_epoch = max(1, baseline["optimizer_steps"]) / recipe.epochs
    return recipe.model_copy(update={"max_steps": steps, "epochs": max(recipe.epochs, float(math.ceil(steps / per_epoch)))})


def random_keep_fraction(sifted: dict[str, Any]) -> float:
    """The kept fraction the random-keep control copies: what the sifted run achieved after its delay."""
    keep = sifted.get("keep") or {}
    value = keep.get("achieved_after_delay")
    return float(value) if value is not None and 0 < value <= 1 else float(keep.get("target") or 1.0)


def random_keep_changes(sifted: dict[str, Any]) -> dict[str, Any]:
    """The engine settings of the random-keep control: the sifted run's kept fraction after its delay, and, where
    that run chose its start (``sift_delay: auto``), the raw batch it started at (never started: keep everything)."""
    changes: dict[str, Any] = {"mode": "random", "score": "loss", "keep_fraction": random_keep_fraction(sifted)}
    if (sifted.get("sift") or {}).get("sift_delay") == "auto":
        started = (sifted.get("keep") or {}).get("sift_started_at")
        changes["sift_delay"] = 0 if started is None else int(started)
        if started is None:
            changes["keep_fraction"] = 1.0
    return changes


def run_compare(recipe: Recipe, *, output: str | None = None, seeds: int = 1, equal_time: bool = False,
                random_keep: bool = False, on_event: Event | None = None, pilot: bool = True) -> tuple[Path, dict[str, Any]]:
    """Baseline and sifted runs of one recipe (same seed, data order, hyperparameters and initial weights),
    and optionally the honest opponents: an equal-time baseline and a random-keep control."""
    if seeds < 1:
        raise SiftcliError(f"--seeds must be at least 1, got {seeds}")
    pairs: list[dict[str, Any]] = []
    all_runs: list[dict[str, dict[str, Any]]] = []
    workload, run_dir, initial = prepare(recipe, output, "-compare")
    warning = pilot_check(recipe, workload) if pilot else None
    if warning and on_event is not None:
        on_event("warning", {"message": warning})
    try:
        for i in range(seeds):
            r = recipe.model_copy(update={"seed": recipe.seed + i})
            folder = run_dir / (f"seed{r.seed}" if seeds > 1 else "")
            arms: dict[str, dict[str, Any]] = {}
            all_runs.append(arms)
            arms["baseline"] = run_arm(workload, initial, r, folder / "baseline", "baseline", on_event=on_event)
            arms["sifted"] = run_arm(workload, initial, r, folder / "sifted", "sifted", sift=True, on_event=on_event)
            if equal_time:  # a baseline sized to the sifted run's wall-clock, schedule fully decayed
                arms["equal-time"] = run_arm(workload, initial, equal_time_recipe(r, arms["baseline"], arms["sifted"]),
                                             folder / "equal-time", "equal-time", on_event=on_event)
            if random_keep:  # same kept fraction after the same delay, chosen uniformly: no selection
                arms["random-keep"] = run_arm(workload, initial, r, folder / "random-keep", "random-keep", sift=True,
                                              on_event=on_event, **random_keep_changes(arms["sifted"]))
            pair = compare_pair(arms["baseline"], arms["sifted"], recipe.eval.target_drop, arms.get("equal-time"),
                                arms.get("random-keep"))
            pair["seed"] = r.seed
            pairs.append(pair)
    except RunInterrupted as exc:
        finished = [{arm: _brief(m) for arm, m in arms.items()} for arms in all_runs]
        atomic_write_json(run_dir / "compare.json", {"status": "interrupted", "recipe": recipe.name, "runs": finished, "pairs": pairs})
        raise RunInterrupted(str(run_dir), resumable=False, signal=exc.signal) from None
    summary = summarise_seeds(pairs) if seeds > 1 else None
    result = {
        "status": "completed",
        "recipe": recipe.name,
        "runs": [{arm: _brief(m) for arm, m in arms.items()} for arms in all_runs],
        "pairs": pairs,
        "seeds_summary": summary,
        "pilot_warning": warning,
        "verdict": verdict(pairs[0] if seeds == 1 else _mean_pair(pairs), all_runs[0]["sifted"]["sift"], summary),
    }
    result["plots"] = _maybe_plot(run_dir, [all_runs[0][a] for a in ARMS if a in all_runs[0]])
    atomic_write_json(run_dir / "compare.json", result)
    return run_dir, result


def _mean_pair(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    out = dict(pairs[0])
    for key, value in pairs[0].items():
        values = [p[key] for p in pairs if isinstance(p.get(key), (int, float)) and not isinstance(p.get(key), bool)]
        if isinstance(value, (int, float)) and not isinstance(value, bool) and len(values) == len(pairs):
            out[key] = sum(values) / len(values)
    if any(p.get("sifted_time_to_target") is None for p in pairs):
        out["sifted_time_to_target"] = None
    return out


def _brief(m: dict[str, Any]) -> dict[str, Any]:
    """A run's numbers without its long traces (those stay in the arm's metrics.json)."""
    keep = dict(m["keep"]) if m.get("keep") else None
    if keep:
        keep.pop("trace", None)
    return {**{k: v for k, v in m.items() if k not in ("curve", "keep", "settings")}, "keep": keep,
            "curve": [{k: p.get(k) for k in ("step", "train_seconds", m["metric"], "loss")} for p in m.get("curve", [])]}


_RUN_FIELDS = {"metric": str, "higher_is_better": bool, "final": dict, "train_seconds": (int, float),
               "total_seconds": (int, float), "curve": list}


def compare_run_dirs(dir_a: str, dir_b: str, drop_points: float = 0.5) -> dict[str, Any]:
    """Compare two finished run folders (baseline first) without training."""
    runs = []
    for d in (dir_a, dir_b):
        path = Path(d)
        if not path.is_dir():
            raise SiftcliError(f"{d}: run folder not found")
        m = read_json(path / "metrics.json")
        if not isinstance(m, dict) or not all(isinstance(m.get(k), t) for k, t in _RUN_FIELDS.items()):
            raise SiftcliError(f"{d}/metrics.json: not the metrics of a siftcli run (expected {', '.join(_RUN_FIELDS)})")
        if m.get("status") != "completed":
            raise SiftcliError(f"{d}: the run did not finish (status {m.get('status')!r}); a verdict needs two completed runs")
        runs.append(m)
    a, b = runs
    if a.get("metric") != b.get("metric"):
        raise SiftcliError(f"{dir_b}: measures {b.get('metric')!r} but {dir_a} measures {a.get('metric')!r}; cannot compare")
    pair = compare_pair(a, b, drop_points)
    return {"runs": [{"baseline": _brief(a), "sifted": _brief(b)}], "pairs": [pair], "seeds_summary": None,
            "pilot_warning": None, "verdict": verdict(pair, b.get("sift")), "plots": []}


def pilot_check(recipe: Recipe, workload: Any, steps: int = 6) -> str | None:
    """Time a few training steps and scoring passes; warn when s + a >= 1 (sifting cannot pay).

    Runs on a throw-away copy of the model so the real runs start from the same weights.
    """
    import time

    import torch

    from siftcli.builders import make_optimizer, resolve_device, sift_config
    from siftcli.sift.precision import autocast, fast_bf16, scoring_precision

    if not recipe.sift.enabled:
        return None
    device = resolve_device(recipe.device, recipe.precision)
    model = copy.deepcopy(workload.model).to(device)
    rows = workload.train_data[: recipe.batch_size]
    if len(rows) < 2:
        return None
    batch = {k: v.to(device) for k, v in workload.collate(rows).items()}
    opt = make_optimizer(model, 0.0, 0.0)  # the real optimizer's cost, with no effect on the copy
    sp = scoring_precision(recipe.sift.precision, device, recipe.precision)
    precisions = ("fp32", "bf16") if sp == "auto" else (sp,)  # auto: the scorer will keep the faster, so does this
    train_t: list[float] = []
    score_t: dict[str, list[float]] = {p: [] for p in precisions}
    for i in range(steps + 1):
        t0 = time.perf_counter()
        with autocast(device, recipe.precision):
            loss = workload.loss_fn(model, batch).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        trained_at = time.perf_counter()
        model.eval()
        for precision in precisions:
            t1 = time.perf_counter()
            with torch.inference_mode(), autocast(device, precision):
                workload.loss_fn(model, batch)
            if i:  # the first step warms caches
                score_t[precision].append(time.perf_counter() - t1)
        model.train()
        if i:
            train_t.append(trained_at - t0)
    s = min(sorted(t)[len(t) // 2] for t in score_t.values()) / sorted(train_t)[len(train_t) // 2]
    a = sift_config(recipe, len(workload.train_data)).target_keep_fraction
    if s + a >= 1.0:
        return (f"pilot: scoring costs {s:.2f} of a training step and beta {recipe.sift.beta} keeps {a:.2f}, "
                f"so s + a = {s + a:.2f} >= 1: sifting cannot save time here; raise sift.beta"
                + (" or score in bf16 (sift.precision: bf16)" if fast_bf16(device) and "bf16" not in precisions else ""))
    return None


