"""Per-sample losses for the scoring forward: ``(model, batch) -> Tensor[n]``.

Built-ins cover Hugging Face models whose batch carries ``labels`` and plain
``(inputs, targets)`` batches. Any callable with the same signature works.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

PerSampleLoss = Callable[[torch.nn.Module, Any], torch.Tensor]


def loss_from_logits(logits: torch.Tensor, labels: torch.Tensor, kind: str = "auto") -> torch.Tensor:
    """Per-sample loss for classification, regression or causal-LM logits.

    ``kind`` is ``auto`` (decided from shapes and dtypes), ``cross_entropy``, ``mse``,
    ``bce`` (multi-label) or ``causal_lm`` (mean loss over the sequence's labelled tokens).
    """
    labels = labels.to(logits.device)
    if kind == "auto":
        kind = _guess_kind(logits, labels)
    logits = logits.float()
    if kind == "causal_lm":
        shift_logits = logits[:, :-1, :]
        shift_labels = labels[:, 1:]
        token_loss = F.cross_entropy(
            shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1),
            ignore_index=-100, reduction="none",
        ).view(shift_labels.shape)
        valid = (shift_labels != -100).float()
        return (token_loss * valid).sum(dim=1) / valid.sum(dim=1).clamp_min(1.0)
    if kind == "mse":
        diff = (logits.reshape(labels.shape[0], -1) - labels.float().reshape(labels.shape[0], -1)) ** 2
        return diff.mean(dim=1)
    if kind == "bce":
        bce = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="none")
        return bce.reshape(bce.shape[0], -1).mean(dim=1)
    if kind == "cross_entropy":
        if logits.dim() > 2:  # token classification: mean over labelled positions
            token = F.cross_entropy(logits.transpose(1, -1), labels, ignore_index=-100, reduction="none")
            valid = (labels != -100).float()
            return (token * valid).reshape(labels.shape[0], -1).sum(1) / valid.reshape(labels.shape[0], -1).sum(1).clamp_min(1.0)
        if labels.is_floating_point() and labels.shape == logits.shape:  # soft targets (mixup, label smoothing)
            return F.cross_entropy(logits, labels.float(), reduction="none")
        return F.cross_entropy(logits, labels.long(), reduction="none")
    raise ValueError(f"unknown loss kind {kind!r}; expected auto, cross_entropy, mse, bce or causal_lm")


def _guess_kind(logits: torch.Tensor, labels: torch.Tensor) -> str:
    if logits.dim() == 3 and labels.dim() == 2 and logits.shape[:2] == labels.shape and logits.size(-1) > 1:
        return "causal_lm"
    if labels.is_floating_point():
        if labels.shape == logits.shape and logits.size(-1) > 1:
            return "bce"
        if labels.dim() == 1 and logits.dim() == 2 and logits.size(-1) > 1 and bool((labels == labels.round()).all()):
            return "cross_entropy"  # class ids that arrived as floats: one label, several logits
        return "mse"
    return "cross_entropy"


def _logits_of(output: Any) -> torch.Tensor:
    if isinstance(output, torch.Tensor):
        return output
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, Mapping):
        logits = output.get("logits")
    if logits is None and isinstance(output, (tuple, list)):
        logits = output[0]
    if logits is None:
        raise TypeError(f"the model returned a {type(output).__name__} with no logits")
    return logits


class HFLoss:
    """Per-sample loss for Hugging Face models fed a dict-like batch that has ``labels``.

    ``labels`` and fields that are neither tensors nor nested mappings of them (ids, texts) are not passed to the model;
    a nested mapping (a multimodal model's ``pixel_values`` dict, say) is passed whole. ``kind`` picks the loss (see
    :func:`loss_from_logits`).
    """

    def __init__(self, kind: str = "auto", label_key: str = "labels") -> None:
        self.kind = kind
        self.label_key = label_key

    def __call__(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        if not isinstance(batch, Mapping) or self.label_key not in batch:
            raise TypeError(f"HFLoss needs a dict-like batch with a {self.label_key!r} field")
        inputs = {k: v for k, v in batch.items() if k != self.label_key and isinstance(v, (torch.Tensor, Mapping))}
        return loss_from_logits(_logits_of(model(**inputs)), batch[self.label_key], self.kind)


class TupleLoss:
    """Per-sample loss for ``(inputs, targets)`` batches: cross-entropy, MSE or BCE."""

    def __init__(self, kind: str = "cross_entropy") -> None:
        self.kind = kind

    def __call__(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        inputs, targets = batch[0], batch[1]
        return loss_from_logits(_logits_of(model(inputs)), targets, self.kind)


def cross_entropy_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """``(inputs, targets)`` with integer class targets."""
    return TupleLoss("cross_entropy")(model, batch)


def mse_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
    """``(inputs, targets)`` regression, mean squared error per sample."""
    return TupleLoss("mse")(model, batch)


#: Scores from the model's own predictions, with no label: a training forward's loss is another source, never mixed in.
UNCERTAINTY = ("entropy", "margin")


class Uncertainty:
    """A label-free per-sample score from the model's own predictive distribution (UNIXKD's selection signal): ``entropy``
    of the softmax, or ``margin``, one minus the gap between the two most likely classes. High means unsure: sifting
    keeps those, so a teacher that runs on kept samples only runs where the student has most to learn."""

    def __init__(self, kind: str = "entropy", label_key: str = "labels") -> None:
        if kind not in UNCERTAINTY:
            raise ValueError(f"kind must be entropy or margin, got {kind!r}")
        self.kind = kind
        self.label_key = label_key

    def __call__(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        if isinstance(batch, Mapping):
            output = model(**{k: v for k, v in batch.items() if k != self.label_key and isinstance(v, torch.Tensor)})
        else:
            output = model(batch[0] if isinstance(batch, (tuple, list)) else batch)
        return uncertainty(_logits_of(output), self.kind)


def uncertainty(logits: torch.Tensor, kind: str = "entropy") -> torch.Tensor:
    """Per-row ``entropy`` of ``logits``' softmax, or ``margin``: one minus the gap between the two likeliest classes."""
    log_p = F.log_softmax(logits.float(), dim=-1)
    if kind == "entropy":
        return -(log_p.exp() * log_p).sum(-1)
    top = log_p.exp().topk(2, dim=-1).values
    return 1.0 - (top[:, 0] - top[:, 1])


hf_loss = HFLoss()
