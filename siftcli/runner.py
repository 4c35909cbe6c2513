"""Plain functions behind the CLI: one run and a comparison against honest opponents (the sweep: :mod:`siftcli.sweep`).

They work without the CLI (import and call them) and write everything under a run folder.
``prepare`` and ``run_arm`` are public so scripts build other experiments from the same pieces.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from siftcli.analysis import compare_pair, summarise_seeds, verdict
from siftcli.arms import brief
from siftcli.config import Recipe, recipe_to_yaml
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.runio import atomic_write_json, atomic_write_text, claim, ensure_writable, make_run_dir, read_json

Event = Callable[[str, dict[str, Any]], None]


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


def prepare(recipe: Recipe, output: str | None, suffix: str) -> tuple[Any, Path]:
    """Device check, workload, then the run folder (so bad input leaves none) with the resolved recipe."""
    from siftcli.builders import build_workload

    preflight(recipe)
    workload = build_workload(recipe)
    run_dir = make_run_dir(output, recipe.name, suffix=suffix)
    atomic_write_text(run_dir / "recipe.yaml", recipe_to_yaml(recipe))
    _write_label_noise(run_dir, workload)
    return workload, run_dir


def _write_label_noise(run_dir: Path, workload: Any) -> None:
    """Which training samples ``data.label_noise`` flipped, so every share reported can be checked."""
    if getattr(workload, "noisy", None) is not None:
        flipped = workload.noisy.nonzero().flatten().tolist()
        atomic_write_json(run_dir / "label_noise.json", {"rate": len(flipped) / len(workload.noisy), "flipped": flipped})


def run_train(recipe: Recipe, *, output: str | None = None, sift: bool | None = None, on_event: Event | None = None,
              resume: str | None = None, workload: Any = None) -> tuple[Path, dict[str, Any]]:
    """One fine-tune, sifted when the recipe (or ``sift``) says so."""
    from siftcli.arms import SeedContext
    from siftcli.builders import build_workload, sift_config
    from siftcli.train import train

    if resume:
        run_dir = Path(resume)
        if not run_dir.is_dir():
            raise SiftcliError(f"--resume {resume}: folder not found")
        ensure_writable(run_dir)
        claim(run_dir)
    if resume:
        if not (run_dir / "checkpoint.pt").exists():
            raise SiftcliError(f"--resume {resume}: no checkpoint.pt in that folder; nothing to resume")
        recipe = _resumable(recipe, run_dir)
    use_sift = recipe.sift.enabled if sift is None else sift
    preflight(recipe)
    workload = workload or build_workload(recipe)  # before the run folder: bad data leaves no empty folder
    if not resume:
        run_dir = make_run_dir(output, recipe.name)
        atomic_write_text(run_dir / "recipe.yaml", recipe_to_yaml(recipe))
        atomic_write_json(run_dir / "data_fingerprint.json", {"sha256": data_fingerprint(workload)})
        _write_label_noise(run_dir, workload)
    else:
        _same_data(run_dir, workload)
    if use_sift and not resume:
        warning = pilot_check(recipe, workload)
        if warning and on_event is not None:
            on_event("warning", {"message": warning})
    cfg = sift_config(recipe, len(workload.train_data)) if use_sift else None
    ranks_reference = cfg is not None and cfg.uses_reference
    from siftcli.train import reference_not_kept

    stuck = reference_not_kept(recipe, cfg) if resume else None
    if stuck:
        raise SiftcliError(f"--resume {resume}: {stuck}")
    ctx = SeedContext(recipe, workload, copy.deepcopy(workload.model.state_dict()))
    try:
        reference = ctx.reference("sifted", run_dir) if ranks_reference else None
    except KeyboardInterrupt:  # before any training step: there is nothing to resume
        raise RunInterrupted(str(run_dir), resumable=False, advice=(
            "it was building the reference and no training step had run, so there is nothing to resume: run the command "
            "again (with another -o folder if you gave one)")) from None
    from siftcli.builders import save_model
    from siftcli.trackers import open_trackers

    trackers = open_trackers(recipe, run_dir, on_event=on_event)
    try:
        metrics = train(workload, recipe, cfg, reference=reference, run_dir=run_dir, arm="sifted" if use_sift else "baseline",
                        on_event=trackers.wrap(on_event) if trackers else on_event, resume=bool(resume),
                        on_complete=lambda: save_model(workload, run_dir / "model"))
    finally:
        if trackers:
            trackers.close()  # interrupted or failed: the tracker's run ends marked so
    _maybe_plot(run_dir, [metrics])
    return run_dir, metrics


def run_filter(recipe: Recipe, keep: float | None, output: str, dedup: float | None = None) -> dict[str, Any]:
    """Filter once, before training, and write the kept training rows with the data's own columns to ``output``
    (``.csv``, ``.tsv`` or ``.jsonl``), ready to be a recipe's ``data.source``. ``dedup``: drop near-copies first
    (Jaccard similarity of token bigrams at least this; :mod:`siftcli.dedup`); ``keep``: then keep this fraction with
    the lowest reference loss (``sift.reference``: built, or read from the cache). Returns what was kept and its cost."""
    import time

    from siftcli.arms import SeedContext, lowest
    from siftcli.builders import build_workload
    from siftcli.dedup import near_duplicates, token_sequences

    if keep is None and dedup is None:
        raise SiftcliError("siftcli filter: give --keep F (the reference's static filter), --dedup (near-copies), or both")
    if keep is not None and not 0 < keep <= 1:
        raise SiftcliError(f"--keep {keep}: expected a fraction in (0, 1]")
    if dedup is not None and not 0 < dedup <= 1:
        raise SiftcliError(f"--similarity {dedup}: expected a Jaccard similarity in (0, 1]")
    path = Path(output)
    kind = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl"}.get(path.suffix.lower())
    if kind is None:
        raise SiftcliError(f"-o {output}: expected a .csv, .tsv or .jsonl file to write the kept rows to")
    if path.exists() and path.is_dir():
        raise SiftcliError(f"-o {output}: is a folder; expected a file name")
    preflight(recipe)
    workload = build_workload(recipe)
    n = len(workload.train_data)
    chosen, out = list(range(n)), {}
    if dedup is not None:
        t0 = time.perf_counter()
        chosen = near_duplicates(token_sequences(workload.train_data), dedup)
        out["dedup"] = {"similarity": dedup, "kept": len(chosen), "seconds": time.perf_counter() - t0}
    if keep is not None:
        reference = SeedContext(recipe, workload, copy.deepcopy(workload.model.state_dict())).reference("filter")
        chosen = [chosen[i] for i in lowest(reference.losses[chosen], keep)]
        out["reference"] = reference.summary()
    rows = workload.source_rows.select([workload.source_index[i] for i in chosen])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    if kind == "jsonl":
        rows.to_json(str(tmp), lines=True)
    else:
        rows.to_csv(str(tmp), sep="\t" if kind == "tsv" else ",", index=False)
    os.replace(tmp, path)
    out = {"output": str(path), "kept": len(chosen), "of": n, "keep": len(chosen) / n, **out}
    if workload.groups is not None:
        counts = workload.groups[chosen].bincount(minlength=len(workload.group_names)).tolist()
        out["groups"] = {name: c / len(chosen) for name, c in zip(workload.group_names, counts)}
    return out


def data_fingerprint(workload: Any) -> str:
    """SHA-256 of the training and evaluation rows as the run sees them (tokens and labels): what a resume must match."""
    import hashlib

    from siftcli.rows import hash_rows

    h = hashlib.sha256()
    for rows in (workload.train_data, workload.eval_data):
        hash_rows(h, rows)
    return h.hexdigest()


def _same_data(run_dir: Path, workload: Any) -> None:
    """Refuse to continue a run on data other than the data it started on (a file rewritten in place, say)."""
    path = run_dir / "data_fingerprint.json"
    saved = read_json(path) if path.exists() else None
    if saved is None:
        raise SiftcliError(f"--resume {run_dir}: no data_fingerprint.json (an older siftcli wrote this run), so the data "
                           "cannot be checked against the run's; start the run again")
    if saved.get("sha256") != data_fingerprint(workload):
        raise SiftcliError(f"--resume {run_dir}: the data differs from the data this run started on (a file changed, or "
                           "another source); a resumed run needs the same data; start the run again")


# Keys a resumed run may change: they do not touch the schedule, the data order or the saved state.
RESUMABLE_CHANGES = ("eval.", "log_every_steps", "checkpoint_every_steps", "num_workers", "name")


def _resumable(recipe: Recipe, run_dir: Path) -> Recipe:
    """The recipe a resume runs: the given one, if it differs from the saved one only where that is safe.

    The first other difference is refused in one line; allowed changes are written to the saved recipe.
    """
    from siftcli.config import load_recipe

    saved_path = run_dir / "recipe.yaml"
    if not saved_path.exists():
        raise SiftcliError(f"--resume {run_dir}: no recipe.yaml in that folder, so nothing says what the run was; "
                           "only a folder siftcli wrote can be resumed")
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


def run_compare(recipe: Recipe, *, output: str | None = None, seeds: int = 1, arms: list[str] | None = None,
                quick: bool = False, on_event: Event | None = None, pilot: bool = True) -> tuple[Path, dict[str, Any]]:
    """The sifted run against the honest opponents (:func:`siftcli.arms.default_arms`, or ``arms``), per seed from that
    seed's own initial weights and split; paired statistics over seeds; a verdict that says what to do."""
    from siftcli.arms import check_arms, default_arms, run_plan, subject_of
    from siftcli.builders import build_workload

    if seeds < 1:
        raise SiftcliError(f"--seeds must be at least 1, got {seeds}")
    chosen = arms or default_arms(recipe, quick)
    subject = subject_of(chosen)
    check_arms(recipe, chosen, subject)
    first, run_dir = prepare(recipe, output, "-compare")  # bad data fails before a folder exists
    warning = pilot_check(recipe, first) if pilot else None
    if warning and on_event is not None:
        on_event("warning", {"message": warning})
    finished: list[dict[str, dict[str, Any]]] = []
    cached = {recipe.seed: first}

    def workloads(r: Recipe) -> Any:
        return cached.pop(r.seed, None) or build_workload(r)

    seed_list = [recipe.seed + i for i in range(seeds)]
    from siftcli.trackers import open_trackers

    trackers = open_trackers(recipe, run_dir, group=run_dir.name, seeds=seeds, on_event=on_event)
    try:
        all_runs = run_plan(recipe, chosen, seed_list, run_dir, subject=subject,
                            on_event=trackers.wrap(on_event) if trackers else on_event, workloads=workloads, live=finished)
    except BaseException as exc:
        if trackers:
            trackers.abort()  # the arm that was running and the comparison's own run end marked interrupted
        if not isinstance(exc, RunInterrupted):
            raise
        atomic_write_json(run_dir / "compare.json", {"status": "interrupted", "recipe": recipe.name, "arms": chosen,
                                                     "runs": [{a: brief(m) for a, m in r.items()} for r in finished if r]})
        raise RunInterrupted(str(run_dir), resumable=False, signal=exc.signal) from None
    result = summarise_compare(all_runs, recipe.eval.target_drop, recipe.name, seed_list, subject)
    result["arms"] = chosen
    result["pilot_warning"] = warning
    result["plots"] = _maybe_plot(run_dir, list(all_runs[0].values()))
    atomic_write_json(run_dir / "compare.json", result)
    from siftcli.html import report_html

    traces = {arm: (m.get("keep") or {}).get("trace") for arm, m in all_runs[0].items()}
    atomic_write_text(run_dir / "report.html", report_html(result, traces))
    if trackers:
        trackers.finish_group(_tracked(result), [run_dir / "compare.json", *map(Path, result["plots"]), run_dir / "report.html"])
    return run_dir, result


