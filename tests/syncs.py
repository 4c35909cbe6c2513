"""Counting host-device synchronisations on a machine without a GPU.

On a CUDA device a host read of a device value (``.item()``, ``bool(t)``, ``.tolist()``, ``.cpu()``, a boolean-mask
index, ``nonzero``) makes the host wait for the GPU to finish everything queued before it, so host time and GPU time add
up instead of overlapping. On a CPU nothing waits, but the same reads happen: :class:`SyncCounter` finds them. It marks
the model's parameters and buffers as "on the device", lets that mark flow to every tensor computed from a marked one
(a ``TorchFunctionMode`` sees every tensor operation), and counts each host read of a marked tensor, with where it
happened. A copy into an unmarked (host) tensor with ``non_blocking=True`` is the legitimate way out (a pinned buffer
read later), so its result stays unmarked.

``SyncCounter(..., as_gpu=True)`` goes further and runs the CPU as a GPU would be used (the run's device pins host
memory, :data:`siftcli.sift.transfer.PINNED_DEVICES`), counting two more things a CPU cannot show:

- **host-to-device copies** (``to(device)`` or ``copy_`` of a host tensor onto the device): a blocking one is a stream
  synchronisation (counted with the host reads), a non-blocking one from pageable memory is made synchronous by the
  driver (:attr:`SyncCounter.pageable`). ``pin_memory()`` tags a copy as pinned; a tagged tensor's copy is free.
- **event waits** (:attr:`SyncCounter.waits`): :class:`~siftcli.sift.transfer.Copy` and ``Span`` record an event on the
  device's one stream, in order. A ``sync`` waits unless the event is known to have passed: a later event was waited
  for (the stream runs in order), or it was recorded two steps ago (the device trails the host by at most a step).
  A wait with nothing queued after it (no later event, no device op) leaves the device idle: a ``stall``; otherwise it
  is ``bounded`` (the host waits while the device still has work, as NVIDIA's BERT trainer reads its statistics a step
  late). Waits where an epoch's raw batches run out or a new one starts (the last raw batch decided, the last step's
  losses stored: once an epoch, with little or nothing queued) are marked ``at an epoch's edge``.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_MARK = "_sync_count_on_device"
_PINNED = "_sync_count_pinned"
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

    def __init__(self, *modules: torch.nn.Module, as_gpu: bool = False) -> None:
        super().__init__()
        self.events: list[tuple[int, str, str]] = []
        self.pageable: list[tuple[int, str, str]] = []  # as_gpu: non-blocking host-to-device copies from pageable memory
        self.waits: list[tuple[int, str, str]] = []  # as_gpu: (step, "bounded" or "stall", where) per event waited for
        self.step = 0
        self.epoch_ends: list[int] = []  # the last step of each epoch, where the caller records them
        self.as_gpu = as_gpu
        self._paused = 0
        self._stream = _Stream(self)
        for module in modules:
            for t in list(module.parameters()) + list(module.buffers()):
                _mark(t)

    def __enter__(self) -> SyncCounter:
        if self.as_gpu:
            self._stream.install()
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self.as_gpu:
            self._stream.remove()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _count(self, name: str, into: list[tuple[int, str, str]] | None = None) -> None:
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
        (self.events if into is None else into).append((self.step, name, where))

    def own(self, events: list[tuple[int, str, str]] | None = None) -> list[tuple[int, str, str]]:
        """The reads (or ``events``) siftcli's own code made, not those inside the libraries it calls."""
        return [e for e in (self.events if events is None else events) if not e[2].startswith("outside ")]

    def _to_device(self, func: Any, args: tuple, kwargs: dict, name: str) -> Any:
        """as_gpu: a host tensor's copy onto the device (``to(device)``, or ``copy_`` into a device tensor)."""
        src = args[0] if name == "to" else args[1]
        blocking = not (kwargs.get("non_blocking") or (len(args) > 2 and args[2] is True))
        if blocking:
            self._count(f"{name} to device (blocking)")
        elif not getattr(src, _PINNED, False):
            self._count(f"{name} to device from pageable memory", self.pageable)
        out = func(*args, **kwargs)
        if name == "to" and out is src:  # the same tensor on a CPU: a device copy is a new tensor on a GPU
            out = out.clone()
        _mark(out)
        return out

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        src = args[0] if args else None
        if self.as_gpu:
            if name == "pin_memory":
                out = src.clone()
                setattr(out, _PINNED, True)
                return out
            if name == "is_pinned":
                return bool(getattr(src, _PINNED, False))
            if name == "to" and isinstance(src, torch.Tensor) and not _marked(src) and _device_target(args, kwargs):
                return self._to_device(func, args, kwargs, name)
            if name == "copy_" and len(args) > 1 and _marked(src) and isinstance(args[1], torch.Tensor) and not _marked(args[1]):
                return self._to_device(func, args, kwargs, name)
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
            self._stream.launched_at = self._stream.recorded  # an op queued on the device
        elif name == "to" and _marked(src) and not _to_host(args, kwargs):
            _mark(out)
        return out


