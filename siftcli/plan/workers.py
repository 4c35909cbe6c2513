"""A plan folder in, more processes taking its jobs out: the helpers one machine runs beside the planning process
(``--workers``), each on its share of the cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

from siftcli.errors import RunInterrupted
from siftcli.plan.phases import Plan
from siftcli.plan.record import load_record
from siftcli.plan.settings import eval_rows
from siftcli.plan.study import PlanStudy
from siftcli.plan.trials import Trials
from siftcli.recipe.reader import load_recipe
from siftcli.runio import read_json
from siftcli.tasks import metric
from siftcli.workload.build import build_workload


def threads(workers: int) -> None:
    """Each of ``workers`` processes on this machine trains on its share of the cores, the baseline included, so that
    time ratios compare runs under the same conditions."""
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


def spawn(folder: Path, index: int) -> subprocess.Popen:
    """One more process taking jobs from the plan's study (``python -m siftcli.plan.workers FOLDER``), started the study
    layer's way; its output goes to ``workers/worker-N.log``."""
    from siftcli.studies import spawn

    return spawn(["-m", "siftcli.plan.workers", str(folder)], folder / "workers" / f"worker-{index}.log",
                 env={"SIFTCLI_PLAN_WORKER": str(index)})


def join(helpers: list[subprocess.Popen], stop: bool = False) -> None:
    """Wait for the helpers to end (they stop when the confirmation's jobs are done); ``stop``: SIGTERM first (a
    training one saves, gives its job back to the study and exits)."""
    for p in helpers:
        if stop and p.poll() is None:
            p.terminate()
    for p in helpers:
        try:
            p.wait(timeout=None if not stop else 60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def worker_main(folder: Path) -> int:
    """A helper process: the plan's recipe and study from its folder, then jobs until the confirmation's are done. It
    writes no record (the process that started it does)."""
    from siftcli.studies import die_with_parent

    die_with_parent()
    record = load_record(read_json(folder / "plan.json"))
    recipe = load_recipe(folder / "recipe.yaml")
    threads(record.workers)
    first = build_workload(recipe)
    ps = PlanStudy(record.storage, folder, record.study, metric(record.metric).higher_is_better)
    plan = Plan(recipe, folder, ps, Trials(recipe, eval_rows(len(first.eval_data)), {recipe.seed: first}), record,
                metric(record.metric), lambda kind, data: None)
    stop_beat = ps.heartbeat()
    try:
        plan.work()
    except RunInterrupted as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    finally:
        stop_beat()
    return 0


if __name__ == "__main__":
    raise SystemExit(worker_main(Path(sys.argv[1])))
