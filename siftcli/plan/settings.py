"""The options of ``siftcli plan`` in, checked once: :class:`PlanSettings`; and the evaluation rows' split.

The evaluation rows are split once, seeded apart from any training seed: half is the validation split the search ranks
candidates on, half the evaluation split the confirmation reports on, so the rows the final numbers come from never
chose anything. (A recipe's holdout is not used for ranking: the cheap references are built from it, so it would favour
the filters they drive.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from siftcli.arms.context import evaluation_warning
from siftcli.errors import SiftcliError

#: The most paired seeds a confirmation takes (``--seeds``, and a resumed plan's extension).
MAX_SEEDS = 50
#: Seeds the split of the evaluation rows into validation and evaluation halves (apart from every training seed).
SPLIT_SEED = 15_485_863


def split_eval(n: int) -> tuple[list[int], list[int]]:
    """Validation and evaluation halves of ``n`` evaluation rows (seeded, the same for every seed and resume)."""
    if n < 4:
        raise SiftcliError(f"siftcli plan: the evaluation data has {n} rows; it needs at least 4 to set half aside for "
                           "choosing (raise data.eval_fraction or give data.eval_source)")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    return sorted(order[: n // 2]), sorted(order[n // 2:])


def eval_rows(n: int) -> dict[str, list[int]]:
    """The validation and evaluation rows by name (:func:`split_eval`)."""
    val, ev = split_eval(n)
    return {"validation": val, "evaluation": ev}


def decidable(workload: Any) -> None:
    """Evaluation rows a plan can decide on, checked before its folder exists: enough to halve, of more than one class
    (on one, every strategy that predicts it ties, and no budget would decide)."""
    split_eval(len(workload.eval_data))
    coarse = evaluation_warning(workload)
    if coarse is not None and "one class only" in coarse:
        raise SiftcliError(f"siftcli plan: {coarse}")


@dataclass(frozen=True)
class PlanSettings:
    """What a plan may spend and how it decides, with ``siftcli plan``'s defaults: the budget in full baseline runs, the
    tolerance in metric points, the confirmation's paired seeds, the processes on this machine, and a study shared
    with other machines (``storage``/``study``; none: a journal file in the plan's folder)."""

    budget: float = 2.0
    tolerance: float = 1.0
    seeds: int = 5
    workers: int = 1
    storage: str = ""
    study: str | None = None

    def __post_init__(self) -> None:
        """One line for each bad option, when the settings are made (before anything loads), as ``SweepSettings``
        checks its own; the storage is opened by :func:`run_plan`, through the study layer's one check."""
        budget, tolerance, seeds, workers, storage, study = (self.budget, self.tolerance, self.seeds, self.workers,
                                                             self.storage, self.study)
        if not budget == budget or not 1 < budget <= 100:
            raise SiftcliError(f"--budget {budget}: expected a number of full baseline runs above 1 and at most 100")
        if not tolerance == tolerance or not 0 <= tolerance <= 100:
            raise SiftcliError(f"--tolerance {tolerance}: expected metric points from 0 to 100 (how far below the "
                               "baseline a cheaper strategy may end and still be picked)")
        if not 2 <= seeds <= MAX_SEEDS:
            raise SiftcliError(f"--seeds {seeds}: the confirmation needs 2 to {MAX_SEEDS} paired seeds (5 for an accuracy "
                               "claim)")
        if not 1 <= workers <= 64:
            raise SiftcliError(f"--workers {workers}: expected 1 to 64 processes on this machine")
        if study is not None and not study.strip():
            raise SiftcliError("--study: expected a name shared by every machine of the plan")
        if study is not None and not storage:
            raise SiftcliError("--study names a study in a shared --storage; give --storage too (without it the plan's "
                               "study is a journal file in its folder)")
