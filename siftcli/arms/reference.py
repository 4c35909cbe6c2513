"""Reference losses per training sample, for reducible-loss scoring (RHO-LOSS), reference scoring and the static
filter: built one of three ways, then cached on disk so that every arm, seed and sweep trial that asks for the same
key pays for it once.

- ``cross-fit``: the training set is split in two halves (seeded); a reference model is trained on each half with
  the recipe's own loop for ``sift.reference.epochs`` and scores every sample of the other half once. A mislabelled
  sample keeps a high loss under a reference that never saw it, so ``loss - reference`` ranks it low.
- ``holdout``: one reference trained on data no arm trains on (a small sample of the target, say), scoring every
  training sample: samples it finds hard are off-target or mislabelled (RHO-LOSS's relevance setting).
- ``model``: a saved model scores every training sample as it is.
- ``ngram``: no model: how much likelier each text is under the holdout's token n-grams than under the pool's
  (:mod:`siftcli.curate.ngram`), a relevance score that costs milliseconds.
- ``naive-bayes``: no model either: the loss of each text's label under naive Bayes over the holdout's n-grams per
  class (:func:`siftcli.curate.ngram.label_losses`), a label-noise score that costs milliseconds.

What building cost (training and scoring) is charged to the clock of the run that built it, as the
``reference`` phase; a run that finds it cached pays the read and reports the build cost beside it
(:meth:`~siftcli.training.loop.Reference.summary`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from siftcli import parallel
from siftcli.curate.ngram import cross_entropy_difference, label_losses
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import Recipe, empty_holdout
from siftcli.runio import atomic_torch_save
from siftcli.sift.precision import scoring_precision
from siftcli.sift.scoring import Scorer
from siftcli.training.loop import train
from siftcli.training.record import RunMetrics
from siftcli.training.state import Reference
from siftcli.workload.build import Workload
from siftcli.workload.models import build_model
from siftcli.workload.rows import Row, hash_rows
from siftcli.workload.teachers import load_teacher


def split_halves(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two disjoint halves of ``range(n)``, seeded (independent of the training order)."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(7_919 + seed))
    return perm[: n // 2], perm[n // 2:]


def reference_recipe(recipe: Recipe) -> Recipe:
    """The recipe a reference trains with: ``sift.reference`` settings, no sifting, one final evaluation."""
    ref = recipe.sift.reference
    return recipe.model_copy(update={
        "epochs": ref.epochs, "max_steps": None, "checkpoint_every_steps": None,
        "optim": recipe.optim.model_copy(update={"lr": ref.lr or recipe.optim.lr}),
        "eval": recipe.eval.model_copy(update={"every_steps": None, "every_seconds": None, "per_epoch": False}),
        "sift": recipe.sift.model_copy(update={"enabled": False}),
    })


def reference_model(workload: Workload, recipe: Recipe, initial: dict[str, torch.Tensor] | None) -> torch.nn.Module:
    """The learner's architecture from its initial weights, or a smaller config (``sift.reference.config_overrides``)."""
    overrides = recipe.sift.reference.config_overrides
    if not overrides:
        model = copy.deepcopy(workload.model)
        if initial is not None:
            model.load_state_dict(initial)
        return model

    m = recipe.model
    try:
        return build_model(recipe.task, m.source, num_labels=len(workload.label_names) if workload.label_names else None,
                           from_scratch=m.from_scratch, config_overrides={**m.config_overrides, **overrides},
                           label_names=workload.label_names)
    except SiftcliError as exc:  # the reference's own settings broke it, not the learner's model.source
        said = str(exc).removeprefix("model.source: ").removeprefix("model.config_overrides.")
        raise SiftcliError(f"sift.reference.config_overrides {overrides}: cannot build the reference model: {said}") from None


def check_reference_model(workload: Workload, recipe: Recipe) -> None:
    """Build the reference's smaller architecture (``sift.reference.config_overrides``) on the meta device, where it
    costs no memory, before any run folder exists: an override that breaks it is one line naming the reference's key,
    at ``validate`` too (it surfaced mid-run as ``model.source: cannot build config ...``, leaving a run folder). A
    pretrained source with overrides is left to the run (its config comes with its weights)."""
    m = recipe.model
    if not recipe.sift.reference.config_overrides or not (m.source.startswith("config:") or m.from_scratch):
        return
    with torch.device("meta"):
        reference_model(workload, recipe, None)


