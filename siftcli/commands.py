"""Plain functions behind the CLI: one run and a comparison against honest opponents (the sweep: :mod:`siftcli.sweep.run`).

They work without the CLI (import and call them) and write everything under a run folder. Scripts that build other
experiments take the same pieces from where they live: :func:`siftcli.arms.context.prepare`,
:func:`siftcli.arms.run.run_arms` and :func:`siftcli.arms.run.run_one`.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path
from typing import Any

from siftcli import parallel
from siftcli.analysis.compare import summarise_compare, tracked
from siftcli.analysis.stats import CompareResult
from siftcli.arms.context import SeedContext, evaluation_warning, preflight, prepare, write_label_noise
from siftcli.arms.reference import check_reference_model
from siftcli.arms.run import run_arms
from siftcli.arms.table import check_arms, default_arms, filtered, subject_of
from siftcli.curate.engines import Engine
from siftcli.curate.pipeline import CurateResult, filter_pool, streamable
from siftcli.errors import RunInterrupted, SiftcliError
from siftcli.recipe.schema import Recipe, recipe_to_yaml
from siftcli.report.html import report_html
from siftcli.report.plots import plots_wanted, write_plots
from siftcli.report.trackers import open_trackers
from siftcli.runio import (
    TABLE_KINDS,
    Event,
    atomic_write_json,
    atomic_write_text,
    claim,
    ensure_file_writable,
    ensure_writable,
    make_run_dir,
    read_json,
    write_table,
)
from siftcli.training.loop import train
from siftcli.training.pilot import pilot_check
from siftcli.training.record import RunMetrics, brief, keep_value
from siftcli.training.resume import data_fingerprint, record_sources, reference_not_kept, resumable, same_data, same_sources
from siftcli.training.setup import save_model, sift_config
from siftcli.workload.build import build_workload, resolve_device


def run_train(recipe: Recipe, *, output: str | None = None, sift: bool | None = None, on_event: Event | None = None,
              resume: str | None = None, workload: Any = None, trust_data: bool = False) -> tuple[Path, RunMetrics]:
    """One fine-tune, sifted when the recipe (or ``sift``) says so; ``trust_data``: resume on data files that changed."""
    if resume:
        run_dir = Path(resume)
        if not run_dir.is_dir():
            raise SiftcliError(f"--resume {resume}: folder not found")
        ensure_writable(run_dir, "--resume")
        claim(run_dir, "--resume")
    if resume:
        if not (run_dir / "checkpoint.pt").exists():
            raise SiftcliError(f"--resume {resume}: no checkpoint.pt in that folder; nothing to resume")
        recipe = resumable(recipe, run_dir)
        same_sources(run_dir, recipe, trust_data)
    use_sift = recipe.sift.enabled if sift is None else sift
    preflight(recipe)
    workload = workload or build_workload(recipe)  # before the run folder: bad data leaves no empty folder
    check_reference_model(workload, recipe)
    if not resume:
        run_dir = make_run_dir(output, recipe.name)
        atomic_write_text(run_dir / "recipe.yaml", recipe_to_yaml(recipe))
        atomic_write_json(run_dir / "data_fingerprint.json", {"sha256": data_fingerprint(workload)})
        record_sources(run_dir, recipe)
        write_label_noise(run_dir, workload)
    elif not trust_data:
        same_data(run_dir, workload)
    coarse = None if resume else evaluation_warning(workload)
    if coarse and on_event is not None:
        on_event("warning", {"message": coarse})
    if use_sift and not resume:
        warning = pilot_check(recipe, workload)
        if warning and on_event is not None:
            on_event("warning", {"message": warning})
    cfg = sift_config(recipe, len(workload.train_data)) if use_sift else None
    ranks_reference = cfg is not None and cfg.uses_reference

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


def run_filter(recipe: Recipe, keep: float | None, output: str, dedup: float | None = None, *,
               engine: Engine | None = None, stream: bool = False, report: str | None = None,
               encoder: str | None = None, work_dir: str | None = None) -> CurateResult:
    """Filter once, before training, and write the kept training rows with the data's own columns to ``output``
    (``.csv``, ``.tsv`` or ``.jsonl``), ready to be a recipe's ``data.source``. ``dedup``: drop near-copies first
    (Jaccard similarity of token bigrams at least this; :mod:`siftcli.curate.dedup`); ``keep``: then keep this fraction
    with the lowest reference loss (``sift.reference``). Text pools ranked by a counted reference (``ngram``,
    ``naive-bayes``) or only deduplicated stream through :mod:`siftcli.curate.pipeline` on ``engine`` (default: every
    core); the rest are built in memory as training builds them. ``stream``: read the training source as a stream
    (:mod:`siftcli.curate.stream`: a hub dataset never downloaded whole). ``report``: a ``.parquet`` or ``.jsonl`` file
    with every pool row's decision and why (:mod:`siftcli.curate.report`), its summary in the result. ``encoder``:
    near-copies by meaning (:mod:`siftcli.curate.semantic`: ``dedup`` is then a cosine similarity of that sentence
    encoder's embeddings); ``work_dir``: a folder its chunk files stay in, so a semantic filter run again (after an
    interrupt) reads back the embeddings it made. Returns what was kept and its cost."""
    if keep is None and dedup is None:
        raise SiftcliError("siftcli filter: give --keep F (the reference's static filter), --dedup (near-copies), or both")
    if keep is not None and not 0 < keep <= 1:
        raise SiftcliError(f"--keep {keep}: expected a fraction in (0, 1]")
    if dedup is not None and not 0 < dedup <= 1:
        raise SiftcliError(f"--similarity {dedup}: expected a {'cosine' if encoder else 'Jaccard'} similarity in (0, 1]")
    unstreamable = streamable(recipe, keep)  # why the chunked path cannot take this pool (None: it can)
    if encoder is not None:
        if dedup is None:
            raise SiftcliError("--dedup-by semantic: give --dedup too (near-copies by meaning are a kind of --dedup)")
        from siftcli.curate.semantic import encoder_path

        if unstreamable is not None:
            raise SiftcliError(f"--dedup-by semantic: {unstreamable}; near-copies by meaning are found in text pools "
                               "ranked by ngram or naive-bayes (or only deduplicated)")
        encoder = encoder_path(encoder)
    path = Path(output)
    if path.suffix.lower() not in TABLE_KINDS:
        raise SiftcliError(f"-o {output}: expected a .csv, .tsv or .jsonl file to write the kept rows to")
    ensure_file_writable(output)
    if path.exists() and path.is_dir():
        raise SiftcliError(f"-o {output}: is a folder; expected a file name")
    inputs = {"data.source": recipe.data.source, "data.eval_source": recipe.data.eval_source,
              "sift.reference.holdout_source": recipe.sift.reference.holdout_source}
    for key, source in inputs.items():
        if source and Path(source).exists() and Path(source).resolve() == path.resolve():
            raise SiftcliError(f"-o {output}: is the recipe's {key}; writing the kept rows there would destroy the data "
                               "they come from: name a new file")
    report_path = None
    if report is not None:
        from siftcli.curate.report import check_report_path

        report_path = check_report_path(report, {"output (-o)": output, **{f"recipe's {k}": v for k, v in inputs.items()}})
        why = "--stream reads the source as a stream" if stream else unstreamable
        if why is not None:
            raise SiftcliError(f"--report: {why}; the report is written for text pools ranked by ngram or naive-bayes (or "
                               "only deduplicated) read as a table: drop --report, or --stream, to filter this one")
    engine = engine or Engine(workers=os.cpu_count() or 1)
    if stream:
        from siftcli.curate.stream import filter_stream

        if unstreamable is not None:
            raise SiftcliError(f"--stream: {unstreamable}; only text pools ranked by ngram or naive-bayes (or only deduplicated) "
                               "read their source as a stream")
        return filter_stream(recipe, keep, dedup, path, engine, encoder=encoder)
    if unstreamable is None:
        work = None
        if work_dir is not None:
            ensure_writable(Path(work_dir), "--work-dir")
            work = Path(work_dir)
        return filter_pool(recipe, keep, dedup, path, engine, write_table, report=report_path, encoder=encoder,
                           work_dir=work)
    return _filter_in_memory(recipe, keep, dedup, path)


def _filter_in_memory(recipe: Recipe, keep: float | None, dedup: float | None, path: Path) -> CurateResult:
    """The filter for what the streamed path does not take (images, a reference that trains a model, label noise): the
    workload built as training builds it, the reference from the arms' cache."""
    started = time.perf_counter()
    preflight(recipe)
    workload = build_workload(recipe)
    n = len(workload.train_data)
    result = CurateResult(output=str(path), kept=0, of=n, keep=0.0, engine="in-memory")
    result.phases["read"] = time.perf_counter() - started
    done = filtered(SeedContext(recipe, workload, copy.deepcopy(workload.model.state_dict())), "filter", dedup, keep)
    chosen = done.rows  # the filter arm's rows, by construction
    if dedup is not None:
        result.dedup_similarity, result.dedup_kept, result.phases["near-copies"] = dedup, done.after_dedup, done.upfront["dedup"]
    if done.reference is not None:
        reference, cost = done.reference, done.reference.summary()
        result.reference_kind, result.reference_cached, result.phases["reference"] = reference.kind, cost["cached"], cost["paid_seconds"]
    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_table(workload.source_rows.select([workload.source_index[i] for i in chosen]), path)
    result.phases["write"] = time.perf_counter() - t0
    result.kept, result.keep = len(chosen), len(chosen) / n
    if workload.groups is not None:
        counts = workload.groups[chosen].bincount(minlength=len(workload.group_names)).tolist()
        result.groups = {name: c / len(chosen) for name, c in zip(workload.group_names, counts)}
    result.seconds = time.perf_counter() - started
    return result


