"""A recipe and its workload in, a warning or nothing out: a few timed steps say whether sifting can pay (s + a < 1)."""

from __future__ import annotations

import copy
from typing import Any

from siftcli import parallel
from siftcli.recipe.schema import Recipe
from siftcli.sift.losses import Uncertainty
from siftcli.sift.precision import autocast, fast_bf16, scoring_precision
from siftcli.sift.sifter import UNCERTAINTY
from siftcli.training.losses import own_loss
from siftcli.training.setup import make_optimizer, sift_config
from siftcli.training.step import Learner, train_step


def pilot_check(recipe: Recipe, workload: Any, steps: int = 6) -> str | None:
    """Time a few training steps and scoring passes; warn when s + a >= 1 (sifting cannot pay).

    Runs on a throw-away copy of the model so the real runs start from the same weights.
    """
    import time

    import torch

    if not recipe.sift.enabled or parallel.active():  # one process measures it; ranks would only repeat it
        return None
    device = workload.device
    model = copy.deepcopy(workload.model).to(device)
    rows = workload.train_data[: recipe.batch_size]
    if len(rows) < 2:
        return None
    batch = {k: v.to(device) for k, v in workload.collate(rows).items()}
    opt = make_optimizer(model, 0.0, 0.0)  # the real optimizer's cost, with no effect on the copy
    pilot_loss = own_loss(workload.loss_fn, workload.unlabeled)
    score_fn = Uncertainty(recipe.sift.score) if recipe.sift.score in UNCERTAINTY else workload.loss_fn
    scaler = torch.amp.GradScaler(device.type, enabled=recipe.precision == "fp16")
    sp = scoring_precision(recipe.sift.precision, device, recipe.precision)
    precisions = ("fp32", "bf16") if sp == "fastest" else (sp,)  # fastest: the scorer will keep the faster, so does this
    learner = Learner(model, model, pilot_loss, opt, scaler, device)
    train_t: list[float] = []
    score_t: dict[str, list[float]] = {p: [] for p in precisions}
    for i in range(steps + 1):
        step = train_step(learner, batch, recipe)  # the loop's own step
        if not bool(torch.isfinite(step.loss)):  # a measurement, not the run: reading it back here costs nothing that counts
            return None  # the run itself reports a loss that is not finite, with its step
        model.eval()
        for precision in precisions:
            t1 = time.perf_counter()
            with torch.inference_mode(), autocast(device, precision):
                score_fn(model, batch)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if i:  # the first step warms caches
                score_t[precision].append(time.perf_counter() - t1)
        model.train()
        if i:
            train_t.append(step.forward_backward.sync() + step.optimizer.sync())
    s = min(sorted(t)[len(t) // 2] for t in score_t.values()) / sorted(train_t)[len(train_t) // 2]
    a = sift_config(recipe, len(workload.train_data)).target_keep_fraction
    if s + a >= 1.0:
        return (f"pilot: scoring costs {s:.2f} of a training step and beta {recipe.sift.beta} keeps {a:.2f}, "
                f"so s + a = {s + a:.2f} >= 1: sifting cannot save time here; raise sift.beta"
                + (" or score in bf16 (sift.precision: bf16)" if fast_bf16(device) and "bf16" not in precisions else ""))
    return None
