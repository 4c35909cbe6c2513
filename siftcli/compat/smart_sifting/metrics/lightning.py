"""``TrainingMetricsRecorder`` (``smart_sifting.metrics.lightning``): the sifting loader's numbers in Lightning's logs.

A Lightning callback: after every training batch it logs the raw samples seen, the samples kept and the kept fraction
through the LightningModule's logger (``sift/...``), and once per epoch the epoch's kept fraction. It is built on
``pytorch_lightning`` when that package is installed (the published examples import it), else on ``lightning``.
"""

from __future__ import annotations

from typing import Any

try:
    import pytorch_lightning as pl
except ImportError:  # pragma: no cover - the lightning package alone
    import lightning.pytorch as pl

from siftcli.sift.loader import SiftingDataLoader


def _sifting_loader(trainer: Any) -> SiftingDataLoader | None:
    loader = getattr(trainer, "train_dataloader", None)
    loader = getattr(loader, "loaders", loader)  # a CombinedLoader wraps it
    return loader if isinstance(loader, SiftingDataLoader) else None


class TrainingMetricsRecorder(pl.Callback):
    """Logs what the sifting loader kept, per training batch and per epoch."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        loader = _sifting_loader(trainer)
        if loader is None:
            return
        st = loader.stats
        pl_module.log_dict({"sift/num_orig_samples_seen": float(st.raw_samples), "sift/num_orig_samples_kept": float(st.kept_samples),
                            "sift/kept_fraction": st.kept_samples / st.raw_samples if st.raw_samples else 1.0},
                           on_step=True, on_epoch=False)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        loader = _sifting_loader(trainer)
        if loader is None or not loader.stats.epochs:
            return
        epoch = loader.stats.epochs[-1]
        pl_module.log("sift/epoch_kept_fraction", epoch.kept_samples / epoch.raw_samples if epoch.raw_samples else 1.0)