def _maybe_plot(run_dir: Path, runs: list[RunMetrics]) -> list[str]:
    if not parallel.is_main() or not plots_wanted():
        return []
    try:
        return [str(p) for p in write_plots(run_dir, runs)]
    except ImportError:  # matplotlib missing: plots are a nicety, never a failure
        return []


def run_compare(recipe: Recipe | None, *, output: str | None = None, seeds: int = 1, arms: list[str] | None = None,
                quick: bool = False, on_event: Event | None = None, pilot: bool = True, resume: str | None = None,
                trust_data: bool = False) -> tuple[Path, CompareResult]:
    """The sifted run against the honest opponents (:func:`siftcli.arms.table.default_arms`, or ``arms``), per seed from that
    seed's own initial weights and split; paired statistics over seeds; a verdict that says what to do.

    ``resume``: an interrupted comparison's folder, continued with the recipe, arms and seeds it started with; the arms
    that finished there are read back, the one that was running continues from the checkpoint its interrupt left (or,
    with none, trains again from its seed's initial weights)."""
    if resume:
        run_dir, recipe, chosen, seed_list = _compare_to_resume(resume, trust_data)
        preflight(recipe)
        first, warning = build_workload(recipe), None
    else:
        assert recipe is not None
        if seeds < 1:
            raise SiftcliError(f"--seeds must be at least 1, got {seeds}")
        chosen = arms or default_arms(recipe, quick)
        check_arms(recipe, chosen, subject_of(chosen))
        first, run_dir = prepare(recipe, output, "-compare")  # bad data fails before a folder exists
        seed_list = [recipe.seed + i for i in range(seeds)]
        atomic_write_json(run_dir / "compare.json", {"status": "running", "recipe": recipe.name, "arms": chosen,
                                                     "seeds": seed_list})
        warning = pilot_check(recipe, first) if pilot else None
    subject = subject_of(chosen)
    coarse = evaluation_warning(first)
    for message in (coarse, warning):
        if message and on_event is not None:
            on_event("warning", {"message": message})
    finished: list[dict[str, RunMetrics]] = []
    cached = {recipe.seed: first}

    def workloads(r: Recipe) -> Any:
        return cached.pop(r.seed, None) or build_workload(r)

    trackers = open_trackers(recipe, run_dir, group=run_dir.name, seeds=len(seed_list), on_event=on_event)
    try:
        all_runs = run_arms(recipe, chosen, seed_list, run_dir, subject=subject,
                            on_event=trackers.wrap(on_event) if trackers else on_event, workloads=workloads, live=finished,
                            finished=_finished_arm if resume else None,
                            interrupted=_interrupted_arm if resume else None)
    except BaseException as exc:
        if trackers:
            trackers.abort()  # the arm that was running and the comparison's own run end marked interrupted
        if not isinstance(exc, RunInterrupted):
            raise
        atomic_write_json(run_dir / "compare.json", {"status": "interrupted", "recipe": recipe.name, "arms": chosen,
                                                     "seeds": seed_list,
                                                     "runs": [{a: brief(m) for a, m in r.items()} for r in finished if r]})
        raise RunInterrupted(str(run_dir), signal=exc.signal,
                             resume_command=f"siftcli compare --resume {run_dir}") from None
    result = summarise_compare(all_runs, recipe.eval.target_drop, recipe.name, seed_list, subject)
    result["arms"] = chosen
    result["pilot_warning"] = warning
    result["evaluation_warning"] = coarse
    result["plots"] = _maybe_plot(run_dir, list(all_runs[0].values()))
    atomic_write_json(run_dir / "compare.json", result)

    traces = {arm: keep_value(m, "trace") for arm, m in all_runs[0].items()}
    atomic_write_text(run_dir / "report.html", report_html(result, traces))
    if trackers:
        trackers.finish_group(tracked(result), [run_dir / "compare.json", *map(Path, result["plots"]), run_dir / "report.html"])
    return run_dir, result


