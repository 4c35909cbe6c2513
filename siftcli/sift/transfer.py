"""Device values on the host without making the host wait: a copy started now, read later.

On a CUDA device every host read of a device value (``.item()``, ``.cpu()``, ``bool(t)``) waits for the GPU to finish
everything queued before it, so the host cannot queue the next step while the GPU works and the two times add up.
:class:`Copy` starts a non-blocking copy into pinned host memory and records an event; :meth:`Copy.sync` waits on that
event only, and only when the value is needed, by which time (one step later, as NVIDIA's BERT trainer reads its
statistics) the GPU has long finished it and has the next step queued. On a CPU the copy is immediate.
:class:`Span` times GPU work the same way: two events, read when the later one is known to have finished.

:class:`Later` is the one holder of "copied now, read later": values on their way, each with what it belongs to, handed
to their owner's ``store`` in order by :meth:`Later.settle`. The feedback of training losses, the teacher cache and the
run's clock keep their arriving values in one.

Two verbs, one meaning each: ``sync`` waits for the device (a copy's event, a span's end); ``settle`` stores what
arrived where it belongs.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar

import torch

from siftcli.sift.stateful import StateDict

Key = TypeVar("Key")

#: Device types whose host-to-device copies go through pinned (page-locked) host memory: from pageable memory a
#: non-blocking copy to a GPU is made synchronous by the driver. One place says which; ``tests/syncs.py`` adds ``cpu``
#: to count, on a machine without a GPU, the copies a GPU run would make.
PINNED_DEVICES: tuple[str, ...] = ("cuda",)


def pins(device: torch.device) -> bool:
    """Whether host tensors bound for ``device`` are pinned first (see :data:`PINNED_DEVICES`)."""
    return device.type in PINNED_DEVICES


class Arriving(Protocol):
    """A value on its way from the device: ``ready`` never waits, ``sync`` waits for it alone."""

    @property
    def ready(self) -> bool: ...

    def sync(self) -> Any: ...


class Copy:
    """A copy of ``tensor`` (detached) on the host, started without blocking; :meth:`sync` returns it, waiting for
    the copy alone if it is still under way."""

    __slots__ = ("host", "event")

    def __init__(self, tensor: torch.Tensor) -> None:
        tensor = tensor.detach()
        cuda = tensor.device.type == "cuda"
        self.host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=cuda)
        self.host.copy_(tensor, non_blocking=True)
        self.event: torch.cuda.Event | None = None
        if cuda:
            self.event = torch.cuda.Event()
            self.event.record()

    @property
    def ready(self) -> bool:
        """Whether the copy has finished (never waits)."""
        return self.event is None or self.event.query()

    def sync(self) -> torch.Tensor:
        if self.event is not None:
            self.event.synchronize()
            self.event = None
        return self.host


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on ``device`` without making the host wait: through pinned memory, copied without blocking (the
    caching host allocator keeps the pinned block until the copy has run). On the host itself, the tensor."""
    if not pins(device) or tensor.device.type != "cpu":
        return tensor.to(device)
    return (tensor if tensor.is_pinned() else tensor.pin_memory()).to(device, non_blocking=True)


class Span:
    """Seconds between :meth:`start` and :meth:`stop` of work queued on ``device``: CUDA events there (read without
    waiting, once the stop event has passed), the host clock elsewhere (where work runs as it is queued)."""

    __slots__ = ("cuda", "begin", "end", "_seconds")

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.begin: torch.cuda.Event | float | None = None
        self.end: torch.cuda.Event | float | None = None
        self._seconds: float | None = None

    @classmethod
    def known(cls, seconds: float) -> Span:
        """A span already measured (a saved state's): ``sync`` returns ``seconds``."""
        span = cls(torch.device("cpu"))
        span._seconds = float(seconds)
        return span

    def _mark(self) -> torch.cuda.Event | float:
        """Now, on the device's timeline: a recorded CUDA event, or the host clock."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self) -> Span:
        self.begin = self._mark()
        return self

    def stop(self) -> Span:
        self.end = self._mark()
        return self

    @property
    def ready(self) -> bool:
        return self._seconds is not None or not self.cuda or self.end is None or self.end.query()

    def sync(self) -> float:
        """The span's seconds; on CUDA this waits for its stop event (call it when that is known to have passed)."""
        if self._seconds is None:
            if self.cuda:
                self.end.synchronize()
                self._seconds = self.begin.elapsed_time(self.end) / 1000.0
            else:
                self._seconds = float(self.end) - float(self.begin)
        return self._seconds


class Later(Generic[Key]):
    """Values copied from the device now and stored later, in order: each ``(key, value)`` goes to ``store(key,
    host_value)`` at :meth:`settle`. A tensor is copied to the host without blocking (:class:`Copy`); anything else that
    arrives (a :class:`Span`) is held as it is.

    Its :meth:`state_dict` holds the values themselves (copied now: a checkpoint may wait), so a resumed run stores them
    where the uninterrupted one does.
    """

    def __init__(self, store: Callable[[Key, Any], None]) -> None:
        self.store = store
        self.items: deque[tuple[Key, Arriving]] = deque()

    def put(self, key: Key, value: torch.Tensor | Arriving) -> None:
        self.items.append((key, Copy(value) if isinstance(value, torch.Tensor) else value))

    def keys(self) -> Iterator[Key]:
        return (key for key, _ in self.items)

    def settle(self, wait: bool = True) -> None:
        """Store what has arrived: everything (``wait``: syncing each value still under way), or only the values at the
        front that need no wait."""
        while self.items and (wait or self.items[0][1].ready):
            key, value = self.items.popleft()
            self.store(key, value.sync())

    def state_dict(self) -> list[StateDict]:
        return [{"key": key, "value": value.sync()} for key, value in self.items]

    def load_state_dict(self, state: list[StateDict] | None) -> None:
        self.items = deque((item["key"], Copy(item["value"]) if isinstance(item["value"], torch.Tensor)
                            else Span.known(item["value"])) for item in state or [])
