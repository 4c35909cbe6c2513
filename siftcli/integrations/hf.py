"""Hugging Face ``Trainer`` with sifting: the training loop stays the Trainer's own.

The sifting loader's state (history, keep decisions, the position in the epoch) is saved in every checkpoint the
Trainer writes (``sifting_loader_rank{N}.pt``, plain tensors and containers: it loads with ``weights_only=True``) and
restored when training resumes from it, so a resumed run continues with the decisions the uninterrupted one would have
made. The loader resumes mid-epoch by itself: the Trainer still counts the resumed epoch's finished micro-batches (its
step, its gradient accumulation, its schedule and evaluations go on as in the uninterrupted run), but its call to skip
them (accelerate's ``skip_first_batches``, which would rebuild a plain loader) returns the sifting loader as it is. The
kept fraction goes into every training log (``log_history``, the metrics, each ``report_to`` tracker) as
``sift_kept_fraction``.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from transformers import Trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from siftcli.runio import atomic_torch_save
from siftcli.sift.arguments import raw_batches
from siftcli.sift.loader import SiftingDataLoader
from siftcli.sift.losses import PerSampleLoss, hf_loss
from siftcli.sift.sifter import SiftConfig
from siftcli.sift.stateful import BatchSource


@contextlib.contextmanager
def _loader_resumes_itself() -> Iterator[None]:
    """While the Trainer trains: its ``skip_first_batches`` (accelerate's, called for a resumed epoch) returns a sifting
    loader as it is, since that loader resumes mid-epoch from its own state; every other loader is skipped as before."""
    import transformers.trainer as trainer_module

    original = getattr(trainer_module, "skip_first_batches", None)
    if original is None:  # a Trainer that skips some other way: nothing to pass through
        yield
        return

    def skip_first_batches(dataloader: BatchSource, num_batches: int = 0) -> BatchSource:
        return dataloader if isinstance(dataloader, SiftingDataLoader) else original(dataloader, num_batches)

    trainer_module.skip_first_batches = skip_first_batches
    try:
        yield
    finally:
        trainer_module.skip_first_batches = original


def run_epochs(args: Any, raw_batches: int, keep_fraction: float) -> float:
    """The run's length in epochs as the Trainer will plan it from ``args`` (``max_steps`` wins over
    ``num_train_epochs``; ``keep_fraction`` of ``raw_batches`` per epoch), for the loader's exact epoch length."""
    if args.max_steps and args.max_steps > 0:
        return args.max_steps * args.gradient_accumulation_steps / max(1.0, raw_batches * keep_fraction)
    return float(args.num_train_epochs)


def smoothed_losses(logits: torch.Tensor, labels: torch.Tensor, epsilon: float) -> torch.Tensor:
    """Per-sample label-smoothed cross-entropy, the Trainer's ``LabelSmoother`` before its mean: ``(1 - epsilon)`` of
    the negative log-likelihood plus ``epsilon`` of the mean negative log-probability over classes, over each sample's
    labelled positions (tokens labelled -100 left out). Their mean over a batch of single labels is the Trainer's."""
    log_probs = -torch.log_softmax(logits.float(), dim=-1)
    labels = labels.to(logits.device)
    if labels.dim() == log_probs.dim() - 1:
        labels = labels.unsqueeze(-1)
    padding = labels.eq(-100)
    nll = log_probs.gather(dim=-1, index=labels.clamp(min=0)).masked_fill(padding, 0.0)
    smooth = log_probs.mean(dim=-1, keepdim=True).masked_fill(padding, 0.0)
    per = ((1 - epsilon) * nll + epsilon * smooth).reshape(labels.shape[0], -1)
    counted = (~padding).reshape(labels.shape[0], -1).sum(1).clamp_min(1)
    return per.sum(1) / counted


def trainer_precision(args: Any) -> str:
    """The scoring forward's precision: the one the Trainer trains in (its autocast), so ranking costs what a training
    forward costs and never runs fp32 beside a bf16 step."""
    return "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"


