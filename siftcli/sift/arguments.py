"""The loader's arguments in, a ``TypeError``/``ValueError`` naming the wrong one and its fix out: a misplaced argument
is named at construction rather than surfacing as an ``AttributeError`` deep inside the first epoch."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import torch

from siftcli.sift.sifter import SiftConfig


def check_arguments(dataloader: Any, model: Any, loss_fn: Any, config: Any, batch_size: Any) -> None:
    """Each of ``SiftingDataLoader``'s first arguments is of the kind it must be."""
    if not hasattr(dataloader, "__iter__") or isinstance(dataloader, (str, bytes, Mapping)):
        raise TypeError(f"dataloader must be an iterable of batches (a torch DataLoader), got {type(dataloader).__name__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be the torch.nn.Module being trained, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable (model, batch) -> Tensor[batch] of per-sample losses, got "
                        f"{type(loss_fn).__name__} (see siftcli.sift.losses for ready ones)")
    if config is not None and not isinstance(config, SiftConfig):
        raise TypeError(f"config must be a SiftConfig, got {type(config).__name__}"
                        + (": write SiftConfig(**settings)" if isinstance(config, Mapping) else ""))
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive whole number, got {batch_size!r}")
