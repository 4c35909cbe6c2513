"""Sifting under ``torch.distributed``: every rank keeps the same count, so no rank runs dry."""

from __future__ import annotations

import torch


def world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def agree_across_ranks(mask: torch.Tensor, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Every rank keeps the smallest count any rank chose, dropping its surplus at random.

    Ranks sift different data, so left alone they would yield different numbers of batches and
    DDP's gradient all-reduce would wait forever on the rank that ran dry. Equal counts per raw
    batch keep buffers, and so batch counts, equal on every rank (given equal raw batches per
    rank, as ``DistributedSampler`` provides).
    """
    if world_size() < 2:
        return mask
    dist = torch.distributed
    where = device if dist.get_backend() == "nccl" else torch.device("cpu")
    count = torch.tensor([int(mask.sum())], device=where)
    dist.all_reduce(count, op=dist.ReduceOp.MIN)
    k = int(count.item())
    kept = mask.nonzero().flatten()
    if kept.numel() > k:
        drop = kept[torch.randperm(kept.numel(), generator=generator)[: kept.numel() - k]]
        mask = mask.clone()
        mask[drop] = False
    return mask
