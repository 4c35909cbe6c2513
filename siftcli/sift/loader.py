"""``SiftingDataLoader``: wraps a ``DataLoader`` and yields full batches of kept samples.

The iterator and the loader's contract (``len``, hooks, the feedback of training losses, checkpoints, the attributes
scripts read off a ``DataLoader``) are here. A pass reads: fetch a raw batch (the :class:`EpochCursor`'s source), admit it
(:class:`InFlight`: its scoring forward queued, decided by the :class:`Sifter` now or one batch later), and yield the
full batches the :class:`~siftcli.sift.batching.Outbox` packed from the kept rows. Each part owns its state and saves it;
:meth:`SiftingDataLoader.state_dict` composes theirs (:mod:`.saved` holds the loader's own and reads older layouts).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from siftcli.sift import batching, saved, transfer
from siftcli.sift.accumulation import EpochEnd, gradient_state
from siftcli.sift.arguments import check_arguments, check_inputs, check_padding, raw_batches
from siftcli.sift.cursor import EpochCursor
from siftcli.sift.distributed import agree_min, check_same, gather_values, rank, world_size
from siftcli.sift.feedback import META_INDEX, META_WEIGHT, Feedback
from siftcli.sift.indices import (
    IndexTracker,
    dataset_len,
    distinct_rows,
    inner_loader,
    length_grouped,
    loader_batch_size,
    model_device,
    sampled_len,
    stateful,
)
from siftcli.sift.inflight import BatchHook, InFlight
from siftcli.sift.losses import PerSampleLoss, Uncertainty
from siftcli.sift.memory import LossMemory
from siftcli.sift.precision import fast_bf16, scoring_precision  # noqa: F401  (re-exported: public since 0.1)
from siftcli.sift.prefilter import SamplerDecisions
from siftcli.sift.quota import EpochQuota, expected_batches
from siftcli.sift.scoring import Scorer
from siftcli.sift.sifter import UNCERTAINTY, SiftConfig, Sifter
from siftcli.sift.stateful import BatchSource, StateDict
from siftcli.sift.stats import BatchDecision, EpochStats, KeptOverlap, SiftStats  # noqa: F401  (re-exported: public since 0.1)

#: Devices where a scored raw batch is decided one batch later, when the next one's forward is queued (a device that
#: runs apart from the host); on the CPU work runs as it is queued, so deciding at once costs nothing and scores with
#: the newest weights. Tests add "cpu" to run the GPU's order where no GPU is.
OVERLAP_DEVICES: tuple[str, ...] = ("cuda",)


class SiftingDataLoader:
    """Drop-in loader: score each raw batch without gradients, keep the informative samples,
    and yield batches of the original size.

    Args:
        dataloader: the original loader (any iterable of batches with a length).
        model: the model being trained; it is put in eval mode for scoring and restored exactly.
        loss_fn: ``(model, batch) -> Tensor[n]`` per-sample losses (see :mod:`siftcli.sift.losses`).
        config: a :class:`SiftConfig`.
        batch_size: size of the yielded batches; defaults to the loader's ``batch_size``.
        device: where scoring runs; defaults to the model's device. Yielded batches stay where
            the original loader put them unless ``yield_on_device`` is set.
        precision: ``fp32``, ``bf16``, ``fp16``, ``auto`` or ``fastest``: autocast for the scoring forward. ``auto``
            scores in bf16 on a CUDA GPU that has it, else fp32 (reproducible); ``fastest`` times fp32 and bf16 on a CPU
            with bf16 instructions (see :func:`fast_bf16`) and keeps the faster; ranking losses needs far less
            precision than training on them.
        batch_transform: applied to each raw batch before anything else, for batch types
            that are not tensors, mappings or tuples of them.
        pad_values: per-field values used when re-padding; ``input_ids`` should be the pad token id.
        padding_side: ``right`` or ``left``, as the tokenizer padded.
        pad_to_multiple_of: packed batches are trimmed to their longest sample rounded up to this multiple,
            so a compiled model sees a few sequence lengths instead of a new one every batch.
        reference_losses: ``Tensor[len(dataset)]``, a reference model's loss per training sample, for
            ``SiftConfig(score="reducible")`` (``siftcli.arms.reference`` computes them cross-fitted).
        epochs: the run's length in epochs; ``SiftConfig(anneal_fraction=...)`` needs it to know when the
            last part of the run begins.
        meta_in_batch: put each yielded mapping batch's dataset indices and loss weights in it too, as
            ``sift_index`` and ``sift_weight``, for loops that fetch batches ahead of using them (gradient
            accumulation); :meth:`training_loss` reads and removes them. Off by default: a model called
            with ``**batch`` would reject them.
        exact_len: yield exactly ``len()`` batches every epoch (:mod:`.quota`), for trainers that plan their
            schedule and validation from ``len()``: with ``epochs``, one count for the run (the average; the delay's
            surplus spreads over later epochs), else each epoch's own; kept rows beyond it carry into the next epoch,
            and an epoch whose draw fell behind keeps a few extra rows at its tail. On by default: a loop that plans its
            schedule from ``len()`` (timm's ``train_one_epoch``, a PEFT loop, accelerate's examples) otherwise stops
            its LR short of its end. ``False``: each epoch yields what it kept, its length known only after it.
            ``None`` (the default): on, unless the wrapped loader streams.
        pack_by_length: pack kept rows with rows of about their width (lanes a quarter of an octave wide, by each row's
            width under the attention mask), so a loader that groups rows by length (the Hugging Face Trainer's
            ``train_sampling_strategy="group_by_length"``, a bucketing batch sampler) keeps its low padding once rows
            are dropped. ``None`` (the default): on where the wrapped loader's sampler groups by length (its class
            name says so).
        pack_distinct: never pack two rows that share a text (a hash of each ``*input_ids`` field under its mask) into
            one batch: rows that would repeat one wait for a later batch. A batch sampler that promised it
            (sentence-transformers' ``BatchSamplers.NO_DUPLICATES``) keeps its promise through packing, so an
            in-batch-negatives loss never meets its positive as a negative. ``None`` (the default): on where the
            wrapped loader's batch sampler is one (its class name says ``NoDuplicates``).

    A wrapped loader without ``len()`` (a ``DataLoader`` over an ``IterableDataset``: streamed data, ``datasets``'
    ``streaming=True``) is sifted as it streams: every raw batch scored (fresh scoring: a stream has no sample indices
    to remember losses by) and ranked against the rolling history, kept rows packed into full batches, a pass ending
    where the stream ends. It has no epoch length to promise, so ``len()`` raises ``TypeError`` as the wrapped loader's
    does (the Hugging Face Trainer then plans by ``max_steps``), ``exact_len=True`` and ``epochs`` are refused, and a
    saved state resumes by fetching the stream again past the raw batches already offered (the stream must yield the
    same rows again, as a seeded shuffle buffer does).

    In a loop of your own, turn the training forward's per-sample losses into the loss to backpropagate
    with ``loss = sifted.training_loss(per_sample_losses)``: it records them by sample (free scores for
    the loss memory: ``SiftConfig(scoring="memory")`` then skips the scoring forward for every sample it
    remembers, and with a map-style ``DataLoader`` a sample it drops is never fetched or collated) and
    applies the rule's weights (``mode="infobatch"``). siftcli's loop and integrations do this for you.

    The loader's parts own their state: :class:`EpochCursor` (where the epoch stands), :class:`InFlight` (raw batches
    between fetch and decision), :class:`Sifter` (history, delay, generator), :class:`Scorer`, the loss memory,
    :class:`Feedback` (yielded batches not yet recorded), :class:`SamplerDecisions` (raw batches decided at the
    sampler), the :class:`~siftcli.sift.batching.Outbox`, :class:`EpochQuota` and :class:`SiftStats`; the loader calls
    them in order and composes their saved states.
    """

    def __init__(self, dataloader: BatchSource, model: torch.nn.Module, loss_fn: PerSampleLoss, config: SiftConfig | None = None, *,
                 batch_size: int | None = None, device: torch.device | str | None = None, precision: str = "fp32",
                 batch_transform: Callable[[Any], Any] | None = None, pad_values: Mapping[str, float] | None = None,
                 padding_side: str = "right", pad_to_multiple_of: int | None = None, yield_on_device: bool = False,
                 reference_losses: torch.Tensor | None = None, epochs: float | None = None, meta_in_batch: bool = False,
                 exact_len: bool | None = None, pack_by_length: bool | None = None,
                 pack_distinct: bool | None = None) -> None:
        if isinstance(dataloader, SiftingDataLoader):
            raise TypeError("dataloader is already a SiftingDataLoader: wrapping it again would sift its kept batches a "
                            "second time; wrap the original DataLoader once (one SiftConfig holds the whole rule)")
        check_arguments(dataloader, model, loss_fn, config, batch_size, epochs)
        check_padding(padding_side, pad_to_multiple_of, pad_values)
        check_inputs(dataloader, config, precision, batch_transform, reference_losses, device, exact_len=exact_len,
                     yield_on_device=yield_on_device, meta_in_batch=meta_in_batch)
        self.dataloader = dataloader
        self.streamed = raw_batches(dataloader) is None  # no len(): sifted as it streams, with no epoch length
        if self.streamed and (exact_len or epochs):
            what = "exact_len=True" if exact_len else f"epochs={epochs!r}"
            raise ValueError(f"{what}: the wrapped loader streams (it has no len(), a DataLoader over an IterableDataset), "
                             "so there is no epoch length to promise or count the run by; plan the run by steps "
                             "(max_steps) and leave exact_len and epochs unset, or give the dataset a __len__")
        exact_len = not self.streamed if exact_len is None else exact_len
        self.config = config or SiftConfig()
        self.batch_size = int(batch_size or loader_batch_size(dataloader) or 0)  # also a batch sampler's, or accelerate's
        if self.batch_size < 1:
            raise ValueError("batch_size is unknown: pass batch_size= or wrap a DataLoader that has one")
        self.device = torch.device(device) if device is not None else model_device(model)
        if self.config.score in UNCERTAINTY:  # the model's own uncertainty replaces the loss as the score
            loss_fn = Uncertainty(self.config.score)
        self.scorer = Scorer(model, loss_fn, self.device, scoring_precision(precision, self.device, "fp32"), reference_losses,
                             self.config.score)
        self.indices = IndexTracker(dataloader)
        if self._needs_indices and not self.indices.available:
            raise ValueError(f"{self._needs_indices} needs sample indices: wrap a DataLoader over a map-style dataset")
        self.memory = LossMemory(dataset_len(dataloader) or 0)
        self.meta_in_batch = meta_in_batch
        self.yield_on_device = yield_on_device
        self.outbox = batching.Outbox(self.batch_size, pad_values, padding_side, pad_to_multiple_of,
                                      by_length=length_grouped(dataloader) if pack_by_length is None else pack_by_length,
                                      distinct=distinct_rows(dataloader) if pack_distinct is None else pack_distinct)
        self.sifter = Sifter(self.config)
        self.feedback = Feedback(self.config, self.sifter, self.scorer, self.memory)
        self.decisions = SamplerDecisions(self.config, self.indices.available, self.memory, self.scorer, self.sifter)
        self.kept_sets = KeptOverlap()
        self.quota = EpochQuota(exact_len)
        # the wrapped loader drops a short last batch: so does this one (a model with BatchNorm, mixup needing pairs)
        self.drop_last = bool(getattr(dataloader, "drop_last", None) or getattr(inner_loader(dataloader), "drop_last", False))
        if world_size() > 1:  # each rank draws its own keep decisions (and saves its own generator)
            self.sifter.generator.manual_seed(int(self.config.seed) + 1_000_003 * rank())
        if epochs:
            self.sifter.total_steps = math.ceil(float(epochs) * len(dataloader))
        self.stats = SiftStats(target_keep_fraction=self.config.target_keep_fraction)
        self.cursor = EpochCursor(dataloader, self.indices)
        # on a GPU a scored raw batch is decided when the next one's forward is queued: the host never waits for scores
        self.inflight = InFlight(self.config, self.sifter, self.scorer, self.memory, self.decisions, self.outbox, self.stats,
                                 self.kept_sets, self.cursor, depth=int(self.device.type in OVERLAP_DEVICES),
                                 batch_transform=batch_transform, needs_indices=self._needs_indices)
        self.inflight.unbatched = isinstance(dataloader, torch.utils.data.DataLoader) and dataloader.batch_size is None
        self._ends: EpochEnd | None = None  # accelerate's GradientState, told where a sifted epoch ends
        #: the trainer's own batches per epoch where it stops an epoch before ``len()`` (Lightning's
        #: ``limit_train_batches``, set by :func:`~siftcli.integrations.lightning.sifting_dataloader`): a pass left after
        #: that many batches ends its epoch, as the trainer's next epoch starts a new pass over a plain loader
        self.pass_limit: Callable[[], float] | None = None
        self.end_of_dataloader, self.remainder = False, -1  # what accelerate reads off its active loader
        self._wrapped_attributes = True  # from here on, attributes of the wrapped loader are read and set through it

    @property
    def _needs_indices(self) -> str | None:
        """The mode that needs each sample's dataset index, if any (named in errors)."""
        if self.scorer.reference_losses is not None:
            return f"score={self.config.score!r}"
        return "scoring='memory'" if self.config.scoring == "memory" else None

    @property
    def model(self) -> torch.nn.Module:
        return self.scorer.model

    @property
    def epoch(self) -> int:
        """Epochs this loader has finished (the one under way, counted from 0)."""
        return self.cursor.epoch

    @property
    def batch_transform(self) -> Callable[[Any], Any] | None:
        return self.inflight.batch_transform

    @property
    def precision(self) -> str:
        """The precision the scoring forward runs in (``fastest`` until the scorer has timed its candidates)."""
        return "fastest" if self.scorer.candidates else self.scorer.precision

    # -- contract ------------------------------------------------------------------------
    def __len__(self) -> int:
        """Expected sifted batches in the next epoch (exact in calibrated mode, up to rounding; always exact with
        ``exact_len``, where it is the run's average when ``epochs`` is known).

        Raw batches kept whole by the schedule (the delay; the anneal) count in full; an ``auto`` delay that has not
        started yet is counted as lasting the whole epoch (an upper bound).
        """
        if self.streamed:
            raise TypeError("this SiftingDataLoader wraps a stream (a DataLoader over an IterableDataset, no len()): its "
                            "epochs have no length to expect; plan the run by steps (max_steps)")
        raw_batches, fraction, quota = len(self.dataloader), self.config.target_keep_fraction, self.quota
        run_known = bool(self.sifter.total_steps)  # exact_len: one promise for the run; else one per epoch
        active = self.cursor.active or self.cursor.resumed  # a pass under way, or one a saved state continues
        if quota.promise is not None and (run_known or (active and not quota.done)):
            return quota.promise
        if quota.enabled and run_known:
            whole = self.sifter.kept_whole_run(raw_batches)
        else:  # with a promise per epoch, reaching here means the next epoch's (or the one starting: its promise is
            # set before its first raw batch, so it is counted as a next epoch, from where the schedule stands)
            whole = self.sifter.kept_whole(raw_batches, mid_epoch=active and not quota.enabled)
        expected = expected_batches(self._epoch_rows(), self.batch_size, whole, fraction, self.drop_last)
        if quota.enabled:
            quota.promise = expected
        return expected

    def _epoch_rows(self) -> int:
        """Raw rows this rank reads per epoch (its share, under a distributed or sharding sampler; 0: a stream's, unknown)."""
        if self.streamed:
            return 0
        sampled, most = sampled_len(self.dataloader), len(self.dataloader) * self.batch_size
        return min(sampled, most) if sampled else most

    # -- what published scripts read off the loader they wrap ------------------------------------
    def __getattr__(self, name: str) -> Any:
        """An attribute this loader does not have is the wrapped loader's (timm's ``loader.mixup_enabled``, a custom
        loader's fields), read through; a property of this class that refuses (``batch_sampler``) keeps its refusal."""
        if name.startswith("__") or "_wrapped_attributes" not in self.__dict__:
            raise AttributeError(name)
        if name in type(self).__dict__:  # a property that raised: its own words, not the wrapped loader's attribute
            return type(self).__dict__[name].__get__(self, type(self))
        try:
            return getattr(self.__dict__["dataloader"], name)
        except AttributeError:
            raise AttributeError(f"'SiftingDataLoader' object has no attribute {name!r}, nor has the "
                                 f"{type(self.__dict__['dataloader']).__name__} it wraps") from None

    def __setattr__(self, name: str, value: Any) -> None:
        """Setting an attribute the wrapped loader has and this one does not (timm turns ``mixup_enabled`` off at
        ``mixup_off_epoch``) sets it there, where the loader that uses it reads it; anything else is this loader's."""
        d = self.__dict__
        if ("_wrapped_attributes" in d and name not in d and not hasattr(type(self), name)
                and hasattr(d["dataloader"], name)):
            setattr(d["dataloader"], name, value)
        else:
            object.__setattr__(self, name, value)

    @property
    def dataset(self) -> Any:
        """The wrapped loader's dataset (scripts read its length)."""
        return self.dataloader.dataset

    @property
    def sampler(self) -> Any:
        """The wrapped loader's sampler: the DDP tutorial's ``sifted.sampler.set_epoch(epoch)`` reaches its
        ``DistributedSampler``, as the loader itself does at every pass."""
        return self.dataloader.sampler

    @property
    def batch_sampler(self) -> Any:
        raise AttributeError(
            "SiftingDataLoader has no batch_sampler to rebuild a loader from (its batches are chosen as it runs), so "
            "accelerate's skip_first_batches cannot skip into it; it resumes mid-epoch by itself from its state_dict(): "
            "register it (accelerator.register_for_checkpointing(sifted)) and, after load_state, iterate it as it is")

    def set_epoch(self, epoch: int) -> None:
        """What accelerate's loaders and the HF Trainer are told before an epoch. The loader counts its epochs itself
        and sets its sampler's from that count at every pass; a count ahead of its own, given before a pass (a loader
        made afresh for a run resumed at a later epoch), moves it there, so the sampler's order is the epoch's."""
        self.cursor.set_epoch(epoch)

    def add_batch_hook(self, hook: BatchHook) -> None:
        """Call ``hook(decision)`` with a :class:`BatchDecision` for every raw batch (logging, plots, accounting)."""
        if not callable(hook):
            raise TypeError(f"hook must be a callable taking a BatchDecision, got {type(hook).__name__}")
        self.inflight.hooks.append(hook)

    @property
    def scoring_cost(self) -> float:
        """``s``: scoring seconds per sample over the loop's training seconds per sample (NaN until both were seen)."""
        return self.scorer.cost(self.stats.scored_samples)

    def __iter__(self) -> Iterator[Any]:
        """One pass (an epoch, or the rest of a resumed one). A newer pass overtakes this one: resuming the older after
        the newer started raises, since both would draw from one sifting state (history, position, packed rows)."""
        self.cursor.passes += 1
        mine = self.cursor.passes
        state = gradient_state(self.dataloader)
        self._ends = EpochEnd(self, state) if state is not None else None
        if self._ends is not None and state.num_steps > 1 and not self.quota.enabled:
            warnings.warn("SiftingDataLoader under accelerate: pass exact_len=True (and epochs=), so that accumulate() "
                          "knows the sifted epoch's last batch and len() plans the schedule", stacklevel=2)
        try:
            for batch in self._pass():
                yield batch
                if self.cursor.passes != mine:
                    raise RuntimeError("this pass over the SiftingDataLoader was overtaken by a newer iter() over it; one "
                                       "loader has one sifting state, so two live passes would interleave their batches: "
                                       "finish (or drop) one pass before starting the next, or wrap a second loader for a "
                                       "second stream")
        finally:
            if self._ends is not None and self.cursor.passes == mine:
                self._ends.leave()

    def _pass(self) -> Iterator[Any]:
        """An epoch's batches: fetch, admit, pack, yield. A pass left before ``len()`` batches (a peek,
        ``next(iter(loader))``, or a loop that broke early) is continued, not counted as an epoch; one left after them
        (the HF Trainer stops at ``len()``) ends its epoch here."""
        cursor, outbox = self.cursor, self.outbox
        continuing = cursor.left_early and cursor.source is not None and self.quota.yielded < self._pass_batches()
        if cursor.left_early and not continuing:
            self._close_epoch()
        cursor.active = True
        source = cursor.source if continuing else self._open_epoch()
        if continuing:
            self._take_back()
        yield from self._flush()  # batches packed but not yet yielded (when the state was saved, or the pass left)
        for raw in self._fetch(source):
            self.inflight.admit(raw, self.indices.next())
            yield from self._flush()
        self.inflight.end_pass()
        self.outbox.merge_lanes()  # packing by length: the lanes' leftovers make full batches together
        if not self.drop_last and self.quota.allowed(len(outbox.pending) + 1, exhausted=True) > len(outbox.pending):
            outbox.drain()  # the rows left become a last, smaller batch (exact_len: only when the promise needs it)
        yield from self._flush(last=True)
        self._close_epoch()

    def _pass_batches(self) -> float:
        """Batches that make a whole epoch's pass: ``len()``, or fewer where the trainer stops each epoch at its own
        limit (:attr:`pass_limit`, Lightning's ``limit_train_batches``): a pass left there ends its epoch."""
        limit = self.pass_limit() if self.pass_limit is not None else math.inf
        return limit if self.streamed else min(len(self), limit)

    def _fetch(self, source: Iterator[Any]) -> Iterator[Any]:
        """The wrapped loader's raw batches, the wait for each counted as data time."""
        while True:
            t0 = time.perf_counter()
            try:
                raw = next(source)
            except StopIteration:
                return
            self.stats.data_wait_seconds += time.perf_counter() - t0
            yield raw

    def _open_epoch(self) -> Iterator[Any]:
        """The wrapped loader's iterator for a new epoch, or for a resumed one past what the saved pass fetched."""
        distributed = world_size() > 1
        self.sifter.share = (lambda values: gather_values(values, self.device)) if distributed else None
        if distributed and not self.streamed:
            check_same(len(self.dataloader), "raw batches per epoch", self.device)
        if not self.cursor.resumed:
            self._start_epoch()
        skip = self.cursor.offered + self.inflight.held_batches  # fetched before the save
        prefilter = None
        if self.decisions.active:  # the sampler decides from memory; on resume it passes over finished raw batches
            epoch = self.cursor.epoch
            prefilter = lambda batch: self.decisions.choose(batch, epoch, self.inflight.keeps_all)  # noqa: E731
            self.decisions.start(skip)
        return self.cursor.open(skip, prefilter)

    def _start_epoch(self) -> None:
        """A new epoch (not a resumed one): the schedule's epoch counter, and nothing left over from the last."""
        self.feedback.settle()  # the last batch's training losses, before this epoch decides anything
        quota = self.quota
        if quota.enabled:
            if not self.sifter.total_steps:  # a run of unknown length promises each epoch its own count
                quota.promise = None
            len(self)  # the promise for this epoch (for the run, when its length is known)
        else:  # what the last pass left buffered is dropped; exact_len carries it over
            self.outbox.clear()
        quota.start()
        self.sifter.start_epoch(quota.floor_rows(self.batch_size, self.outbox.rows(), self.drop_last), self._epoch_rows())
        self.cursor.offered = 0
        self.decisions.clear()
        self.feedback.clear()

    def _take_back(self) -> None:
        """A pass left early goes on: the one batch it yielded that was never trained on (a peek) is yielded again
        first; batches fetched ahead of training and left (more than one never recorded) are forgotten."""
        if len(self.feedback.queue) == 1 and self.cursor.handed is not None:
            self.outbox.pending.insert(0, self.cursor.handed)
            self.quota.yielded -= 1
            self.stats.count_batch(self.cursor.epoch, -1)
        self.feedback.clear()
        self.cursor.handed = None

    def _close_epoch(self) -> None:
        """The epoch is over (its pass ran out, or was left after ``len()`` batches): counted, and nothing of it held."""
        self.inflight.decide_waiting()  # a pass stopped early: the raw batch it fetched is decided like the rest
        overlap = self.kept_sets.close_epoch()
        if overlap is not None:
            self.stats.kept_overlap.append(overlap)
        self.cursor.close()

    # -- what the training loop hands back (see :class:`Feedback`) ---------------------------
    def training_loss(self, losses: torch.Tensor, batch: Any = None) -> torch.Tensor:
        """The scalar to backpropagate from a yielded batch's per-sample training ``losses``: recorded (:meth:`record`)
        and averaged with the rule's weights. Pass the ``batch`` when it carries ``sift_index``/``sift_weight``."""
        return self.feedback.training_loss(losses, batch, self.epoch)

    def follow_loss(self, total: torch.Tensor, losses: torch.Tensor, shares: torch.Tensor | None = None) -> torch.Tensor:
        """The scalar to backpropagate where a library computes the batch loss itself (sentence-transformers' losses,
        TRL's token loss): ``total`` as it is, ``losses`` (its per-sample terms) recorded, and with the rule's weights
        (``infobatch``) each sample's share of ``total`` (``shares``; ``losses / rows`` for a mean) reweighted on top."""
        return self.feedback.follow_loss(total, losses, shares, self.epoch)

    def record(self, losses: torch.Tensor) -> None:
        """Remember a yielded batch's per-sample training losses (free scores); once per batch, in order, so loops
        that fetch ahead stay aligned (:meth:`Feedback.record`)."""
        self.feedback.record(losses, self.epoch)

    @property
    def last_weights(self) -> torch.Tensor | None:
        """Loss weights of the batch being trained on (the oldest not yet recorded); None: all ones."""
        return self.feedback.last_weights

    @property
    def last_indices(self) -> torch.Tensor | None:
        """Dataset indices of the batch being trained on (the oldest not yet recorded), where known."""
        return self.feedback.last_indices

    def _flush(self, last: bool = False) -> Iterator[Any]:
        """Yield the packed batches; under torch.distributed only as many as every rank has (the rest wait
        for the next raw batch; at the end of the epoch they are dropped and counted), so no rank waits."""
        agree = (lambda k: agree_min(k, self.device)) if world_size() > 1 else None
        n, dropped = self.outbox.ready(last and not self.quota.enabled, agree)  # exact_len: the surplus carries over
        self.stats.dropped_to_sync += dropped
        allowed = self.quota.allowed(n, exhausted=last)
        for i in range(allowed):
            self.quota.yielded += 1  # popped before yielding, so a checkpoint between yields loses nothing
            batch, meta = self.outbox.pop()
            self.feedback.push(meta)
            self.cursor.handed = (batch, meta)
            weights = meta["weight"]
            if self.meta_in_batch and isinstance(batch, Mapping):
                batch = {**batch, META_WEIGHT: weights, **({META_INDEX: meta["index"]} if "index" in meta else {})}
            self.stats.count_batch(self.epoch)
            if transfer.pins(self.device) and not self.yield_on_device:  # packed rows are fresh pageable tensors: the
                batch = batching.pinned(batch)  # loop's non_blocking copy to the GPU would block without pinning
            out = batching.to_device(batch, self.device, non_blocking=True) if self.yield_on_device else batch
            if self._ends is not None:  # the epoch's last: the promised count reached (or, without it, the final flush's last)
                q = self.quota
                self._ends.yielding(q.yielded == q.promise if q.enabled and q.promise else last and i == allowed - 1)
            t0 = time.perf_counter()
            yield out
            self.scorer.train_seconds.append((time.perf_counter() - t0) / max(1, weights.numel()))

    # -- checkpointing: every part's own state, and the loader's (:mod:`.saved`) -------------------
    def state_dict(self) -> StateDict:
        """Everything needed to continue mid-epoch with the same decisions: each part's own state."""
        return {**saved.header(self.config.to_dict(), self.batch_size, self._shape()),
                "cursor": self.cursor.state_dict(),
                "sifter": self.sifter.state_dict(),
                "sampler": self.decisions.state_dict(),  # raw batches the sampler was asked for, not yet accounted
                "inflight": self.inflight.state_dict(),  # fetched, its scores on their way
                "outbox": self.outbox.state_dict(),
                "memory": self.memory.state_dict(),
                "kept_sets": self.kept_sets.state_dict(),
                "stats": self.stats.to_dict(),
                "scoring_precision": self.precision,  # what fastest chose: a resumed run must score the same way
                "quota": self.quota.state_dict(),
                "feedback": self.feedback.state_dict()}  # training losses recorded, still on their way to the memory

    def _shape(self) -> StateDict:
        """What the saved state must be loaded back into: the wrapped loader's rows and kind (its position is saved in
        that loader's own terms)."""
        return {"rows": dataset_len(self.dataloader), "stateful": stateful(self.dataloader)}

    def load_state_dict(self, state: StateDict) -> None:
        """Restore a :meth:`state_dict` (also one an older siftcli saved); a saved state of a different sifting config
        or batch size is refused, naming the key."""
        if self.cursor.active and not self.cursor.resumed and self.cursor.source is not None:
            raise RuntimeError("load_state_dict() during a pass over this loader: the pass under way would go on from "
                               "the loaded state's rows; load the state before iterating (a loader made afresh, or "
                               "between two epochs)")
        state = saved.check(state, self.config.to_dict(), self.batch_size, self._shape())
        try:
            self.sifter.load_state_dict(state["sifter"])
            self.outbox.load_state_dict(state["outbox"])
            self.decisions.load_state_dict(state["sampler"])
            self.inflight.load_state_dict(state["inflight"])
            self.feedback.clear()  # batches handed out before the save are not handed out again, nor recorded
            self.feedback.load_state_dict(state.get("feedback"))
            self.memory.load_state_dict(state["memory"])
            self.kept_sets.load_state_dict(state.get("kept_sets", ([], [])))
            if state.get("quota") is not None:
                self.quota.load_state_dict(state["quota"])
            self.cursor.load_state_dict(state["cursor"], epoch_done=self.quota.done)
            self.stats.load_state_dict(state["stats"])
        except (KeyError, TypeError, IndexError, AttributeError) as exc:
            raise ValueError(f"state is not a whole SiftingDataLoader.state_dict() ({type(exc).__name__}: {exc})") from None
        if state.get("scoring_precision", "fastest") not in ("auto", "fastest"):
            self.scorer.precision, self.scorer.candidates = state["scoring_precision"], ()
        self.scorer.seconds = self.stats.scoring_seconds
