"""The scoring piece: a gradient-free forward that gives each raw sample a loss and a score.

The score is what the sifter ranks: the loss itself (``score="loss"``), or the reducible loss
(``score="reducible"``): the learner's loss minus a reference model's loss on the same sample
(RHO-LOSS, Mindermann et al. 2022), which ranks down both the already-learnt samples (low loss)
and the unlearnable ones (high loss under the reference too, e.g. mislabelled samples).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

import torch

from siftcli.sift import batching
from siftcli.sift.losses import PerSampleLoss
from siftcli.sift.precision import autocast
from siftcli.sift.transfer import Copy, Span


class Scorer:
    """Per-sample losses of a raw batch, in eval mode under ``inference_mode``, train flags restored exactly.

    Args:
        model: the model being trained (or any model whose losses rank the samples).
        loss_fn: ``(model, batch) -> Tensor[n]``.
        device: where the scoring forward runs.
        precision: ``fp32``, ``bf16`` or ``fp16`` autocast for the forward; ``fastest``: fp32 and bf16 are timed on
            the first batch (a warm-up and two timed forwards each, on the clock) and the faster is kept
            (:attr:`timings` says what was measured).
        reference_losses: ``Tensor[N]`` of a reference model's loss per dataset index; given, scores
            are reducible losses and every batch must come with its dataset indices.
    """

    def __init__(self, model: torch.nn.Module, loss_fn: PerSampleLoss, device: torch.device, precision: str = "fp32",
                 reference_losses: torch.Tensor | None = None, score: str = "reducible") -> None:
        self.model = model
        self.loss_fn = loss_fn
        self.device = device
        self.candidates: tuple[str, ...] = ("fp32", "bf16") if precision == "fastest" else ()
        self.precision = "fp32" if precision == "fastest" else precision
        self.timings: dict[str, float] = {}  # fastest: seconds of the fastest timed forward per candidate
        self.reference_losses = None if reference_losses is None else torch.as_tensor(reference_losses).float().flatten().cpu()
        self.score = score  # with reference losses: ``reducible`` (loss minus reference) or ``reference`` (minus reference)
        self.seconds = 0.0
        self.train_seconds: deque[float] = deque(maxlen=64)  # the loop's seconds per trained sample, recent batches

    def losses(self, raw: Any) -> torch.Tensor:
        """Per-sample losses on the CPU, float32, waited for now (:meth:`forward`, then both synced)."""
        copy, span = self.forward(raw)
        self.seconds += span.sync()
        return copy.sync()

    def forward(self, raw: Any) -> tuple[Copy, Span]:
        """Queue the scoring forward of ``raw`` and the copy of its losses to the host; nothing is read back, so on a GPU
        the host goes on (fetching, packing, queueing training) while the device scores. Returns the losses' copy and
        the forward's span: whoever reads them (:class:`~siftcli.sift.inflight.InFlight`) syncs both and adds the span's
        seconds to :attr:`seconds`."""
        span = Span(self.device).start()
        model = self.model
        flags = [(m, m.training) for m in model.modules()]
        model.eval()
        try:
            batch = batching.to_device(raw, self.device, non_blocking=True)
            if self.candidates:
                self._choose(batch)
            with torch.inference_mode(), autocast(self.device, self.precision):
                losses = self.loss_fn(model, batch)
            if not isinstance(losses, torch.Tensor):
                raise TypeError(f"loss_fn must return a Tensor of per-sample losses, got {type(losses).__name__}"
                                + (": return torch.stack(...) or a tensor, not a list" if isinstance(losses, (list, tuple)) else ""))
            span.stop()
            copy = Copy(losses.detach().float().flatten())
        finally:
            for module, flag in flags:
                module.training = flag
        return copy, span

    def _choose(self, batch: Any) -> None:
        """``fastest``: keep the faster of the candidate precisions on this batch (alternating, best of two each)."""
        best = dict.fromkeys(self.candidates, float("inf"))
        with torch.inference_mode():
            for rep in range(3):  # the first round warms up each precision's kernels
                for precision in self.candidates:
                    with autocast(self.device, precision):
                        t0 = time.perf_counter()
                        self.loss_fn(self.model, batch)
                        elapsed = time.perf_counter() - t0
                    if rep:
                        best[precision] = min(best[precision], elapsed)
        self.timings = best
        self.precision = min(best, key=best.get)
        self.candidates = ()

    def cost(self, scored_samples: int) -> float:
        """``s``: seconds per sample of the scoring forward over seconds per sample the loop spends training (the
        median of recent batches, so an evaluation now and then does not skew it); NaN until both were seen."""
        if not scored_samples or not self.train_seconds:
            return float("nan")
        per_trained = statistics.median(self.train_seconds)
        return (self.seconds / scored_samples) / per_trained if per_trained > 0 else float("nan")

    def scores(self, losses: torch.Tensor, indices: torch.Tensor | None) -> torch.Tensor:
        """What the sifter ranks: the loss, the loss minus the reference loss of the same samples, or (``score``
        reference) minus the reference loss alone: the lowest reference losses rank highest."""
        if self.reference_losses is None:
            return losses
        if indices is None:
            raise ValueError("reducible-loss scoring needs each batch's dataset indices; wrap a map-style DataLoader")
        if int(indices.max()) >= self.reference_losses.numel():
            raise ValueError(f"reference_losses holds {self.reference_losses.numel()} values but the data has index "
                             f"{int(indices.max())}; pass one reference loss per training sample")
        if self.score == "reference":
            return -self.reference_losses[indices]
        return losses - self.reference_losses[indices]
