"""accelerate's gradient accumulation told where a sifted epoch ends: a sifting loader in, the ``GradientState``
accelerate reads out.

``accelerator.accumulate(model)`` syncs gradients every ``gradient_accumulation_steps`` micro-batches and at the end of
the loader it sees iterating (its ``GradientState``). Over a prepared loader that end is the raw loader's, which comes
before the sifted epoch's (and flags a batch that is not the last): the last sifted micro-batches never synced, and
their gradient leaked into the next epoch. While it yields, the sifting loader stands where accelerate's own loaders
stand (the active loader, ``end_of_dataloader`` set on its last batch), through the calls accelerate's loaders make.
"""

from __future__ import annotations

from typing import Any

from siftcli.sift.stateful import BatchSource


def gradient_state(dataloader: BatchSource) -> Any | None:
    """The ``GradientState`` of a loader ``accelerator.prepare`` made (``DataLoaderShard``, ``DataLoaderDispatcher``);
    None for any other loader (accelerate is never imported here)."""
    state = getattr(dataloader, "gradient_state", None)
    return state if callable(getattr(state, "_add_dataloader", None)) else None


class EpochEnd:
    """One pass of ``loader`` as accelerate's ``GradientState`` sees it."""

    def __init__(self, loader: BatchSource, state: Any) -> None:
        self.loader, self.state = loader, state

    def yielding(self, last: bool) -> None:
        """Before a batch leaves: the loader is the active one (on top of a raw loader it iterates), and ``last``
        says whether this batch ends the epoch."""
        self.loader.end_of_dataloader = last
        self.state._remove_dataloader(self.loader)
        self.state._add_dataloader(self.loader)

    def leave(self) -> None:
        """The pass is over (or abandoned): accelerate no longer reads this loader."""
        self.loader.end_of_dataloader = False
        self.state._remove_dataloader(self.loader)