def _to_host(args: tuple, kwargs: dict) -> bool:
    """Whether a ``Tensor.to`` call names the host: the string ``"cpu"``. On a machine without a GPU the run's device is
    the CPU too, so a ``to(device)`` with a ``torch.device`` (torch's own ``clip_grad_norm_`` moves its factor to each
    gradient's device so) is a move between devices here, not a read; ``.cpu()`` always is one."""
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, str) and torch.device(target).type == "cpu"


def _device_target(args: tuple, kwargs: dict) -> bool:
    """Whether a ``Tensor.to`` call names a device as a ``torch.device`` (the run's device; the string ``"cpu"`` is the
    host, see :func:`_to_host`)."""
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, torch.device)


class _Stream:
    """as_gpu: the device's one stream, as :mod:`siftcli.sift.transfer`'s copies and spans record events on it (see the
    module's docstring). ``install`` wraps ``Copy`` and ``Span``; ``remove`` restores them."""

    def __init__(self, counter: SyncCounter) -> None:
        self.counter = counter
        self.recorded = 0  # events recorded so far (the last one's number)
        self.passed = 0  # every event up to this number has passed
        self.launched_at = 0  # the number of events recorded when the last device op was queued
        self.events: dict[int, tuple[Any, int, int, str]] = {}  # id(holder) -> (holder, number, step, where recorded)
        self.saved: dict[tuple[type, str], Any] = {}

    def record(self, holder: Any) -> None:
        self.recorded += 1
        frames = [f for f in traceback.extract_stack()[:-2] if "/siftcli/" in f.filename and "/tests/" not in f.filename
                  and not f.filename.endswith("transfer.py")]
        where = f"{frames[-1].filename.split('siftcli/')[-1]}:{frames[-1].lineno}" if frames else "?"
        self.events[id(holder)] = (holder, self.recorded, self.counter.step, where)

    def ready(self, holder: Any) -> bool:
        _, number, step, _ = self.events.get(id(holder), (None, 0, 0, ""))
        if number <= self.passed:
            return True
        if step <= self.counter.step - 2:  # the device is at most a step behind the host
            self.passed = max(self.passed, number)
            return True
        return False

    def wait(self, holder: Any) -> None:
        if id(holder) not in self.events:
            return
        if not self.ready(holder):
            _, number, _, where = self.events[id(holder)]
            kind = "stall" if number == self.recorded and self.launched_at < number else "bounded"  # nothing after it?
            if {"end_pass", "_start_epoch"} & {f.name for f in traceback.extract_stack()}:
                kind += " at an epoch's edge"
            if not self.counter._paused:  # where the event was recorded names what was waited for
                self.counter.waits.append((self.counter.step, kind, where))
            self.passed = max(self.passed, number)
        del self.events[id(holder)]

    def install(self) -> None:
        from siftcli.sift import transfer

        stream = self
        self.saved = {(cls, name): getattr(cls, name) for cls, name in [(transfer.Copy, "__init__"), (transfer.Copy, "sync"),
                      (transfer.Copy, "ready"), (transfer.Span, "stop"), (transfer.Span, "sync"), (transfer.Span, "ready")]}
        self.saved[(transfer, "PINNED_DEVICES")] = transfer.PINNED_DEVICES
        transfer.PINNED_DEVICES = (*transfer.PINNED_DEVICES, "cpu")
        copy_init, copy_sync, copy_ready = (self.saved[(transfer.Copy, n)] for n in ("__init__", "sync", "ready"))
        span_stop, span_sync, span_ready = (self.saved[(transfer.Span, n)] for n in ("stop", "sync", "ready"))

        def init(copy: Any, tensor: torch.Tensor) -> None:
            copy_init(copy, tensor)
            if _marked(tensor):  # a copy from the device: an event after it
                stream.record(copy)

        def sync_copy(copy: Any) -> Any:
            stream.wait(copy)
            return copy_sync(copy)

        def stop(span: Any) -> Any:
            out = span_stop(span)
            stream.record(span)
            return out

        def sync_span(span: Any) -> float:
            stream.wait(span)
            return span_sync(span)

        transfer.Copy.__init__, transfer.Copy.sync = init, sync_copy
        transfer.Copy.ready = property(lambda copy: copy_ready.fget(copy) and stream.ready(copy))
        transfer.Span.stop, transfer.Span.sync = stop, sync_span
        transfer.Span.ready = property(lambda span: span_ready.fget(span) and stream.ready(span))

    def remove(self) -> None:
        for (owner, name), value in self.saved.items():
            setattr(owner, name, value)


def pinned(batch: Any) -> Any:
    """``batch`` as ``DataLoader(pin_memory=True)`` hands it on a GPU machine: its tensors tagged pinned (as_gpu)."""
    for value in (batch.values() if isinstance(batch, dict) else [batch]):
        if isinstance(value, torch.Tensor):
            setattr(value, _PINNED, True)
    return batch


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
