"""Print each rank's collective counts and whether the ranks ended with equal weights, per case of the GPU decision
order's torchrun test (2 processes, gloo): ``python tests/print_collectives.py``."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tests.test_distributed as td  # noqa: E402

if __name__ == "__main__":  # spawned workers import this module again: the run only in the parent
    ranks = td._run(Path(tempfile.mkdtemp()), worker=td._order_worker)
    for key in sorted(ranks[0]):
        r0, r1 = ranks[0][key], ranks[1][key]
        print(key, "rank 0", r0.get("collectives"), "rank 1", r1.get("collectives"),
              "same weights", r0.get("weights") == r1.get("weights"))
