"""Loss functions for the torchrun tests, named in a recipe's ``loss: dist_losses:...`` (tests/ on PYTHONPATH)."""

from __future__ import annotations

import os
import signal

import torch
import torch.distributed as dist

from siftcli.sift.losses import HFLoss

_calls = {"train": 0}
_cross_entropy = HFLoss("cross_entropy")


def skewed(model, batch) -> torch.Tensor:  # noqa: ANN001
    """Rank 0's losses x10, the others' x0.1: against one global ranking, rank 1 keeps far fewer samples.

    With ``SIFTCLI_TEST_STOP_AT=N``, rank 1 sends itself SIGTERM in its N-th training forward (an interrupt
    that reaches one rank only, mid-step); with ``SIFTCLI_TEST_NAN_AT=N`` its N-th training loss is NaN."""
    losses = _cross_entropy(model, batch)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if model.training and rank == 1:
        _calls["train"] += 1
        if _calls["train"] == int(os.environ.get("SIFTCLI_TEST_STOP_AT", "0")):
            os.kill(os.getpid(), signal.SIGTERM)
        if _calls["train"] == int(os.environ.get("SIFTCLI_TEST_NAN_AT", "0")):
            losses = losses * float("nan")
    return losses * (10.0 if rank == 0 else 0.1)
