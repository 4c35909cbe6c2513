"""One recipe on N processes (``torchrun``): the process group, who writes, and agreeing on everything.

Launched by ``torchrun`` (or ``accelerate launch``, or anything that sets ``WORLD_SIZE``, ``RANK``,
``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``), siftcli joins the process group those variables
describe: gloo on CPU, nccl on CUDA, one GPU per process (``LOCAL_RANK``). Without them nothing here
does anything and a run is one process, as always.

The rules that keep N processes from ever waiting on each other forever:

- Every decision that ends a loop, skips a step or starts a collective is made the same on every rank:
  taken from values all ranks share (counts, steps), or agreed here (:func:`any_true`, :func:`broadcast`).
  Wall-clock, signals and non-finite losses are local until agreed.
- Rank 0 alone writes (run folder, logs, checkpoints, plots, models): :mod:`siftcli.runio` checks
  :func:`is_main`; what rank 0 decided about files (the run folder's name, an error) is broadcast.
- A collective that still waits (a rank died outside torchrun's watch) fails after
  ``SIFTCLI_DIST_TIMEOUT`` seconds (default 600) instead of hanging.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from siftcli.errors import SiftcliError, first_line
from siftcli.sift import distributed

T = TypeVar("T")
TIMEOUT_ENV = "SIFTCLI_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 600
WAIT_NOTICE_S = 10.0  # joining takes longer than this: say what this rank waits for (through ``on_wait``)
#: Called with one line when a rank has waited ``WAIT_NOTICE_S`` for its peers; the CLI sets it (only the CLI prints).
on_wait: Callable[[str], None] | None = None


def check_launch() -> None:
    """Refuse launch variables that cannot describe a process group (one line, before anything loads): whole numbers,
    a rank below the world size, a finite positive timeout. ``WORLD_SIZE=abc`` must not quietly mean one process."""
    import math

    values = {}
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_PORT"):
        text = os.environ.get(name)
        if text is None:
            continue
        try:
            values[name] = int(text.strip())
        except ValueError:
            raise SiftcliError(f"{name}={text!r}: expected a whole number (set by torchrun; see docs/scale-out.md)", own=True) from None
        if values[name] < (1 if name == "WORLD_SIZE" else 0):
            raise SiftcliError(f"{name}={text!r}: expected a whole number of at least {1 if name == 'WORLD_SIZE' else 0}", own=True)
    world_size = values.get("WORLD_SIZE", 1)
    for name in ("RANK", "LOCAL_RANK"):
        if name in values and values[name] >= world_size:
            raise SiftcliError(f"{name}={values[name]} with WORLD_SIZE={world_size}: a rank runs from 0 to WORLD_SIZE - 1", own=True)
    text = os.environ.get(TIMEOUT_ENV)
    if text is not None:
        try:
            timeout = float(text)
        except ValueError:
            timeout = math.nan
        if not (math.isfinite(timeout) and timeout > 0):
            raise SiftcliError(f"{TIMEOUT_ENV}={text!r}: expected a finite number of seconds above 0, such as 600", own=True)


def launched() -> bool:
    """Whether a launcher asked for more than one process (``WORLD_SIZE`` > 1)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def active() -> bool:
    """Whether this process is one of several in an initialised process group (never imports torch: without
    it no group can exist, and a one-line error on bad input should not wait for torch to load)."""
    return "torch.distributed" in sys.modules and world() > 1


def rank() -> int:
    return distributed.rank()


def world() -> int:
    return distributed.world_size()


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0")) if active() or launched() else 0


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes and prints."""
    if active():
        return rank() == 0
    return os.environ.get("RANK", "0") == "0" if launched() else True


def init(device_type: str) -> bool:
    """Join the launcher's process group (nccl for ``cuda``, else gloo); False when not launched on several.

    Idempotent: a second call (``compare`` runs several arms) or a group the caller made is kept.
    """
    import datetime

    import torch
    import torch.distributed as dist

    check_launch()
    if not launched() or (dist.is_available() and dist.is_initialized()):
        return active()
    if not dist.is_available():
        raise SiftcliError("WORLD_SIZE > 1 but this torch build has no torch.distributed; run one process")
    missing = [v for v in ("RANK", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        raise SiftcliError(f"WORLD_SIZE is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: launch "
                           "with torchrun (see docs/scale-out.md)")
    timeout = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    if device_type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    import threading

    notice = threading.Timer(WAIT_NOTICE_S, lambda: on_wait and on_wait(
        f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}: waiting for the other ranks at "
        f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} (gives up after {timeout:g} s, {TIMEOUT_ENV})"))
    notice.daemon = True
    notice.start()
    try:
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo", timeout=datetime.timedelta(seconds=timeout))
    except Exception as exc:  # DistStoreError, RuntimeError: the peers never came, or the address is wrong
        first = first_line(exc, 160)
        raise SiftcliError(f"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}: the process group at "
                           f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} did not form within {timeout:g} s "
                           f"({TIMEOUT_ENV}) ({first}); start every rank, or check the address", own=True) from None
    finally:
        notice.cancel()
    return True


def any_true(*flags: bool) -> list[bool]:
    """Each flag, true on every rank if it is true on any (one all-reduce for all of them)."""
    return distributed.any_true(*flags)


def broadcast(obj: T) -> T:
    """Rank 0's ``obj`` on every rank."""
    if not active():
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(obj: T) -> list[T]:
    """Every rank's ``obj``, in rank order, on every rank."""
    if not active():
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def on_main(fn: Callable[[], T]) -> T:
    """Run ``fn`` on rank 0 alone and hand its result (or its one-line error) to every rank.

    For what touches files: the run folder's name, a folder check. Every rank raises the same error,
    so none is left waiting; only rank 0 prints it.
    """
    if not active():
        return fn()

    result: tuple[str, Any] = ("ok", None)
    if is_main():
        try:
            result = ("ok", fn())
        except SiftcliError as exc:
            result = ("error", str(exc))
    kind, value = broadcast(result)
    if kind == "error":
        raise SiftcliError(value, main_only=True)
    return value


def barrier() -> None:
    if active():
        import torch.distributed as dist

        dist.barrier()


def shutdown() -> None:
    """Leave the process group (end of a command), so the launcher sees a clean exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
