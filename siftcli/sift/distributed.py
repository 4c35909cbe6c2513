"""Sifting under ``torch.distributed``: one global ranking, and the same number of batches on every rank.

Ranks sift different data, so left alone they would keep different numbers of samples, yield
different numbers of batches, and DDP's gradient all-reduce would wait forever on the rank that ran
dry. The loader therefore (1) ranks every loss against a history gathered from all ranks
(:func:`gather_values`), so a sample's fate does not depend on which rank drew it; (2) yields, after
each raw batch, only as many packed batches as every rank has (:func:`agree_min`), carrying a rank's
surplus to the next raw batch and dropping what is left over at the end of an epoch (counted); and
(3) checks at the start of each epoch that every rank has the same number of raw batches
(:func:`check_same`), which a ``DistributedSampler`` (or siftcli's own sharded sampler) guarantees.
Every function here is a collective: all ranks call it at the same point, or none does.
"""

from __future__ import annotations

import torch


def world_size() -> int:
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _where(device: torch.device | None) -> torch.device:
    dist = torch.distributed
    if dist.get_backend() == "nccl":
        return device if device is not None and device.type == "cuda" else torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_values(values: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
    """Every rank's 1-D float ``values`` (any length, also none), concatenated in rank order."""
    values = values.detach().float().flatten().cpu()
    if world_size() < 2:
        return values
    dist = torch.distributed
    where = _where(device)
    sizes = [torch.zeros(1, dtype=torch.long, device=where) for _ in range(world_size())]
    dist.all_gather(sizes, torch.tensor([values.numel()], device=where))
    counts = [int(s.item()) for s in sizes]
    longest = max(counts)
    if longest == 0:
        return values
    padded = torch.zeros(longest, device=where)
    padded[: values.numel()] = values.to(where)
    parts = [torch.zeros(longest, device=where) for _ in counts]
    dist.all_gather(parts, padded)
    return torch.cat([p[:c].cpu() for p, c in zip(parts, counts)])


def agree_min(n: int, device: torch.device | None = None) -> int:
    """The smallest ``n`` any rank has."""
    if world_size() < 2:
        return n
    dist = torch.distributed
    t = torch.tensor([n], dtype=torch.long, device=_where(device))
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())


def any_true(*flags: bool, device: torch.device | None = None) -> list[bool]:
    """Each flag, true on every rank if it is true on any (one all-reduce for all of them)."""
    if world_size() < 2:
        return [bool(f) for f in flags]
    dist = torch.distributed
    t = torch.tensor([1 if f else 0 for f in flags], dtype=torch.long, device=_where(device))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [bool(v) for v in t.tolist()]


def sum_over_ranks(values: list[float], device: torch.device | None = None) -> list[float]:
    """Each value summed over every rank (float64)."""
    if world_size() < 2:
        return list(values)
    dist = torch.distributed
    t = torch.tensor(values, dtype=torch.float64, device=_where(device))
    dist.all_reduce(t)
    return t.tolist()


def check_same(n: int, what: str, device: torch.device | None = None) -> None:
    """Raise on every rank (the same error, so none waits) unless all ranks have the same ``n``."""
    if world_size() < 2:
        return
    dist = torch.distributed
    t = torch.tensor([n, -n], dtype=torch.long, device=_where(device))
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    low, high = int(t[0].item()), -int(t[1].item())
    if low != high:
        raise ValueError(f"ranks have different numbers of {what} ({low} to {high}), so some would wait forever for the "
                         "others: shard the data with DistributedSampler(drop_last=False) or another sampler that gives "
                         "every rank the same number")