def reference_for(workload: Workload, recipe: Recipe, initial: dict[str, torch.Tensor] | None = None) -> tuple[Reference, list[RunMetrics]]:
    """The recipe's reference losses for every training sample: from the cache where its key is there, else built
    (``sift.reference.kind``) and cached. Returns the reference and the metrics of any reference training run.

    Two processes that need the same reference at once (two runs, two sweep workers) do not both build it: the
    second waits on the key's lock file and reads what the first cached (the lock goes with its holder, even under
    kill -9). The ranks of one torchrun build together and take no lock: a rank waiting on a file while another waits
    on it in a collective would never wake."""
    spec = recipe.sift.reference
    key = cache_key(workload, recipe)
    path = cache_dir() / "references" / f"{key}.pt"
    found = _cached(path, workload, spec.kind, key) if spec.cache else None
    if found is not None:
        return _balanced(found, workload, spec.balance), []
    with _building(path if spec.cache and not parallel.active() else None):
        found = _cached(path, workload, spec.kind, key) if spec.cache else None  # built while this process waited
        if found is not None:
            return _balanced(found, workload, spec.balance), []
        build = {"cross-fit": cross_fitted_reference, "holdout": holdout_reference, "model": model_reference,
                 "ngram": ngram_reference, "naive-bayes": naive_bayes_reference}[spec.kind]
        reference, runs = build(workload, recipe, initial)
        reference = dataclasses.replace(reference, kind=spec.kind, key=key, build_seconds=reference.seconds)
        bad = int((~torch.isfinite(reference.losses)).sum())
        if bad:  # never cached, never ranked by: a run would report completed on losses it could not rank
            raise SiftcliError(f"sift.reference.kind {spec.kind}: {bad} of {reference.losses.numel()} reference losses are "
                               "not finite (its training diverged); lower sift.reference.lr")
        if spec.cache:
            _write_cache(path, {"losses": reference.losses, "build_seconds": reference.seconds, "kind": spec.kind})
    return _balanced(reference, workload, spec.balance), runs


def _cached(path: Path, workload: Workload, kind: str, key: str) -> Reference | None:
    """The cached reference, or None when it is missing, unreadable, of other data or holds a non-finite loss (then it
    is rebuilt over)."""
    if not path.exists():
        return None
    t0 = time.perf_counter()
    try:
        saved = torch.load(path, weights_only=True)
        losses = saved["losses"]
        if losses.numel() == len(workload.train_data) and bool(torch.isfinite(losses).all()):  # NaN: corrupt, rebuilt
            return Reference(losses, time.perf_counter() - t0, float(saved["build_seconds"]), True, kind, key)
    except (OSError, RuntimeError, KeyError, TypeError, ValueError):
        pass
    return None


