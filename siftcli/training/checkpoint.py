"""Checkpoints: the loop's state, whole, beside the parts that carry their own ``state_dict`` (model, optimizer,
loader, scaler, the teacher's cache), every rank's own parts collected into one file by rank 0.

A checkpoint holds tensors and plain values only and is loaded with ``torch.load(weights_only=True)``, so a run
folder handed over by someone else can never run code; its SHA-256 is written beside it and checked before loading,
so a corrupted or altered file is refused before anything in it is read.
"""

from __future__ import annotations

import pickle
import random
import stat
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import torch

from siftcli import parallel
from siftcli.errors import SiftcliError, first_line
from siftcli.runio import atomic_write, atomic_write_text
from siftcli.sift.stateful import StateDict


class Stateful(Protocol):
    """A part of a run a checkpoint holds: the model, optimizer, scaler, loader, a teacher's cache and gate."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


#: Parts each rank holds its own of (its shard's loader state); the rest are the same on every rank.
PER_RANK = ("loader", "teacher")  # the teacher's cache holds this rank's shard


def save(run_dir: Path | None, arm: str, state: Any, parts: dict[str, Stateful], started: float) -> None:
    """Rank 0 writes one file holding the shared parts once (a ZeRO optimizer consolidated first) and every
    rank's own: its loop state, loader state and RNG (collected from all ranks; a collective under torchrun)."""
    if run_dir is None:
        return
    t0 = time.perf_counter()
    saved = asdict(state)
    saved["earlier_seconds"] += t0 - started  # what a resumed process adds its own time to
    mine = {"state": saved, "rng": _rng_state(), **{name: parts[name].state_dict() for name in PER_RANK if name in parts}}
    optimizer = parts["optimizer"]
    if parallel.active() and hasattr(optimizer, "consolidate_state_dict"):  # ZeRO: every rank's shard to rank 0
        optimizer.consolidate_state_dict(to=0)
    ranks = parallel.gather(mine)
    if parallel.is_main():
        shared = {name: part.state_dict() for name, part in parts.items() if name not in PER_RANK}
        write_pair(run_dir, {"arm": arm, "world_size": len(ranks), "ranks": ranks, **shared})
    parallel.barrier()  # no rank exits (a launcher would then stop rank 0) before the checkpoint is on disk
    state.phases["checkpoint"] += time.perf_counter() - t0


def write_pair(run_dir: Path, checkpoint: StateDict) -> None:
    """``checkpoint.pt`` and its ``checkpoint.pt.sha256`` as one unit: the new file is written and hashed beside the
    old one, the digest file (atomically) lists the new hash and the previous one, and only then is the new file renamed
    into place. A crash at any point leaves a checkpoint whose hash the digest file lists: the old pair or the new."""
    digest = run_dir / "checkpoint.pt.sha256"
    previous = digest.read_text().split()[:1] if digest.exists() else []

    def write(tmp: Path) -> None:
        torch.save(checkpoint, tmp)
        atomic_write_text(digest, "\n".join([_sha256(tmp), *previous]) + "\n")

    atomic_write(run_dir / "checkpoint.pt", write)


#: A digest file lists two SHA-256 hashes; anything much longer is not one siftcli wrote.
DIGEST_BYTES = 4096


