"""MosaicML Composer with sifting: a callback that puts the sifting loader's state in Composer's checkpoints.

Composer's ``Trainer`` saves the state of its callbacks with every checkpoint and restores them at ``load_path``, but
it saves no state of the training dataloader: on resume it "spins" the loader, iterating the resumed epoch's batches up
to the checkpoint's, which replays neither the sifting decisions nor their random draws (the resumed run trained
other rows: loader epoch 1 instead of 2, other weights). :class:`SiftingCallback` carries the loader's own state (its
position in the epoch, the loss history, the kept rows waiting, the generators) in the checkpoint, and the loader
continues its epoch from it; so the Trainer must not spin it: ``Trainer(..., spin_dataloaders=False)``::

    sifted = SiftingDataLoader(train_loader, model, loss_fn, SiftConfig(...), epochs=3)
    trainer = Trainer(model=composer_model, train_dataloader=sifted, max_duration="3ep",
                      callbacks=[SiftingCallback(sifted)], spin_dataloaders=False, ...)

The model's ``loss(outputs, batch)`` returns ``sifted.training_loss(per_sample_losses)`` (the rule's weights, and the
losses memory scoring remembers), as in any loop.
"""

from __future__ import annotations

from typing import Any

from siftcli.sift.loader import SiftingDataLoader

try:
    from composer.core import Callback, State
    from composer.loggers import Logger
except ImportError as e:  # pragma: no cover - the route needs the library it routes
    raise ImportError("siftcli.integrations.composer needs Composer: pip install mosaicml") from e


class SiftingCallback(Callback):
    """Saves ``loader``'s state in every Composer checkpoint and restores it at ``load_path``."""

    def __init__(self, loader: SiftingDataLoader) -> None:
        if not isinstance(loader, SiftingDataLoader):
            raise TypeError(f"SiftingCallback: loader must be the SiftingDataLoader given to the Trainer as "
                            f"train_dataloader, got {type(loader).__name__}")
        self.loader = loader
        self._checked = True  # the first batch of each fit is checked (fit_start arms it)

    def state_dict(self) -> dict[str, Any]:
        return {"sifting_loader": self.loader.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.loader.load_state_dict(state["sifting_loader"])

    def fit_start(self, state: State, logger: Logger) -> None:
        self._checked = False

    def after_dataloader(self, state: State, logger: Logger) -> None:
        """At the first batch of a fit: the loader's count of batches yielded in this epoch must be the Trainer's. A
        Trainer that spun the loader on resume (``spin_dataloaders=True``, Composer's default) drew the resumed
        epoch's batches again from a loader that had continued its epoch by itself: refused, naming the fix."""
        if self._checked:
            return
        self._checked = True
        theirs, ours = int(state.timestamp.batch_in_epoch) + 1, self.loader.quota.yielded
        if ours != theirs:
            raise ValueError(f"SiftingCallback: the sifting loader yielded {ours} batches of this epoch where the Trainer "
                             f"counts {theirs}: the Trainer spun the loader to the checkpoint's batch, but the loader "
                             "continues its epoch from its own state; give Trainer(spin_dataloaders=False)")
