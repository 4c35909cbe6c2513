"""Pure functions of loss-based sifting.

Kept free of state so each step can be tested on its own and reused by other selection
schemes. The stateful part (history, delay, generator) lives in :mod:`siftcli.sift.sifter`.
"""

from __future__ import annotations

import math

import torch


def target_keep_fraction(beta: float) -> float:
    """Expected kept fraction on a stationary stream: E[U**beta] = 1/(1+beta) for U ~ Uniform(0, 1)."""
    return 1.0 / (1.0 + beta)


def percentiles(losses: torch.Tensor, history: torch.Tensor) -> torch.Tensor:
    """Mid-rank percentile of each loss within ``history`` (0 = lowest, 1 = highest).

    Ties count half, so a constant stream sits at 0.5 instead of 0 or 1. With an empty
    history every sample is at the top (1.0): nothing to compare against means keep.
    """
    losses = losses.detach().float().flatten()
    if history.numel() == 0:
        return torch.ones_like(losses)
    ordered = torch.sort(history.float()).values
    below = torch.searchsorted(ordered, losses, right=False)
    at_or_below = torch.searchsorted(ordered, losses, right=True)
    return (below + at_or_below).float() / (2.0 * ordered.numel())


def keep_probability(pct: torch.Tensor, beta: float) -> torch.Tensor:
    """``percentile ** beta``: high-loss samples are kept more often, never with certainty below the top."""
    return pct.clamp(0.0, 1.0).pow(beta)


def sample_keep(prob: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Independent Bernoulli draws (the SageMaker rule); the rate drifts with the loss distribution."""
    draws = torch.rand(prob.shape, generator=generator, device="cpu")
    return draws < prob.cpu()


def calibrated_count(n: int, fraction: float, carry: float) -> tuple[int, float]:
    """How many of ``n`` samples to keep so the long-run rate is exactly ``fraction``.

    The fractional part is carried to the next batch instead of rounded away, so over
    many batches the kept count never drifts more than one sample from ``n * fraction``.
    """
    wanted = n * fraction + carry
    k = min(n, max(0, math.floor(wanted)))
    return k, wanted - k


def sample_keep_count(prob: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """Keep exactly ``k`` samples, drawn without replacement with weights ``prob``.

    Calibrated mode: the per-sample preference of ``percentile ** beta`` is kept, but the
    count is fixed, so the achieved rate matches the target even while losses fall.
    """
    n = prob.numel()
    mask = torch.zeros(n, dtype=torch.bool)
    if k <= 0:
        return mask
    if k >= n:
        return ~mask
    weights = prob.detach().float().cpu().clamp_min(0.0) + 1e-12  # all-zero rows are legal for multinomial
    chosen = torch.multinomial(weights, k, replacement=False, generator=generator)
    mask[chosen] = True
    return mask


def infobatch_keep(scores: torch.Tensor, threshold: float, prune: float,
                   generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """InfoBatch's unbiased rule (Qin et al., ICLR 2024): a sample scoring below ``threshold`` (the mean
    score) is dropped with probability ``prune``; the low-score samples that survive weigh ``1/(1-prune)``
    in the loss, so the expected gradient over the low-score part is unchanged. Returns (mask, weights).
    """
    scores = scores.detach().float().flatten().cpu()
    low = scores < threshold
    draws = torch.rand(scores.shape, generator=generator, device="cpu")
    mask = ~low | (draws >= prune)
    weights = torch.where(low, torch.full_like(scores, 1.0 / (1.0 - prune)), torch.ones_like(scores))
    return mask, weights


def importance_gain(losses: torch.Tensor) -> float:
    """``E[l^2] / E[l]^2 = 1 + CV^2`` of non-negative losses: the variance reduction of sampling samples in
    proportion to their loss instead of uniformly (Katharopoulos & Fleuret, 2018, with the loss as the
    importance score). 1 means the losses are all alike and ranking them cannot pay; it grows as the
    model separates easy from hard samples."""
    losses = losses.detach().float().flatten()
    losses = losses[torch.isfinite(losses)].clamp_min(0.0)
    mean = float(losses.mean()) if losses.numel() else 0.0
    return float((losses**2).mean()) / mean**2 if mean > 0 else 1.0


def start_threshold(scoring_cost: float, keep_fraction: float) -> float:
    """The gain above which selection pays for its scoring: a sifted raw sample costs ``s + a`` training
    steps' worth and yields ``a`` samples worth ``gain`` each, so it beats uniform training when
    ``a * gain > s + a``, i.e. ``gain > 1 + s/a``."""
    return 1.0 + scoring_cost / max(keep_fraction, 1e-6)