def _regular(run_dir: Path, path: Path) -> None:
    """A checkpoint part is a regular file (a link to ``/dev/zero`` or a pipe would be read forever)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise SiftcliError(f"--resume {run_dir}: {path.name} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(mode):
        raise SiftcliError(f"--resume {run_dir}: {path.name} is not a regular file (a device, pipe or folder, or a link to "
                           "one); nothing was read; start the run again")


def load(run_dir: Path | None, arm: str | None, state: Any, parts: dict[str, Stateful], device: torch.device,
         most_steps: int | None = None) -> None:
    """Restore a run from ``run_dir/checkpoint.pt`` after checking its digest, its shape and that its step lies within
    the run's plan (``most_steps``), so a forged or foreign file is one line and never a run "completed" at its step.
    ``arm`` None: any run's checkpoint (a fork goes on from another run's)."""
    path = run_dir / "checkpoint.pt" if run_dir else None
    if path is None or not path.exists():
        raise SiftcliError(f"--resume {run_dir}: no checkpoint.pt in that folder; nothing to resume")
    digest = path.with_name("checkpoint.pt.sha256")
    if not digest.exists():
        raise SiftcliError(f"--resume {run_dir}: checkpoint.pt has no checkpoint.pt.sha256 beside it (written by an older "
                           "siftcli, or copied without it), so it cannot be checked; start the run again")
    _regular(run_dir, path)
    _regular(run_dir, digest)
    with open(digest, "rb") as f:
        listed = f.read(DIGEST_BYTES + 1).decode("ascii", "replace")
    if len(listed) > DIGEST_BYTES or _sha256(path) not in listed.split():  # the current pair's hash, or the one before (see write_pair)
        raise SiftcliError(f"--resume {run_dir}: checkpoint.pt changed since siftcli wrote it (its SHA-256 differs from "
                           "checkpoint.pt.sha256: corrupted or tampered with); nothing in it was loaded; start the run again")
    try:  # tensors and plain containers only: a checkpoint can never run code
        ck = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError:
        raise SiftcliError(f"--resume {run_dir}: checkpoint.pt holds objects other than tensors and plain values (an older "
                           "siftcli wrote it, or someone else did); siftcli never unpickles those; start the run again") from None
    except Exception as exc:  # truncated, empty or not a checkpoint at all
        raise SiftcliError(f"--resume {run_dir}: checkpoint.pt is unreadable ({exc.__class__.__name__}); start the run again") from None
    if not isinstance(ck, dict) or (arm is not None and ck.get("arm") != arm):
        got = ck.get("arm") if isinstance(ck, dict) else None
        raise SiftcliError(f"--resume {run_dir}: checkpoint is of the {got!r} run, not {arm!r}")
    if "ranks" not in ck and "state" in ck:  # written by one process before checkpoints held every rank's part
        ck["ranks"] = [{"state": ck["state"], "rng": ck["rng"], **{name: ck.get(name) for name in PER_RANK}}]
    if "ranks" not in ck:
        raise SiftcliError(f"--resume {run_dir}: checkpoint.pt was written by an older siftcli; start the run again")
    if len(ck["ranks"]) != parallel.world():
        n = len(ck["ranks"])
        raise SiftcliError(f"--resume {run_dir}: the run was checkpointed by {n} process{'es' if n > 1 else ''} and this "
                           f"is {parallel.world()}; resume with the same number (torchrun --nproc-per-node={n}), since each "
                           "rank's data shard and sifting state depend on it (the saved model loads anywhere)")
    mine = ck["ranks"][parallel.rank()]
    _check_shape(run_dir, mine, state, most_steps)
    _finite_weights(run_dir, ck.get("model"))
    for name, part in parts.items():
        saved = mine.get(name) if name in PER_RANK else ck.get(name)
        if saved:
            try:
                part.load_state_dict(saved)
            except (ValueError, RuntimeError, KeyError) as exc:
                first = first_line(exc)
                raise SiftcliError(f"--resume {run_dir}: the saved {name} does not fit this run ({first})") from None
    for key, value in mine["state"].items():
        setattr(state, key, value)
    try:
        _set_rng_state(mine["rng"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise SiftcliError(f"--resume {run_dir}: the saved random state is not one siftcli wrote ({first_line(exc)}); "
                           "start the run again") from None


def _finite_weights(run_dir: Path, weights: Any) -> None:
    """A checkpoint's weights hold finite numbers: siftcli stops a run whose loss breaks before its weights are saved,
    so NaN or infinity there means the file was altered (with its digest written again) or damaged in a way the digest
    could not see; resumed, it once trained to "training loss became nan at step 22 ...; try a lower optim.lr"."""
    if not isinstance(weights, dict):
        return
    broken = [k for k, v in weights.items() if torch.is_tensor(v) and v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if broken:
        raise SiftcliError(f"--resume {run_dir}: the checkpoint's model weights hold NaN or infinity ({len(broken)} of "
                           f"{len(weights)} tensors, first {broken[0]!r}); siftcli never saves such weights, so the file "
                           "was altered or damaged; start the run again")


def _check_shape(run_dir: Path, mine: Any, state: Any, most_steps: int | None) -> None:
    """This rank's part holds a run state of the loop's fields and kinds, and a step the run can reach."""
    saved = mine.get("state") if isinstance(mine, dict) else None
    if not isinstance(saved, dict) or not isinstance(mine.get("rng"), dict):
        raise SiftcliError(f"--resume {run_dir}: checkpoint.pt holds no run state siftcli wrote (no 'state' and 'rng' for "
                           "this rank); start the run again")
    for key, value in saved.items():
        current = getattr(state, key, _MISSING)
        kind = float if isinstance(current, float) else type(current)
        fits = current is None or value is None or isinstance(value, kind) or (kind is float and isinstance(value, int))
        if current is _MISSING or not fits or isinstance(value, bool) != isinstance(current, bool):
            raise SiftcliError(f"--resume {run_dir}: the saved run state's {key!r} is not one siftcli writes ("
                               f"{type(value).__name__}); start the run again")
    step, epoch = saved.get("step", 0), saved.get("epoch", 0)
    if step < 0 or epoch < 0 or (most_steps is not None and step > most_steps):
        raise SiftcliError(f"--resume {run_dir}: the checkpoint is at step {step}, epoch {epoch}, beyond this run's plan "
                           f"(at most {most_steps} steps); it is not this run's; start the run again")


_MISSING = object()


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _rng_state() -> StateDict:
    import numpy as np

    name, keys, pos, has_gauss, cached = np.random.get_state()  # as plain values: checkpoints load with weights_only
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: StateDict) -> None:
    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