class SiftingTrainer(Trainer):
    """A ``Trainer`` whose training loader is a :class:`SiftingDataLoader`.

    ``len()`` of the sifting loader is the expected number of sifted batches per epoch over the run, and every epoch
    yields exactly that many (``exact_len``: every raw row is still offered, a surplus carries into the next epoch), so
    the Trainer's step count and learning-rate schedule end where they were planned.
    The training loss is ``sift_loss`` per sample, recorded by sample (free scores for
    ``scoring="memory"`` and the ``auto`` delay) and weighted by the rule (``infobatch``);
    losses are recorded in the order batches were yielded, so gradient accumulation, which
    fetches batches ahead, records each against the right samples.

    A streamed ``train_dataset`` (an ``IterableDataset``, ``datasets``' ``streaming=True``) is sifted as it streams with
    ``max_steps`` set, as the plain Trainer needs for a stream: the sifting loader has no length then, so the Trainer
    plans by ``max_steps`` and goes over the stream again until it has run them.
    """

    def __init__(self, *args: Any, sift_config: SiftConfig | None = None, sift_loss: PerSampleLoss | None = None,
                 pad_token_id: int | None = None, **kwargs: Any) -> None:
        if sift_config is not None and not isinstance(sift_config, SiftConfig):
            raise TypeError(f"SiftingTrainer: sift_config must be a SiftConfig, got {type(sift_config).__name__}"
                            + (": write sift_config=SiftConfig(**settings)" if isinstance(sift_config, dict) else ""))
        if sift_loss is not None and not callable(sift_loss):
            raise TypeError(f"SiftingTrainer: sift_loss must be a callable (model, batch) -> Tensor[batch], got "
                            f"{type(sift_loss).__name__} (see siftcli.sift.losses)")
        super().__init__(*args, **kwargs)
        if not type(self).compute_loss.__module__.startswith("siftcli."):  # the user's own, not a siftcli route's
            warnings.warn(f"{type(self).__name__} overrides compute_loss: return "
                          "self.sifting_loader.training_loss(per_sample_losses) from it for the training batches, or the "
                          "sifting rule's weights and the losses it remembers never see them (or give sift_loss= instead)",
                          stacklevel=2)
        self.sift_config = sift_config or SiftConfig()
        self.sift_loss = sift_loss or hf_loss
        self.pad_token_id = pad_token_id
        self.sifting_loader: SiftingDataLoader | None = None
        self._sift_resume: str | None = None  # the checkpoint a resumed train() restores the loader from
        self.loss_is_scaled_for_ga = False  # compute_loss returns a per-micro-batch mean: the Trainer divides by GA

    def get_train_dataloader(self) -> SiftingDataLoader:
        streamed = isinstance(self.train_dataset, torch.utils.data.IterableDataset)  # the Trainer asks max_steps of it
        base = super().get_train_dataloader()
        pad = {"input_ids": self.pad_token_id} if self.pad_token_id is not None else None
        self.sifting_loader = SiftingDataLoader(base, self.model, self.sift_loss, self.sift_config,
                                                batch_size=self._train_batch_size, pad_values=pad,
                                                precision=trainer_precision(self.args),
                                                epochs=None if streamed else run_epochs(
                                                    self.args, raw_batches(base), self.sift_config.target_keep_fraction),
                                                exact_len=not streamed)
        saved = self._sift_state_path(self._sift_resume) if self._sift_resume else None
        # saved after an epoch's last step, the loader starts the next itself; ignore_data_skip (the Trainer starts the
        # interrupted epoch again) starts it with a fresh sifting state, as the docs say
        if saved and os.path.exists(saved) and not self.args.ignore_data_skip:
            self.sifting_loader.load_state_dict(torch.load(saved, weights_only=True))
        return self.sifting_loader

    def _sift_state_path(self, checkpoint: str) -> str:
        return os.path.join(checkpoint, f"sifting_loader_rank{self.args.process_index}.pt")

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """As ``Trainer.train``; resuming restores the sifting loader's state from the checkpoint (a checkpoint without
        it, written by a plain ``Trainer``, is refused unless ``ignore_data_skip``: then the interrupted epoch starts again)."""
        if resume_from_checkpoint is True:
            resume_from_checkpoint = get_last_checkpoint(self.args.output_dir)
        self._sift_resume = resume_from_checkpoint or None
        if self._sift_resume:
            if not os.path.exists(self._sift_state_path(self._sift_resume)) and not self.args.ignore_data_skip:
                raise ValueError(f"resume_from_checkpoint: {self._sift_resume} holds no "
                                 f"{os.path.basename(self._sift_state_path(self._sift_resume))} (a plain Trainer, or another "
                                 "number of processes, wrote it), so the sifting loader cannot continue the interrupted "
                                 "epoch; set TrainingArguments(ignore_data_skip=True) to start that epoch again from its "
                                 "beginning with a fresh sifting state")
        try:
            with _loader_resumes_itself():
                return super().train(resume_from_checkpoint, *args, **kwargs)
        finally:
            self._sift_resume = None

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.sifting_loader is None:
            return
        folder = os.path.join(self._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        os.makedirs(folder, exist_ok=True)  # every rank writes its own file, whichever rank made the folder
        atomic_torch_save(Path(self._sift_state_path(folder)), self.sifting_loader.state_dict(), every_rank=True)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        """Every training log carries the kept fraction so far (``sift_kept_fraction``)."""
        st = self.sifting_loader.stats if self.sifting_loader is not None else None
        if st is not None and st.raw_samples and self.model is not None and self.model.training:
            logs = {**logs, "sift_kept_fraction": st.kept_samples / st.raw_samples}
        super().log(logs, *args, **kwargs)

    def compute_loss(self, model: torch.nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        if self.sifting_loader is None or return_outputs or not model.training:  # evaluation batches
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        epsilon = float(getattr(self.args, "label_smoothing_factor", 0.0) or 0.0)
        if epsilon and self.sift_loss is hf_loss and "labels" in inputs:  # the Trainer's label smoother, per sample
            logits = model(**{k: v for k, v in inputs.items() if k != "labels"}).logits
            return self.sifting_loader.training_loss(smoothed_losses(logits, inputs["labels"], epsilon))
        return self.sifting_loader.training_loss(self.sift_loss(model, inputs))