def _compare_to_resume(resume: str, trust_data: bool) -> tuple[Path, Recipe, list[str], list[int]]:
    """An interrupted comparison's folder, claimed, with the recipe, arms and seeds it started with; refused in one line
    where it is not one, finished already, written by an earlier siftcli, or its data files changed."""
    from siftcli.recipe.reader import load_recipe

    folder = Path(resume)
    state = folder / "compare.json"
    if not state.exists() or not (folder / "recipe.yaml").exists():
        raise SiftcliError(f"--resume {resume}: not a comparison folder (no compare.json and recipe.yaml)")
    saved = read_json(state)
    if not isinstance(saved, dict):
        raise SiftcliError(f"--resume {resume}: {state} is damaged (expected a JSON object); start the comparison again")
    if saved.get("status") not in ("running", "interrupted"):
        raise SiftcliError(f"--resume {resume}: this comparison finished; its result is {state}")
    arms, seeds = saved.get("arms"), saved.get("seeds")
    if not (isinstance(arms, list) and arms and all(isinstance(a, str) for a in arms)
            and isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
        raise SiftcliError(f"--resume {resume}: {state} does not say which arms and seeds it runs (an earlier siftcli "
                           "wrote it, or it was edited); start the comparison again in a new -o folder")
    claim(folder, "--resume")
    recipe = load_recipe(folder / "recipe.yaml")
    same_sources(folder, recipe, trust_data)  # the finished arms were measured on the files as they were
    check_arms(recipe, arms, subject_of(arms))
    return folder, recipe, arms, seeds


def _saved_metrics(folder: Path) -> RunMetrics | None:
    """The ``metrics.json`` an arm wrote in ``folder`` (a resumed comparison's), or ``None`` where there is none whole:
    one written halfway by a killed process is as none."""
    path = folder / "metrics.json"
    try:
        metrics = read_json(path) if path.exists() else None
    except SiftcliError:
        return None
    return metrics if isinstance(metrics, dict) else None


def _interrupted_arm(folder: Path) -> bool:
    """An arm an interrupt stopped in ``folder`` with a checkpoint to continue from."""
    metrics = _saved_metrics(folder)
    return metrics is not None and metrics.get("status") == "interrupted" and (folder / "checkpoint.pt").exists()


def _finished_arm(folder: Path) -> RunMetrics | None:
    """An arm that finished in ``folder``, read back; else ``None`` (it trains)."""
    metrics = _saved_metrics(folder)
    return metrics if metrics is not None and metrics.get("status") == "completed" else None


def validate_recipe_sources(recipe: Recipe) -> list[str]:
    """Build the whole workload (data, labels, tokenizer, model, loss) and the device; raise on the first problem."""
    resolve_device(recipe.device, recipe.precision)
    workload = build_workload(recipe)
    check_reference_model(workload, recipe)
    lines = [f"[green]ok[/green] data: {len(workload.train_data)} train / {len(workload.eval_data)} eval rows"
             + (f", labels {workload.label_names}" if workload.label_names else "")
             + (f", {int(workload.noisy.sum())} training labels flipped (data.label_noise)" if workload.noisy is not None else "")]
    kind = "built from config (random init)" if recipe.model.source.startswith("config:") else "loaded"
    n_params = sum(p.numel() for p in workload.model.parameters())
    lines.append(f"[green]ok[/green] model: {recipe.model.source} {kind}, {workload.model.config.model_type}, {n_params:,} parameters")
    if ":" in recipe.loss:
        lines.append(_loss_line(recipe.loss))
    return lines


def _loss_line(spec: str) -> str:
    """The code a recipe imports, named (a recipe is trusted like code); :func:`build_workload` already ran it once."""
    import importlib

    where = getattr(importlib.import_module(spec.partition(":")[0]), "__file__", None) or "a built-in module"
    return (f"[green]ok[/green] code: loss {spec} from {where} (imported and run on 2 samples; a recipe that names "
            "code is trusted like code)")