@contextlib.contextmanager
def _building(path: Path | None) -> Iterator[None]:
    """Hold ``<key>.lock`` beside the cached file while building it (an advisory ``flock``: released when the holder
    exits however it exits). Where no lock can be taken (a read-only cache folder) the build goes on without one."""
    if path is None:
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path.with_suffix(".lock"), "a+")  # noqa: SIM115  (held across the yield)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if parallel.on_wait is not None:
                parallel.on_wait(f"waiting for another siftcli process that is building the same reference ({path.stem})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield
    finally:
        fh.close()


def _balanced(reference: Reference, workload: Workload, balance: str) -> Reference:
    if balance == "none":
        return reference
    labels = [row.get("labels") for row in workload.train_data]
    return dataclasses.replace(reference, losses=within_label_percentiles(reference.losses, labels))


def within_label_percentiles(losses: torch.Tensor, labels: list[Any]) -> torch.Tensor:
    """Each loss as its mid-rank percentile, ``(rank + 0.5) / n``, among the finite losses of its own label (non-finite
    stay as they are). A reference trained toward the target is surer of some classes than of others; ranked raw, the
    lowest losses can be a few classes only, and a subset without a class trains a model that never predicts it
    (measured: a reference-chosen fifth of an AG News pool held no Sci/Tech text at all). Percentiles are uniform in
    every class, so a fraction kept by rank is that fraction of each class."""
    out = losses.detach().float().clone()
    groups: dict[Any, list[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label.item() if isinstance(label, torch.Tensor) else label, []).append(i)
    for members in groups.values():
        idx = torch.tensor(members)
        idx = idx[torch.isfinite(out[idx])]
        if idx.numel():
            order = out[idx].sort(stable=True).indices
            out[idx[order]] = (torch.arange(idx.numel(), dtype=torch.float32) + 0.5) / idx.numel()
    return out


def cache_dir() -> Path:
    """Where computed references live: ``SIFTCLI_CACHE``, else ``~/.cache/siftcli``."""
    return Path(os.environ.get("SIFTCLI_CACHE") or Path.home() / ".cache" / "siftcli")


def cache_key(workload: Workload, recipe: Recipe) -> str:
    """What a reference's losses depend on: the training (and holdout) data, the reference section, the model, the
    optimiser and batch size its training uses, the task, loss and length, and the seed."""
    h = hashlib.sha256()
    for rows in (workload.train_data, workload.holdout_data or []):
        hash_rows(h, rows)
    spec = recipe.sift.reference.model_dump(mode="json", exclude={"cache", "balance"})  # balance reads the same losses
    parts = {"reference": spec, "model": recipe.model.model_dump(mode="json"), "optim": recipe.optim.model_dump(mode="json"),
             "batch_size": recipe.batch_size, "task": recipe.task, "loss": recipe.loss, "max_length": recipe.max_length,
             "seed": recipe.seed, "precision": [recipe.precision, recipe.sift.precision]}
    h.update(json.dumps(parts, sort_keys=True).encode())
    return h.hexdigest()[:24]


def _write_cache(path: Path, payload: dict[str, Any]) -> None:
    """Atomically (a temporary sibling renamed over it): a reader never sees half a file. A cache that cannot be
    written (read-only home, full disk) costs a rebuild next time, never the run."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_torch_save(path, payload)
    except (OSError, RuntimeError):
        pass


def _score_all(model: torch.nn.Module, workload: Workload, recipe: Recipe, rows: list[Row]) -> torch.Tensor:
    device = workload.device
    scorer = Scorer(model.to(device), workload.loss_fn, device, scoring_precision(recipe.sift.precision, device, recipe.precision))
    got = [scorer.losses(b) for b in DataLoader(rows, batch_size=recipe.eval.batch_size, collate_fn=workload.collate)]
    return torch.cat(got)


def holdout_reference(workload: Workload, recipe: Recipe,
                      initial: dict[str, torch.Tensor] | None = None) -> tuple[Reference, list[RunMetrics]]:
    """One reference trained on the holdout (data no arm trains on), scoring every training sample."""
    if not workload.holdout_data:
        raise empty_holdout("holdout")
    part = dataclasses.replace(workload, model=reference_model(workload, recipe, initial), noisy=None, groups=None,
                               train_data=workload.holdout_data)
    metrics = train(part, reference_recipe(recipe), arm="reference")
    t0 = time.perf_counter()
    losses = _score_all(part.model, workload, recipe, workload.train_data)
    return Reference(losses=losses, seconds=metrics["train_seconds"] + time.perf_counter() - t0), [metrics]


def ngram_reference(workload: Workload, recipe: Recipe,
                    initial: dict[str, torch.Tensor] | None = None) -> tuple[Reference, list[RunMetrics]]:
    """The holdout's hashed n-gram distribution against the pool's (:mod:`siftcli.curate.ngram`): a relevance score with no
    model and no training, so it costs milliseconds where a trained reference costs a fraction of the run."""
    return _counted(workload, "ngram", cross_entropy_difference)


def naive_bayes_reference(workload: Workload, recipe: Recipe,
                          initial: dict[str, torch.Tensor] | None = None) -> tuple[Reference, list[RunMetrics]]:
    """Naive Bayes over the holdout's n-grams per class (:func:`siftcli.curate.ngram.label_losses`): whether a text's label
    fits its words, the question label noise asks, with no model trained; a trained holdout reference answers it as
    a side effect of difficulty and costs a fraction of the run."""
    return _counted(workload, "naive-bayes", label_losses)


def _counted(workload: Workload, kind: str, score: Any) -> tuple[Reference, list[RunMetrics]]:
    """A reference counted from the holdout's n-grams (``score(holdout, pool)``), timed; its errors one line each."""
    if not workload.holdout_data:
        raise empty_holdout(kind)
    t0 = time.perf_counter()
    try:
        losses = score(workload.holdout_data, workload.train_data)
    except ValueError as exc:
        raise SiftcliError(f"sift.reference.kind {kind}: {exc}") from None
    return Reference(losses=losses, seconds=time.perf_counter() - t0), []


def model_reference(workload: Workload, recipe: Recipe,
                    initial: dict[str, torch.Tensor] | None = None) -> tuple[Reference, list[RunMetrics]]:
    """A saved model (``sift.reference.model``) scores every training sample as it is."""
    source = recipe.sift.reference.model
    try:
        model = load_teacher(recipe.task, source, workload.label_names,
                             workload.processor if hasattr(workload.processor, "get_vocab") else None)
    except SiftcliError as exc:
        raise SiftcliError(str(exc).replace("distill.teacher", "sift.reference.model")) from None
    t0 = time.perf_counter()
    losses = _score_all(model.eval(), workload, recipe, workload.train_data)
    return Reference(losses=losses, seconds=time.perf_counter() - t0), []


def cross_fitted_reference(workload: Workload, recipe: Recipe,
                           initial: dict[str, torch.Tensor] | None = None) -> tuple[Reference, list[RunMetrics]]:
    """Reference losses for every training sample, the seconds they cost, and each reference's metrics."""
    device = workload.device
    halves = split_halves(len(workload.train_data), recipe.seed)
    losses = torch.full((len(workload.train_data),), float("nan"))
    ref_recipe = reference_recipe(recipe)
    seconds, runs = 0.0, []
    for fit, score in ((0, 1), (1, 0)):
        part = dataclasses.replace(workload, model=reference_model(workload, recipe, initial), noisy=None, groups=None,
                                   train_data=[workload.train_data[i] for i in halves[fit].tolist()])
        metrics = train(part, ref_recipe, arm="reference")
        runs.append(metrics)
        t0 = time.perf_counter()
        scorer = Scorer(part.model, workload.loss_fn, device, scoring_precision(recipe.sift.precision, device, recipe.precision))
        rows = [workload.train_data[i] for i in halves[score].tolist()]
        got = [scorer.losses(b) for b in DataLoader(rows, batch_size=recipe.eval.batch_size, collate_fn=workload.collate)]
        losses[halves[score]] = torch.cat(got)
        seconds += metrics["train_seconds"] + (time.perf_counter() - t0)
    return Reference(losses=losses, seconds=seconds), runs
