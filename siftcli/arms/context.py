"""A recipe in, one seed's context out: the device check, the workload, the run folder, the initial weights and the
reference its arms share."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from siftcli import parallel
from siftcli.arms.reference import check_reference_model, reference_for
from siftcli.errors import SiftcliError
from siftcli.recipe.schema import Recipe, recipe_to_yaml
from siftcli.runio import atomic_write_json, atomic_write_text, make_run_dir
from siftcli.training.record import RunMetrics, brief
from siftcli.training.resume import record_sources
from siftcli.workload.build import build_workload, resolve_device


@dataclass
class SeedContext:
    """One seed of a plan: its recipe, workload and initial weights, the arms run so far, and the reference."""

    recipe: Recipe
    workload: Any
    initial: dict[str, torch.Tensor]  # the seed's initial weights (a state dict)
    subject: str = "sifted"
    runs: dict[str, RunMetrics] = field(default_factory=dict)
    _references: dict[str, tuple[Any, str]] = field(default_factory=dict)  # by reference kind: (reference, its builder)
    #: The train-less fractions among the seed's arms: a ``wsd`` baseline writes a checkpoint for each on its way
    #: (:mod:`siftcli.arms.forks`), kept in ``forks`` by step once it finished with the steps they were placed for.
    fork_fractions: list[float] = field(default_factory=list)
    forks: dict[int, Path] = field(default_factory=dict)

    def reference(self, arm: str, folder: Path | None = None, kind: str | None = None) -> Any:
        """The recipe's reference losses (``kind``: another kind over the recipe's holdout), built (or read from the
        cache) by the first arm that asks, on its clock; later arms of the seed reuse them and pay nothing, reporting
        the build cost beside (amortised)."""
        recipe = self.recipe
        if kind is not None and kind != recipe.sift.reference.kind:
            recipe = recipe.model_copy(update={"sift": recipe.sift.model_copy(update={
                "reference": recipe.sift.reference.model_copy(update={"kind": kind})})})
        key = recipe.sift.reference.kind
        if key in self._references:
            built, owner = self._references[key]
            if arm == owner:
                return built
            return dataclasses.replace(built, seconds=0.0, cached=True, build_seconds=built.summary()["build_seconds"])

        reference, runs = reference_for(self.workload, recipe, self.initial)
        self._references[key] = (reference, arm)
        if folder is not None:
            atomic_write_json(folder / "reference.json", {**reference.summary(), "runs": [brief(m) for m in runs]})
        return reference


def preflight(recipe: Recipe) -> None:
    """Fail on the device before loading anything or creating a run folder; under torchrun, join the process group."""
    device = resolve_device(recipe.device, recipe.precision)
    parallel.init(device.type)
    if recipe.sift.enabled and recipe.sift.precision not in ("auto", "fastest"):
        try:
            resolve_device(device.type, recipe.sift.precision)
        except SiftcliError as exc:
            raise SiftcliError(f"sift.{exc}") from None


def prepare(recipe: Recipe, output: str | None, suffix: str, check: Callable[[Any], Any] | None = None,
            resumable: bool = True) -> tuple[Any, Path]:
    """Device check, workload (and ``check(workload)``, what the caller refuses), then the run folder (so bad input leaves
    none) with the resolved recipe."""
    preflight(recipe)
    workload = build_workload(recipe)
    check_reference_model(workload, recipe)
    if check is not None:
        check(workload)
    run_dir = make_run_dir(output, recipe.name, suffix=suffix, resumable=resumable)
    atomic_write_text(run_dir / "recipe.yaml", recipe_to_yaml(recipe))
    if resumable:  # what a --resume holds the data files against
        record_sources(run_dir, recipe)
    write_label_noise(run_dir, workload)
    return workload, run_dir


#: Fewer evaluation rows than this, and a run says how coarse its metric is (one row moves it by 100/N points: over
#: 3 points here, more than most differences between strategies).
FEW_EVAL_ROWS = 30


def evaluation_warning(workload: Any) -> str | None:
    """What a result measured on these evaluation rows cannot say, in a line: too few rows for differences of a point
    or two to mean anything, or rows of one class (accuracy then rewards predicting that class). ``None`` where the
    evaluation can tell runs apart."""
    rows = getattr(workload, "eval_data", None) or []
    n = len(rows)
    labels = {int(r["labels"]) for r in rows if isinstance(r, dict) and isinstance(r.get("labels"), int)} \
        if getattr(workload, "label_names", None) else set()
    if n and len(labels) == 1:
        return (f"the evaluation rows hold one class only ({n} rows of label {workload.label_names[next(iter(labels))]!r}): "
                "accuracy on them rewards predicting that class; evaluate on rows of every class (data.eval_source)")
    if 0 < n < FEW_EVAL_ROWS:
        return (f"the evaluation has {n} rows: one row moves the metric by {100 / n:.1f} points, so differences of a few "
                "points are noise; give more evaluation rows (data.eval_source, or a larger data.eval_fraction)")
    return None


def write_label_noise(run_dir: Path, workload: Any) -> None:
    """Which training samples ``data.label_noise`` flipped, so every share reported can be checked."""
    if getattr(workload, "noisy", None) is not None:
        flipped = workload.noisy.nonzero().flatten().tolist()
        atomic_write_json(run_dir / "label_noise.json", {"rate": len(flipped) / len(workload.noisy), "flipped": flipped})
