"""The loader's arguments in, a ``TypeError``/``ValueError`` naming the wrong one and its fix out: a misplaced argument
is named at construction rather than surfacing as an ``AttributeError`` deep inside the first epoch."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import torch

from siftcli.sift.sifter import SiftConfig


def raw_batches(dataloader: object) -> int | None:
    """``len(dataloader)``: its raw batches per epoch, or ``None`` for a stream (a ``DataLoader`` over an
    ``IterableDataset`` without ``__len__``), which is sifted without an epoch length (see ``SiftingDataLoader``)."""
    try:
        return len(dataloader)
    except TypeError:
        return None


def _positive_whole(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Integral) and value >= 1


def check_arguments(dataloader: object, model: object, loss_fn: object, config: object, batch_size: object, epochs: object = None) -> None:
    """Each of ``SiftingDataLoader``'s first arguments, and the run's length, is of the kind it must be."""
    if not hasattr(dataloader, "__iter__") or isinstance(dataloader, (str, bytes, Mapping)):
        raise TypeError(f"dataloader must be an iterable of batches (a torch DataLoader), got {type(dataloader).__name__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be the torch.nn.Module being trained, got {type(model).__name__}")
    meta = next((name for name, p in model.named_parameters() if p.is_meta), None)
    if meta is not None:
        raise ValueError(f"model: its parameter {meta} is on the meta device (a shape with no data), so nothing can score "
                         "or train it; load its weights first (model.to_empty(device=...) then load_state_dict, or "
                         "from_pretrained without device='meta'), then wrap the loader")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable (model, batch) -> Tensor[batch] of per-sample losses, got "
                        f"{type(loss_fn).__name__} (see siftcli.sift.losses for ready ones)")
    if config is not None and not isinstance(config, SiftConfig):
        raise TypeError(f"config must be a SiftConfig, got {type(config).__name__}"
                        + (": write SiftConfig(**settings)" if isinstance(config, Mapping) else ""))
    if batch_size is not None and not _positive_whole(batch_size):
        raise ValueError(f"batch_size must be a positive whole number, got {batch_size!r}")
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, numbers.Real)
                               or not math.isfinite(epochs) or epochs <= 0):
        raise ValueError(f"epochs must be the run's length in epochs, a finite number above 0 (or None), got {epochs!r}")
    if config is not None and config.anneal_fraction and not epochs:
        raise ValueError("anneal_fraction needs epochs=: the loader must know when the last part of the run begins")


def check_padding(padding_side: Any, pad_to_multiple_of: Any, pad_values: Any) -> None:
    """How packed batches are re-padded: a side, a positive multiple (or None), pad values by field."""
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left' (as the tokenizer padded), got {padding_side!r}")
    if pad_to_multiple_of is not None and not _positive_whole(pad_to_multiple_of):
        raise ValueError(f"pad_to_multiple_of must be a positive whole number or None, got {pad_to_multiple_of!r}")
    if pad_values is not None and not isinstance(pad_values, Mapping):
        raise TypeError(f"pad_values must map field names to pad values, such as {{'input_ids': tokenizer.pad_token_id}}, "
                        f"got {type(pad_values).__name__}")


def check_inputs(dataloader: object, config: Any, precision: object, batch_transform: object, reference_losses: object, device: Any,
                 **flags: Any) -> None:
    """The rest of the loader's keywords: a scoring precision, a callable transform, a reference loss for every sample
    the loader can index (exactly when the config scores by one), a torch device, and ``flags`` (``exact_len``,
    ``yield_on_device``, ``meta_in_batch``) that are booleans."""
    if precision not in ("fp32", "bf16", "fp16", "auto", "fastest"):
        raise ValueError(f"precision must be fp32, bf16, fp16, auto or fastest, got {precision!r}")
    config = config or SiftConfig()
    if config.uses_reference != (reference_losses is not None):
        raise ValueError(f"score={config.score!r} and reference_losses go together: pass both (score 'reducible' or "
                         "'reference') or neither")
    if batch_transform is not None and not callable(batch_transform):
        raise TypeError(f"batch_transform must be a callable batch -> batch, got {type(batch_transform).__name__}")
    for name, flag in flags.items():
        if not isinstance(flag, bool) and not (name == "exact_len" and flag is None):  # None: the loader's choice
            raise TypeError(f"{name} must be True or False, got {flag!r}")
    if device is not None:
        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(f"device {device!r}: expected a torch device such as 'cpu' or 'cuda' (default: the model's)") from None
    if reference_losses is not None:
        if not isinstance(reference_losses, torch.Tensor) or reference_losses.dim() != 1:
            raise TypeError("reference_losses must be a 1-D Tensor, one reference loss per training sample (index), got "
                            f"{type(reference_losses).__name__}")
        n = getattr(getattr(dataloader, "dataset", None), "__len__", None)
        if n is not None and reference_losses.numel() < n():  # more is harmless: indices below n are read
            raise ValueError(f"reference_losses holds {reference_losses.numel()} values for a dataset of {n()} samples; pass "
                             "one reference loss per training sample")


#: What every saved loader state holds (:meth:`SiftingDataLoader.state_dict`).
STATE_KEYS = ("config", "sifter", "cursor", "sampler", "inflight", "outbox", "memory", "stats")


def check_state(state: Any, batch_size: int) -> None:
    """A state for ``load_state_dict`` is a mapping a ``state_dict()`` made, of a loader yielding the same batch size:
    a malformed one is named here, not met as a ``KeyError`` halfway through restoring it."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be the dict SiftingDataLoader.state_dict() returned, got {type(state).__name__}")
    missing = [k for k in STATE_KEYS if k not in state]
    if missing:
        raise ValueError(f"state is not a SiftingDataLoader.state_dict(): it lacks {', '.join(map(repr, missing))}")
    if not isinstance(state["config"], Mapping):
        raise ValueError(f"state['config'] must be the sifting config as a dict, got {type(state['config']).__name__}")
    saved = state.get("batch_size")
    if saved is not None and saved != batch_size:
        raise ValueError(f"the saved loader state yields batches of {saved}, this loader of {batch_size}: its packed and "
                         f"waiting rows would be cut differently; resume with batch_size={saved}")
