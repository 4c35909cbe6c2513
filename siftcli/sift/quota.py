"""An exact epoch length: batch counts in, how many may leave now out.

Trainers that plan their schedule from ``len()`` (the Hugging Face ``Trainer`` sets ``max_steps`` and stops each epoch
after ``len()`` batches; Lightning validates when the batch index reaches ``len()``) need a loader that yields exactly
``len()`` batches every epoch, whatever the random keep decisions drew. :class:`EpochQuota` holds that promise for the
loader: the last promised batch waits until every raw row of the epoch has been offered (so a trainer that stops at
``len()`` loses none), kept rows beyond the promise carry into the next epoch, and the sifter's floor
(:meth:`~siftcli.sift.sifter.Sifter.start_epoch`) keeps just enough extra rows in an epoch's tail when the draw fell
behind.
"""

from __future__ import annotations

import math

from siftcli.sift.stateful import StateDict


def expected_batches(samples: int, batch_size: int, whole_batches: float, keep_fraction: float,
                     drop_last: bool = False) -> int:
    """Sifted batches from ``samples`` rows when ``whole_batches`` raw batches are kept whole and the rest at
    ``keep_fraction`` (at least 1 when there is any row); full batches only with ``drop_last``."""
    if not samples:
        return 0
    whole = min(samples, whole_batches * batch_size)
    kept = (whole + (samples - whole) * keep_fraction) / batch_size
    return math.floor(kept) if drop_last else max(1, math.ceil(kept))


class EpochQuota:
    """The batch count promised for every epoch (``enabled``), and how many of it were yielded in this one."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.promise: int | None = None  # fixed at the first len(): the trainer plans the whole run from it
        self.yielded = 0

    def start(self) -> None:
        self.yielded = 0

    def floor_rows(self, batch_size: int, carried_rows: int, full_last: bool = False) -> int | None:
        """Rows this epoch must keep to fill the promise, beyond the ``carried_rows`` left from the last (None: no floor);
        ``full_last``: its last batch full too (a loader that drops a short last batch). Otherwise the last batch holds
        at least two rows: a lone row has no in-batch negative and breaks BatchNorm and mixup's pairs."""
        if not self.enabled or self.promise is None:
            return None
        last = 0 if full_last else min(2, batch_size)
        return max(0, (self.promise if full_last else self.promise - 1) * batch_size + last - carried_rows)

    def allowed(self, ready: int, exhausted: bool) -> int:
        """How many of ``ready`` batches may leave now: never past the promise, and the last promised one only once the
        epoch's raw rows are ``exhausted``."""
        if not self.enabled or self.promise is None:
            return ready
        return max(0, min(ready, self.promise - self.yielded - (0 if exhausted else 1)))

    @property
    def done(self) -> bool:
        """The epoch yielded all it promised: a trainer that stops at ``len()`` has ended it."""
        return self.enabled and self.promise is not None and self.yielded >= self.promise

    def state_dict(self) -> StateDict:
        return {"promise": self.promise, "yielded": self.yielded}

    def load_state_dict(self, state: StateDict) -> None:
        self.promise, self.yielded = state["promise"], int(state["yielded"])
