"""Before a run's steps: the device warmed off the clock (:func:`warm_up`), and a compiled forward's buckets compiled on
it (:func:`precompile`). A run and its workload in, nothing out but a warm device and compiled graphs."""

from __future__ import annotations

import copy
import time

import torch

from siftcli.recipe.schema import Recipe
from siftcli.sift.batching import at_width, bucket
from siftcli.sift.batching import to_device as batch_to_device
from siftcli.sift.precision import autocast
from siftcli.training.losses import own_loss
from siftcli.training.setup import Run
from siftcli.training.step import Learner, train_step
from siftcli.workload.build import Workload


def first_batch(workload: Workload, recipe: Recipe) -> dict[str, torch.Tensor]:
    """The first ``batch_size`` training rows, collated as the loader collates them: what the warm-up steps on and
    what each compiled bucket is cut or padded from."""
    data = workload.train_data
    return workload.collate([data[i] for i in range(min(len(data), recipe.batch_size))])


def warm_up(run: Run, workload: Workload, recipe: Recipe) -> None:
    """``clock_warmup_steps`` (3 on a GPU, 1 on a CPU) optimizer steps and a scoring forward on the first training batch,
    off the clock, then the model, optimizer, scaler and random state put back as they were. The first steps on a fresh
    device pay for kernel selection, the memory pool and lazy initialisation; without this the first arm of a comparison
    pays for every arm (on one H100 an equal-time opponent trained 28% less than the arm it was held against). The bare
    model is warmed, not a compiled forward: compiling is the arm's own cost and stays on its clock."""
    steps = recipe.warmup_steps(run.device.type)
    data = workload.train_data
    if steps <= 0 or len(data) == 0:
        return
    model, optimizer, scaler, device = run.model, run.optimizer, run.scaler, run.device
    local = optimizer.optim if hasattr(optimizer, "consolidate_state_dict") else optimizer  # ZeRO: this rank's shard
    saved = ({k: v.detach().clone() for k, v in model.state_dict().items()}, copy.deepcopy(local.state_dict()),
             scaler.state_dict(), torch.get_rng_state(), torch.cuda.get_rng_state_all() if device.type == "cuda" else None)
    batch = first_batch(workload, recipe)
    loss = own_loss(workload.loss_fn, workload.unlabeled)
    learner = Learner(model, model, loss, optimizer, scaler, device)
    try:
        for _ in range(steps):
            train_step(learner, batch, recipe)
        model.eval()
        with torch.inference_mode(), autocast(device, run.loader.scorer.precision):
            loss.fn(model, batch_to_device(batch, device))
    finally:
        model.train()
        model.load_state_dict(saved[0])
        local.load_state_dict(saved[1])
        if saved[2]:
            scaler.load_state_dict(saved[2])
        torch.set_rng_state(saved[3])
        if saved[4] is not None:
            torch.cuda.set_rng_state_all(saved[4])
            torch.cuda.synchronize(device)


def precompile(run: Run, workload: Workload, recipe: Recipe) -> None:
    """``compile: true``: compile the training forward and backward once per sequence-length bucket (every multiple of
    ``pad_to_multiple_of`` up to ``max_length``) at the start of the run, on its clock (phase ``compile``), gradients
    dropped, so no batch of the steady state waits for a compilation. What compiling cost stays the arm's own cost."""
    data = workload.train_data
    if not recipe.compile or len(data) == 0:
        return
    t0 = time.perf_counter()
    batch = first_batch(workload, recipe)
    ids, m = batch.get("input_ids"), recipe.pad_multiple
    widths: list[int | None] = [None]
    if isinstance(ids, torch.Tensor) and ids.ndim == 2 and m:
        widths = sorted({min(bucket(k, m), recipe.max_length) for k in range(1, recipe.max_length + 1)})
    fn = own_loss(workload.loss_fn, workload.unlabeled)
    rng, buffers = torch.get_rng_state(), [(b, b.detach().clone()) for b in run.model.buffers()]  # BatchNorm's statistics
    for width in widths:
        shaped = batch if width is None else at_width(batch, width, ids.shape[1], workload.pad_values)
        shaped = batch_to_device(shaped, run.device)
        with autocast(run.device, recipe.precision):
            losses = fn(run.forward, shaped)
        losses.float().mean().backward()
    run.optimizer.zero_grad(set_to_none=True)
    torch.set_rng_state(rng)
    with torch.no_grad():
        for buffer, saved in buffers:
            buffer.copy_(saved)
    if run.device.type == "cuda":
        torch.cuda.synchronize(run.device)
    run.state.phases["compile"] = run.state.phases.get("compile", 0.0) + time.perf_counter() - t0
