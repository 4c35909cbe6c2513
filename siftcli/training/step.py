"""One optimizer step, queued on the device and read back from nowhere: a batch in, a :class:`Step` out."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from siftcli.recipe.schema import Recipe
from siftcli.sift.precision import autocast
from siftcli.sift.transfer import Span, to_device
from siftcli.training.losses import StepLoss


@dataclass
class Learner:
    """What a step trains with: ``forward`` computes (the model itself, or its compiled or data-parallel form),
    ``model`` holds the weights (their gradients are clipped), the step's loss, the optimizer, the gradient scaler
    (a no-op unless training in fp16) and the device. A compiled ``forward`` holds static graphs of ``full_rows``-row
    batches only: a shorter batch (an epoch's last) runs through ``eager``, the same forward uncompiled (data-parallel
    still), instead of compiling a graph for a shape that comes once an epoch."""

    forward: torch.nn.Module
    model: torch.nn.Module
    loss: StepLoss
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    device: torch.device
    eager: torch.nn.Module | None = None
    full_rows: int = 0

    def forward_for(self, rows: int) -> torch.nn.Module:
        """The forward a batch of ``rows`` rows goes through."""
        return self.eager if self.eager is not None and rows != self.full_rows else self.forward


def train_step(learner: Learner, batch: dict[str, torch.Tensor], recipe: Recipe, weights: torch.Tensor | None = None,
               indices: torch.Tensor | None = None) -> Step:
    """One optimizer step, queued without reading anything back from the device (:class:`Step`). The per-sample losses
    feed the sifting loader's loss memory for free; ``weights`` (a weighting rule's, e.g. InfoBatch's) scale them before
    the mean; ``indices`` (the batch's dataset indices) go to the loss, whose teacher cache is keyed by them.

    The scaler is a no-op unless training in fp16, so there is one path for every precision. Whether the loss was
    finite is read later, at a log, evaluation or checkpoint step (:class:`~siftcli.training.clock.LossWatch`).
    """
    forward, model, loss_fn, optimizer, scaler, device = (learner.forward, learner.model, learner.loss, learner.optimizer,
                                                          learner.scaler, learner.device)
    fb = Span(device).start()
    batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
    forward = learner.forward_for(next(iter(batch.values())).shape[0])
    with autocast(device, recipe.precision):
        losses = loss_fn(forward, batch, indices)
    loss = losses.mean() if weights is None else (losses * to_device(weights, device).to(losses.dtype)).mean()
    scaler.scale(loss).backward()
    fb.stop()
    opt = Span(device).start()
    scaler.unscale_(optimizer)
    if recipe.optim.grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.optim.grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return Step(losses.detach(), loss.detach(), fb, opt.stop())


@dataclass
class Step:
    """What one queued step leaves: per-sample and mean losses (on the device) and its two phases' spans."""

    losses: torch.Tensor
    loss: torch.Tensor
    forward_backward: Span
    optimizer: Span