def _tracked(result: dict[str, Any]) -> dict[str, Any]:
    """A comparison's record for the trackers: the verdict, and each arm's metric and time against the baseline."""
    out: dict[str, Any] = {"verdict": str(result["verdict"])}
    first = result["runs"][0]
    base = first.get("baseline")
    for arm, run in first.items():
        value = (run.get("final") or {}).get(run.get("metric"))
        if value is not None:
            out[f"{arm}/{run['metric']}"] = value
        if base and base.get("train_seconds"):
            out[f"{arm}/time_ratio"] = run["train_seconds"] / base["train_seconds"]
    return out


def summarise_compare(all_runs: list[dict[str, dict[str, Any]]], drop_points: float, name: str, seeds: list[int],
                      subject: str = "sifted") -> dict[str, Any]:
    """compare.json: every seed's arms (brief), the per-seed pairs, paired statistics over seeds and the verdict."""
    pairs = []
    for seed, runs in zip(seeds, all_runs):
        pair = compare_pair(runs, drop_points, subject)
        pair["seed"] = seed
        pairs.append(pair)
    summary = summarise_seeds(pairs) if len(pairs) > 1 else None
    return {"status": "completed", "recipe": name, "runs": [{a: brief(m) for a, m in r.items()} for r in all_runs],
            "pairs": pairs, "seeds_summary": summary,
            "verdict": verdict(pairs[0], all_runs[0][subject].get("sift"), summary)}


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
    pair = compare_pair({"baseline": a, "sifted": b}, drop_points)
    return {"runs": [{"baseline": brief(a), "sifted": brief(b)}], "pairs": [pair], "seeds_summary": None,
            "pilot_warning": None, "verdict": verdict(pair, b.get("sift")), "plots": []}


