"""SageMaker smart sifting's ``SiftingDataloader`` on siftcli's engine (``smart_sifting.dataloader.sift_dataloader``).

The published code runs after changing only the imports: the constructor takes the documented arguments in the
documented order, a batch transform may return a :class:`ListBatch` or :class:`TensorBatch`, the loss receives the
DataLoader's own batch as ``original_batch``, and the kept samples come back through ``reverse_transform`` in the
form the loop expects. Unlike the original, the loader has a length and reports what it kept (``.stats``).

Progress goes to the :mod:`logging` logger of this module at INFO, one line per raw batch in the documented
``name: value`` form (``num_orig_samples_seen: 512``), so metric definitions that scrape the log capture it.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch

from siftcli.compat.smart_sifting.data_model.data_model_interface import SiftingBatch, SiftingBatchTransform
from siftcli.compat.smart_sifting.loss.abstract_sift_loss_module import Loss
from siftcli.compat.smart_sifting.sift_config.sift_configs import RelativeProbabilisticSiftConfig
from siftcli.sift.indices import loader_batch_size
from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.stateful import BatchSource, StateDict
from siftcli.sift.stats import BatchDecision

logger = logging.getLogger(__name__)

#: ``log_batch_data=True`` keeps this many raw batches' decisions (the oldest go first), so a long run stays bounded.
BATCH_LOG_LIMIT = 10_000
ROW = "__sift_row__"  # the field that carries a SiftingBatch's sample ids through the engine


class _Rows:
    """Samples of :class:`SiftingBatch` batches by id, from the raw batch that held them until their batch is yielded
    (or they are dropped): the engine cuts and packs the ids, and the kept samples are put back together by their
    batch type."""

    def __init__(self) -> None:
        self.rows: dict[int, tuple[type[SiftingBatch], Any]] = {}
        self.next_id = 0

    def put(self, batch: SiftingBatch) -> torch.Tensor:
        ids = torch.arange(self.next_id, self.next_id + len(batch))
        for i, key in enumerate(ids.tolist()):
            self.rows[key] = (type(batch), batch.row(i))
        self.next_id += len(batch)
        return ids

    def batch(self, ids: torch.Tensor, *, forget: bool) -> SiftingBatch:
        """The samples ``ids`` as a batch of their type; ``forget``: they are handed out, not kept for later."""
        kind, _ = self.rows[int(ids[0])]
        get = self.rows.pop if forget else self.rows.__getitem__
        return kind.from_rows([get(key)[1] for key in ids.tolist()])

    def drop(self, ids: torch.Tensor) -> None:
        for key in ids.tolist():
            self.rows.pop(key, None)


class SiftingDataloader(SiftingDataLoader):
    """``SiftingDataloader(sift_config, orig_dataloader, batch_transforms=None, loss_impl, model, log_batch_data=False,
    batch_format_index=None)``, as documented; ``batch_size=`` names the batch size where the DataLoader does not
    (a batch sampler's, accelerate's loader), ``seed=`` seeds the keep decisions, ``epochs=`` (the run's length) makes
    ``len()`` one count for the whole run, which a trainer that plans its schedule from ``len()`` then ends exactly.

    Every epoch yields exactly ``len()`` batches (``exact_len``, see :mod:`siftcli.sift.quota`): a Hugging Face Trainer
    or Lightning that stops at ``len()`` still has every raw row offered, and kept rows beyond it wait for the next epoch.

    ``batch_format_index``: which dimension of a tensor batch indexes the samples, 0 (the default) or 1 (a batch laid
    out feature by sample is transposed for sifting and back for the loop).
    """

    def __init__(self, sift_config: RelativeProbabilisticSiftConfig | dict, orig_dataloader: BatchSource,
                 batch_transforms: SiftingBatchTransform | None = None, loss_impl: Loss | None = None,
                 model: torch.nn.Module | None = None, log_batch_data: bool = False, batch_format_index: int | None = None,
                 *, batch_size: int | None = None, seed: int = 0, epochs: float | None = None) -> None:
        if isinstance(batch_transforms, torch.nn.Module) or isinstance(loss_impl, torch.nn.Module):
            raise TypeError("SiftingDataloader: a model was passed where batch_transforms or loss_impl goes; the documented "
                            "order is (sift_config, orig_dataloader, batch_transforms, loss_impl, model): pass model= by name")
        if isinstance(loss_impl, type) or isinstance(batch_transforms, type):
            which = "loss_impl" if isinstance(loss_impl, type) else "batch_transforms"
            got = loss_impl if which == "loss_impl" else batch_transforms
            raise TypeError(f"SiftingDataloader: {which}={got.__name__} is a class; pass an instance: {which}={got.__name__}()")
        if batch_transforms is not None and not all(callable(getattr(batch_transforms, m, None))
                                                    for m in ("transform", "reverse_transform")):
            raise TypeError(f"SiftingDataloader: batch_transforms must be a SiftingBatchTransform (with transform and "
                            f"reverse_transform methods), got {type(batch_transforms).__name__}")
        if not isinstance(sift_config, (RelativeProbabilisticSiftConfig, dict)):
            raise TypeError(f"SiftingDataloader: sift_config must be a RelativeProbabilisticSiftConfig (or a dict of its "
                            f"fields), got {type(sift_config).__name__} {sift_config!r:.40}")
        if loss_impl is None or not callable(getattr(loss_impl, "loss", None)):
            raise TypeError("SiftingDataloader: loss_impl= is required: an instance of a Loss subclass whose loss(model, "
                            "transformed_batch, original_batch) returns one loss per sample")
        if model is None:
            raise TypeError("SiftingDataloader: model= is required: the model being trained (it scores each batch)")
        if batch_format_index not in (None, 0, 1):
            raise ValueError(f"SiftingDataloader: batch_format_index={batch_format_index!r}; expected 0 (dimension 0 indexes "
                             "the samples) or 1 (dimension 1 does)")
        if isinstance(sift_config, dict):
            sift_config = RelativeProbabilisticSiftConfig(**sift_config)
        size = batch_size or loader_batch_size(orig_dataloader)
        if not size:
            raise ValueError("SiftingDataloader: the batch size is unknown (this DataLoader has none, as with a batch "
                             "sampler or accelerate's loader): pass batch_size=")
        self.loss_impl, self.batch_transforms, self.log_batch_data = loss_impl, batch_transforms, log_batch_data
        self.batch_format_index = batch_format_index or 0
        self.batch_log: deque[dict[str, Any]] = deque(maxlen=BATCH_LOG_LIMIT)
        self._rows = _Rows()
        self._original: Any = None
        trainer = getattr(model, "_trainer", None)  # a LightningModule under DDP: each rank reads its own shard
        if int(getattr(trainer, "world_size", 1) or 1) > 1:
            from siftcli.integrations.lightning import sharded

            orig_dataloader = sharded(orig_dataloader, trainer)
        super().__init__(orig_dataloader, model, self._loss, sift_config.to_sift_config(seed), batch_size=size,
                         batch_transform=self._transform, exact_len=True, epochs=epochs)
        self.add_batch_hook(self._after_decision)

    def _transform(self, raw: Any) -> Any:
        """The raw batch as the engine cuts it; the DataLoader's own batch is kept for the loss."""
        self._original = raw
        batch = raw.transpose(0, 1) if self.batch_format_index == 1 and isinstance(raw, torch.Tensor) else raw
        if self.batch_transforms is not None:
            batch = self.batch_transforms.transform(batch)
        if isinstance(batch, SiftingBatch):
            return {ROW: self._rows.put(batch)}
        return batch

    def _loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        # the scoring pass: the samples stay until they are yielded or dropped
        transformed = self._rows.batch(batch[ROW], forget=False) if isinstance(batch, dict) and ROW in batch else batch
        return self.loss_impl.loss(model, transformed, self._original)

    def _after_decision(self, d: BatchDecision) -> None:
        if isinstance(d.raw, dict) and ROW in d.raw:  # what was dropped is never yielded: forget it now
            self._rows.drop(d.raw[ROW][~d.mask])
        st = self.stats
        logger.info("num_orig_samples_seen: %d", st.raw_samples)
        logger.info("num_orig_samples_kept: %d", st.kept_samples)
        logger.info("num_orig_samples_sifted: %d", st.raw_samples - st.kept_samples)
        logger.info("kept_fraction: %.4f", st.kept_samples / st.raw_samples if st.raw_samples else 1.0)
        if self.log_batch_data:
            self.batch_log.append({"kept": d.mask.nonzero().flatten().tolist(),
                                   "losses": None if d.losses is None else d.losses.tolist()})

    def __len__(self) -> int:
        """As :meth:`SiftingDataLoader.__len__`; the run's length, when not given, is read from a Lightning trainer the
        model is attached to (the smart-sifting Lightning shape passes the LightningModule as ``model``), so the count
        stays the same every epoch and Lightning validates at the end of each."""
        if self.sifter.total_steps is None and self.quota.promise is None:
            epochs = getattr(getattr(self.model, "_trainer", None), "max_epochs", None)
            if isinstance(epochs, int) and epochs > 0:
                self.sifter.total_steps = math.ceil(epochs * len(self.dataloader))
        return super().__len__()

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            if isinstance(batch, dict) and ROW in batch:
                batch = self._rows.batch(batch[ROW], forget=True)
            if self.batch_transforms is not None:
                batch = self.batch_transforms.reverse_transform(batch)
            if self.batch_format_index == 1 and isinstance(batch, torch.Tensor):
                batch = batch.transpose(0, 1)
            yield batch

    def state_dict(self) -> StateDict:
        """The engine's state and the samples of transformed batches not yet yielded."""
        return {**super().state_dict(), "compat_rows": {"rows": self._rows.rows, "next_id": self._rows.next_id}}

    def load_state_dict(self, state: StateDict) -> None:
        super().load_state_dict(state)
        saved = state.get("compat_rows") or {}
        self._rows.rows, self._rows.next_id = dict(saved.get("rows", {})), int(saved.get("next_id", 0))
