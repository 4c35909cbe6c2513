"""A :class:`~siftcli.sift.loader.SiftingDataLoader` in, its state as plain values out (and back): what a checkpoint
holds so that a resumed run continues mid-epoch with the decisions the uninterrupted one would have made. Tensors and
plain containers only, so it loads with ``torch.load(weights_only=True)``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from siftcli.sift.arguments import check_state
from siftcli.sift.distributed import rank, world_size
from siftcli.sift.indices import stateful
from siftcli.sift.prefilter import Arrival
from siftcli.sift.stateful import StateDict
from siftcli.sift.stats import SiftStats


def state_of(loader: Any) -> StateDict:
    """Every part's own state, and where the loader stands in its epoch."""
    return {
        "config": loader.config.to_dict(),
        "batch_size": loader.batch_size,
        "sifter": loader.sifter.state_dict(),
        "epoch": loader.epoch,
        "raw_in_epoch": loader._raw_in_epoch,
        **loader.outbox.state_dict(),  # packer, meta_packer, pending
        "inflight": loader.decisions.state_dict(),
        "memory": loader.memory.state_dict(),
        "kept_sets": loader.kept_sets.state_dict(),
        "stats": loader.stats.to_dict(),
        "scoring_precision": loader.precision,  # what fastest chose: a resumed run must score the same way
        "quota": loader.quota.state_dict(),
        "feedback": loader.feedback.state_dict(),  # training losses recorded, still on their way to the memory
        "waiting": None if loader._waiting is None else loader._waiting.state_dict(),  # fetched, its scores on their way
        "rank": rank(), "world": world_size(),  # each rank's own: its shard's position, its generator
        # a StatefulDataLoader's state as this epoch began (between epochs: as the next begins), so its order comes back
        "wrapped_epoch_start": loader._epoch_start if loader._active or not stateful(loader.dataloader)
        else loader.dataloader.state_dict(),
    }


def restore(loader: Any, state: Any) -> None:
    """:func:`state_of`'s values put back; a malformed state is named (:func:`check_state`), never met half-way as a
    ``KeyError``."""
    check_state(state, loader.batch_size)
    saved_rank, saved_world = state.get("rank"), state.get("world")
    if saved_rank is not None and (saved_rank, saved_world) != (rank(), world_size()):
        raise ValueError(f"this loader state was saved by rank {saved_rank} of {saved_world} processes; this is rank "
                         f"{rank()} of {world_size()}: every rank saves and loads its own (sifted.state_dict() on each rank, "
                         "to a file named by its rank, such as f'sifting_rank{rank}.pt')")
    try:
        _restore(loader, state)
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"state is not a whole SiftingDataLoader.state_dict() ({type(exc).__name__}: {exc})") from None


def _restore(loader: Any, state: Mapping[str, Any]) -> None:
    mine = loader.config.to_dict()
    for key, value in state["config"].items():
        if key in mine and mine[key] != value:
            raise ValueError(f"the saved loader state has sift {key}={value!r}, this loader {key}={mine[key]!r}")
    loader.sifter.load_state_dict(state["sifter"])
    loader.epoch = int(state["epoch"])
    loader._raw_in_epoch = int(state["raw_in_epoch"])
    loader.outbox.load_state_dict(state)
    loader.decisions.load_state_dict(state["inflight"])
    loader.feedback.clear()  # batches handed out before the save are not handed out again, nor recorded
    loader.feedback.load_state_dict(state.get("feedback"))
    loader._waiting = Arrival.from_state(state["waiting"]) if state.get("waiting") else None
    loader._epoch_start = state.get("wrapped_epoch_start")
    if loader._epoch_start is not None and stateful(loader.dataloader):
        loader.dataloader.load_state_dict(loader._epoch_start)
    loader.memory.load_state_dict(state["memory"])
    loader.kept_sets.load_state_dict(state.get("kept_sets", ([], [])))
    if "quota" in state:
        loader.quota.load_state_dict(state["quota"])
    loader._resume_mid_epoch = loader._raw_in_epoch > 0 and not loader.quota.done
    loader._active = loader._raw_in_epoch > 0  # an epoch saved after its promised batches ends at the next pass
    loader.stats = SiftStats.from_dict(state["stats"])
    if state.get("scoring_precision", "fastest") not in ("auto", "fastest"):
        loader.scorer.precision, loader.scorer.candidates = state["scoring_precision"], ()
    loader.scorer.seconds = loader.stats.scoring_seconds