def pilot_check(recipe: Recipe, workload: Any, steps: int = 6) -> str | None:
    """Time a few training steps and scoring passes; warn when s + a >= 1 (sifting cannot pay).

    Runs on a throw-away copy of the model so the real runs start from the same weights.
    """
    import time

    import torch

    from siftcli import parallel
    from siftcli.builders import make_optimizer, sift_config
    from siftcli.sift.losses import Uncertainty
    from siftcli.sift.precision import autocast, fast_bf16, scoring_precision
    from siftcli.sift.sifter import UNCERTAINTY
    from siftcli.train import _NonFiniteLoss, train_step

    if not recipe.sift.enabled or parallel.active():  # one process measures it; ranks would only repeat it
        return None
    device = workload.device
    model = copy.deepcopy(workload.model).to(device)
    rows = workload.train_data[: recipe.batch_size]
    if len(rows) < 2:
        return None
    batch = {k: v.to(device) for k, v in workload.collate(rows).items()}
    opt = make_optimizer(model, 0.0, 0.0)  # the real optimizer's cost, with no effect on the copy
    # without labels the student's loss cannot run: its entropy costs the same forward and backward
    pilot_loss = Uncertainty("entropy") if workload.unlabeled else workload.loss_fn
    score_fn = Uncertainty(recipe.sift.score) if recipe.sift.score in UNCERTAINTY else workload.loss_fn
    scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
    sp = scoring_precision(recipe.sift.precision, device, recipe.precision)
    precisions = ("fp32", "bf16") if sp == "auto" else (sp,)  # auto: the scorer will keep the faster, so does this
    train_t: list[float] = []
    score_t: dict[str, list[float]] = {p: [] for p in precisions}
    for i in range(steps + 1):
        try:
            _, fb, step = train_step(model, model, batch, pilot_loss, opt, scaler, recipe, device)  # the loop's own step
        except _NonFiniteLoss:
            return None  # the run itself reports a loss that is not finite, with its step
        model.eval()
        for precision in precisions:
            t1 = time.perf_counter()
            with torch.inference_mode(), autocast(device, precision):
                score_fn(model, batch)
            if i:  # the first step warms caches
                score_t[precision].append(time.perf_counter() - t1)
        model.train()
        if i:
            train_t.append(fb + step)
    s = min(sorted(t)[len(t) // 2] for t in score_t.values()) / sorted(train_t)[len(train_t) // 2]
    a = sift_config(recipe, len(workload.train_data)).target_keep_fraction
    if s + a >= 1.0:
        return (f"pilot: scoring costs {s:.2f} of a training step and beta {recipe.sift.beta} keeps {a:.2f}, "
                f"so s + a = {s + a:.2f} >= 1: sifting cannot save time here; raise sift.beta"
                + (" or score in bf16 (sift.precision: bf16)" if fast_bf16(device) and "bf16" not in precisions else ""))
    return None


