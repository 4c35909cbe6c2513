"""Print the sync counter's GPU-mode counts per path (the closing numbers of the GPU-path work): steady-state steps,
host reads of device values, pageable host-to-device copies, stalls, bounded waits, the most loss-copy waits in a
step, and waits at an epoch's edge. ``python tests/print_gpu_counts.py [--unpinned]`` (``--unpinned``: the pin of
packed batches removed, as before it was added)."""

from __future__ import annotations

import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from siftcli.sift import batching  # noqa: E402
from tests.conftest import make_text_rows, tiny_recipe_dict  # noqa: E402
from tests.test_syncs import CASES, count_syncs, gpu_counts, steady  # noqa: E402

if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    if "--unpinned" in sys.argv:
        batching.pinned = lambda batch: batch
    csv = Path(tempfile.mkdtemp()) / "text.csv"
    csv.write_text("\n".join(["text,label"] + [f"{t},{y}" for t, y in make_text_rows(160)]) + "\n")
    for case in ("baseline", "memory", "fresh-probabilistic"):
        _, steps, counter = count_syncs(steady(tiny_recipe_dict(csv, epochs=3, **CASES[case])), as_gpu=True)
        print(case, "steps", steps, gpu_counts(counter, steps))
