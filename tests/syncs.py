"""Counting host-device synchronisations on a machine without a GPU.

On a CUDA device a host read of a device value (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``, a boolean-mask
index, ``nonzero``) makes the host wait for the GPU to finish everything queued before it, so host time and GPU time add
up instead of overlapping. On a CPU nothing waits, but the same reads happen: :class:`SyncCounter` finds them. It marks
the model's parameters and buffers as "on the device", lets that mark flow to every tensor computed from a marked one
(a ``TorchFunctionMode`` sees every tensor operation), and counts each host read of a marked tensor, with where it
happened. A copy into an unmarked (host) tensor with ``non_blocking=True`` is the legitimate way out (a pinned buffer
read later), so its result stays unmarked.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_MARK = "_sync_count_on_device"
#: Tensor methods that read a value on the host (each one a synchronisation on CUDA).
_READS = {"__bool__", "__int__", "__float__", "__index__", "item", "tolist", "numpy", "nonzero", "masked_select", "unique",
          "__array__", "cpu"}


def _marked(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return bool(getattr(value, _MARK, False))
    if isinstance(value, (list, tuple)):
        return any(_marked(v) for v in value)
    if isinstance(value, dict):
        return any(_marked(v) for v in value.values())
    return False


def _mark(value: Any) -> None:
    if isinstance(value, torch.Tensor):
        try:
            setattr(value, _MARK, True)
        except (AttributeError, RuntimeError):
            pass
    elif isinstance(value, (list, tuple)):
        for v in value:
            _mark(v)


class SyncCounter(TorchFunctionMode):
    """``with SyncCounter(model) as c: ...``; ``c.events`` lists (step, op, where) for each host read of a device value.
    ``c.step`` is set by the caller (e.g. from the training loop's events); ``c.paused()`` stops counting (evaluation)."""

    def __init__(self, *modules: torch.nn.Module) -> None:
        super().__init__()
        self.events: list[tuple[int, str, str]] = []
        self.step = 0
        self._paused = 0
        for module in modules:
            for t in list(module.parameters()) + list(module.buffers()):
                _mark(t)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _count(self, name: str) -> None:
        if self._paused:
            return
        stack = traceback.extract_stack()[:-1]  # less this frame
        frames = [f for f in stack[:-1] if "siftcli" in f.filename and "/tests/" not in f.filename]
        where = f"{frames[-1].filename.split('siftcli/')[-1]}:{frames[-1].lineno}" if frames else "?"
        # the innermost frame outside torch: a read inside a library siftcli calls (transformers' own checks, which a
        # plain loop pays too) is told apart from siftcli's own
        inner = next((f for f in reversed(stack) if "/torch/" not in f.filename and f.filename != __file__), None)
        if inner is not None and "/siftcli/" not in inner.filename.replace("\\", "/"):
            where = f"outside {inner.filename.rsplit('/', 2)[-2]}/{inner.filename.rsplit('/', 1)[-1]}:{inner.lineno} (via {where})"
        self.events.append((self.step, name, where))

    def own(self) -> list[tuple[int, str, str]]:
        """The reads siftcli's own code made (not those inside the libraries it calls)."""
        return [e for e in self.events if not e[2].startswith("outside ")]

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        src = args[0] if args else None
        if name in _READS and _marked(src):
            self._count(name)
        elif name == "to" and _marked(src) and _to_host(args, kwargs) and not kwargs.get("non_blocking", False):
            self._count("to(cpu)")
        elif name == "__getitem__" and len(args) > 1 and _marked(args[1]) and _is_bool(args[1]):
            self._count("mask index")
        elif name == "copy_" and len(args) > 1 and _marked(args[1]) and not _marked(src):
            if not (kwargs.get("non_blocking") or (len(args) > 2 and args[2])):
                self._count("copy_ to host")
            return func(*args, **kwargs)  # into a host buffer: it stays a host tensor
        out = func(*args, **kwargs)
        if name not in _READS and name not in ("copy_", "to", "cpu") and (_marked(args) or _marked(kwargs)):
            _mark(out)
        elif name == "to" and _marked(src) and not _to_host(args, kwargs):
            _mark(out)
        return out


def _to_host(args: tuple, kwargs: dict) -> bool:
    """Whether a ``Tensor.to`` call names the host: the string ``"cpu"``. On a machine without a GPU the run's device is
    the CPU too, so a ``to(device)`` with a ``torch.device`` (torch's own ``clip_grad_norm_`` moves its factor to each
    gradient's device so) is a move between devices here, not a read; ``.cpu()`` always is one."""
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, str) and torch.device(target).type == "cpu"


def _is_bool(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.bool


def on_device(batch: Any) -> Any:
    """``batch`` as if a loader had put it on the GPU (accelerate's, under the Hugging Face ``Trainer``): its tensors
    marked, so a host read of a batch value, which would wait for the device there, counts."""
    if isinstance(batch, dict):
        for value in batch.values():
            _mark(value)
    else:
        _mark(batch)
    return batch
