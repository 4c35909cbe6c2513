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


#: Reductions a library's batch loss may end with, each with the per-row terms it averaged: a plain mean over rows, or
#: a loss function left at ``reduction="mean"`` (its ``"none"`` form averaged within each row).
_MEANS = (torch.Tensor.mean, torch.mean)
_REDUCED = (F.cross_entropy, F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss, F.binary_cross_entropy_with_logits,
            F.binary_cross_entropy)
#: Operations after the mean that keep the loss a mean of per-row terms: a sign, a constant factor or divisor.
_NEG = (torch.Tensor.neg, torch.Tensor.__neg__, torch.neg)
_MUL = (torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.mul)
_DIV = (torch.Tensor.div, torch.Tensor.__truediv__, torch.div)


class _MeanTerms(torch.overrides.TorchFunctionMode):
    """Sees every function a loss calls; follows each scalar that averaged one term per row (and what a sign or a
    constant factor made of it), with those terms."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows
        self.means: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(scalar) -> (scalar, its per-row terms)

    def terms_of(self, t: Any) -> torch.Tensor | None:
        hit = self.means.get(id(t)) if isinstance(t, torch.Tensor) else None
        return hit[1] if hit is not None and hit[0] is t else None

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not (isinstance(out, torch.Tensor) and out.ndim == 0 and args and isinstance(args[0], torch.Tensor)):
            return out
        terms = None
        if func in _MEANS and len(args) == 1 and kwargs.get("dim") is None:
            terms = args[0]
        elif func in _REDUCED and kwargs.get("reduction", "mean") == "mean" and len(args) <= 2:
            terms = func(*args, **{**kwargs, "reduction": "none"})
        elif func in _NEG and (t := self.terms_of(args[0])) is not None:
            terms = -t
        elif (func in _MUL or func in _DIV) and len(args) == 2 and not kwargs:
            a, b = self.terms_of(args[0]), self.terms_of(args[1]) if func in _MUL else None
            other = args[1] if a is not None else args[0]
            constant = isinstance(other, (int, float)) or (isinstance(other, torch.Tensor) and other.ndim == 0
                                                           and self.terms_of(other) is None)
            if constant and (a is not None or b is not None):
                terms = (a if a is not None else b) * other if func in _MUL else a / other
        if terms is not None and terms.ndim >= 1 and terms.shape[0] == self.rows and terms.numel():
            self.means[id(out)] = (out, terms.reshape(self.rows, -1).mean(1))
        return out


def mean_terms(compute: Callable[[], Any], rows: int) -> tuple[Any, torch.Tensor | None]:
    """``compute()`` (a library's batch loss) and, where that loss is a mean of one term per row (an in-batch-negatives
    ranking loss, a cosine or softmax loss), those ``rows`` terms, read from the same forward as it ran: the per-sample
    losses sifting ranks and remembers, with no second forward and no copy of the library's formula. ``None`` where
    the loss is not such a mean (a sum of several losses, a pairwise ranking over the batch)."""
    catcher = _MeanTerms(rows)
    with catcher:
        total = compute()
    return total, catcher.terms_of(total)
