"""A saved loader state in, a checked one of this version out: what of a :class:`~siftcli.sift.loader.SiftingDataLoader`'s
state is the loader's own (its layout's version, the sifting config, batch size and rank it was saved with); each part's
own state is that part's (``state_dict``/``load_state_dict`` on the part). Tensors and plain containers only, so a
saved state loads with ``torch.load(weights_only=True)``.

Version 1 (siftcli 0.1 before the loader's parts owned their state) kept the epoch position, the waiting batch and the
outbox at the top level; :func:`upgrade` moves them into their parts' places, so checkpoints written then still resume.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from siftcli.sift.arguments import check_state
from siftcli.sift.distributed import rank, world_size
from siftcli.sift.stateful import StateDict

#: The layout of :meth:`SiftingDataLoader.state_dict` (1: before the parts owned their state; read by :func:`upgrade`).
STATE_VERSION = 2


def header(config: StateDict, batch_size: int, shape: StateDict) -> StateDict:
    """The loader's own part of its saved state (``shape``: the wrapped loader's rows and kind)."""
    return {"version": STATE_VERSION, "config": config, "batch_size": batch_size, "rank": rank(), "world": world_size(),
            "wrapped": shape}


def upgrade(state: Any) -> Any:
    """A state of an older layout in this version's layout (a newer one is refused, naming both versions)."""
    if not isinstance(state, Mapping):
        return state
    version = state.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= STATE_VERSION:
        raise ValueError(f"this loader state has layout version {version!r}; this siftcli reads versions 1 to {STATE_VERSION}: "
                         "resume with the siftcli that saved it, or start the run afresh")
    if version == STATE_VERSION:
        return state
    old = dict(state)
    feedback = old.pop("feedback", None)
    return {**{k: v for k, v in old.items() if k not in ("epoch", "raw_in_epoch", "wrapped_epoch_start", "inflight",
                                                         "waiting", "packer", "meta_packer", "pending")},
            "version": STATE_VERSION,
            "cursor": {"epoch": old.get("epoch"), "offered": old.get("raw_in_epoch"),
                       "wrapped_epoch_start": old.get("wrapped_epoch_start")},
            "sampler": old.get("inflight"),
            "inflight": {"waiting": old.get("waiting")},
            "outbox": {"packer": old.get("packer"), "meta_packer": old.get("meta_packer"), "pending": old.get("pending")},
            "feedback": [] if not feedback else [{"key": (feedback["meta"], int(feedback["epoch"])), "value": feedback["losses"]}]}


def check(state: Any, config: StateDict, batch_size: int, shape: StateDict | None = None) -> StateDict:
    """``state`` upgraded and checked: a malformed one is named (:func:`check_state`), never met half-way as a
    ``KeyError``; one saved by another rank, or under another sifting config, is refused naming the difference."""
    state = upgrade(state)
    check_state(state, batch_size)
    saved_rank, saved_world = state.get("rank"), state.get("world")
    if saved_rank is not None and (_whole(saved_rank), _whole(saved_world)) != (rank(), world_size()):
        raise ValueError(f"this loader state was saved by rank {saved_rank} of {saved_world} processes; this is rank "
                         f"{rank()} of {world_size()}: every rank saves and loads its own (sifted.state_dict() on each rank, "
                         "to a file named by its rank, such as f'sifting_rank{rank}.pt')")
    for key, value in state["config"].items():
        if key in config and config[key] != value:
            raise ValueError(f"the saved loader state has sift {key}={value!r}, this loader {key}={config[key]!r}")
    wrapped = state.get("wrapped")
    if shape is not None and isinstance(wrapped, Mapping):
        if wrapped.get("rows") != shape["rows"] and None not in (wrapped.get("rows"), shape["rows"]):
            raise ValueError(f"the saved loader state wraps a dataset of {wrapped.get('rows')} rows, this loader one of "
                             f"{shape['rows']}: its memory and position are by row; load it into a loader over the same data")
        if bool(wrapped.get("stateful")) != shape["stateful"]:
            kinds = ("a StatefulDataLoader", "a plain DataLoader")
            saved_kind, this_kind = (kinds if wrapped.get("stateful") else kinds[::-1])
            raise ValueError(f"the saved loader state wraps {saved_kind}, this loader {this_kind}: each saves its order "
                             "its own way; wrap the kind the state was saved with")
    return state


def _whole(value: Any) -> Any:
    """A rank or world size as saved (a number, or its text from an edited state)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value
