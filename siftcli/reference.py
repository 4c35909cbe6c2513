"""Reference losses for reducible-loss scoring (RHO-LOSS), cross-fitted so no sample is scored by a
model that trained on it.

The training set is split in two halves (seeded); a reference model is trained on each half with the
recipe's own loop for ``sift.reference.epochs`` and scores every sample of the other half once. A
mislabelled sample keeps a high loss under a reference that never saw it, so ``loss - reference``
ranks it low, while plain loss ranks it high forever. All of it (both trainings and both scoring
passes) is charged to the sifted run's clock as the ``reference`` phase.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from typing import Any

import torch
from torch.utils.data import DataLoader

from siftcli.builders import Workload, resolve_device
from siftcli.config import Recipe
from siftcli.sift.precision import scoring_precision
from siftcli.sift.scoring import Scorer
from siftcli.train import Reference, train


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


def reference_model(workload: Workload, recipe: Recipe, initial: dict[str, Any] | None) -> torch.nn.Module:
    """The learner's architecture from its initial weights, or a smaller config (``sift.reference.config_overrides``)."""
    overrides = recipe.sift.reference.config_overrides
    if not overrides:
        model = copy.deepcopy(workload.model)
        if initial is not None:
            model.load_state_dict(initial)
        return model
    from siftcli.models import build_model

    m = recipe.model
    return build_model(recipe.task, m.source, num_labels=len(workload.label_names) if workload.label_names else None,
                       from_scratch=m.from_scratch, config_overrides={**m.config_overrides, **overrides},
                       label_names=workload.label_names)


def cross_fitted_reference(workload: Workload, recipe: Recipe, initial: dict[str, Any] | None = None) -> tuple[Reference, list[dict]]:
    """Reference losses for every training sample, the seconds they cost, and each reference's metrics."""
    device = resolve_device(recipe.device, recipe.precision)
    halves = split_halves(len(workload.train_data), recipe.seed)
    losses = torch.full((len(workload.train_data),), float("nan"))
    ref_recipe = reference_recipe(recipe)
    seconds, runs = 0.0, []
    for fit, score in ((0, 1), (1, 0)):
        part = dataclasses.replace(workload, model=reference_model(workload, recipe, initial), noisy=None,
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
