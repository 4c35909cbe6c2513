"""Warm sweep workers: a trial's numbers do not depend on what its worker ran before, and match a fresh process."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from siftcli.sweep import workers
from siftcli.sweep.run import run_sweep
from siftcli.sweep.settings import SweepSettings
from siftcli.sweep.space import parse_space
from siftcli.workload.build import workload_key
from tests.test_sweep import _regression

pytest.importorskip("optuna")


def _numbers(folder: Path, number: int) -> list:
    trial = json.loads((folder / f"trial-{number}" / "trial.json").read_text())
    return [trial["final"], [(p["step"], p["raw_samples"], p["mse"]) for p in trial["curve"]], trial["kept"]]


@pytest.mark.slow
def test_a_trial_run_twice_in_one_warm_worker_matches_a_fresh_process(tmp_path: Path) -> None:
    """Trials 0 and 2 have the same parameters; between them the worker trains another beta. Warm, both give the
    numbers a fresh process gives for trial 0 (weights, data order, keep draws and dropout all restart)."""
    recipe = _regression(tmp_path, epochs=1, **{"model.config_overrides.hidden_dropout_prob": 0.3})
    space, _ = parse_space(recipe, betas=None, beta_range="0.5:4", params=None)
    replay = [{"beta": 1.0}, {"beta": 4.0}, {"beta": 1.0}]
    common = {"space": space, "prune": False, "frontier": [1.0]}
    warm, warm_result = run_sweep(recipe, SweepSettings(trials=3, enqueue=replay, **common), output=str(tmp_path / "warm"),
                                  jobs=1)
    # the fresh processes need not run trial 2 again: a fresh process's numbers for trial 0 are those numbers
    fresh, fresh_result = run_sweep(recipe, SweepSettings(trials=2, enqueue=replay[:2], fresh_processes=True, **common),
                                    output=str(tmp_path / "fresh"), jobs=1)
    assert len(list((warm / "workers").glob("*.log"))) == 1  # one worker ran all three
    assert len(list((fresh / "workers").glob("*.log"))) == 2  # a process per trial
    assert _numbers(warm, 0) == _numbers(warm, 2) == _numbers(fresh, 0)
    assert _numbers(warm, 1) == _numbers(fresh, 1) != _numbers(warm, 0)  # another beta: other numbers
    for result in (warm_result, fresh_result):
        assert all(t["startup_seconds"] is not None and t["startup_seconds"] >= 0 for t in result["trials"])
        assert result["startup_seconds"]["median"] is not None


def test_the_workload_is_reused_across_sift_settings_and_rebuilt_when_the_data_changes(tmp_path: Path) -> None:
    recipe = _regression(tmp_path, epochs=1)
    other_beta = recipe.model_copy(update={"sift": recipe.sift.model_copy(update={"beta": 3.0})})
    cache = workers.WorkloadCache(limit=1)
    first, initial = cache.get(recipe)
    assert cache.get(other_beta)[0] is first and workload_key(other_beta) == workload_key(recipe)
    holdout = recipe.model_copy(update={"sift": recipe.sift.model_copy(update={
        "reference": recipe.sift.reference.model_copy(update={"kind": "holdout", "holdout_fraction": 0.2})})})
    assert workload_key(holdout) != workload_key(recipe)
    second, _ = cache.get(holdout)
    assert second is not first and len(second.train_data) < len(first.train_data)
    assert cache.get(recipe)[0] is not first  # limit 1: the first was dropped, and is built again


def test_a_worker_answers_each_trial_on_its_own_line_and_stops_after_a_failure(tmp_path: Path) -> None:
    """Not a sweep folder: the trial fails with the reason in its answer, and the worker ends (code 2) instead of
    reading on."""
    out = io.StringIO()
    code = workers.serve(tmp_path, iter(['{"number": 0, "sent": 0}\n', '{"number": 1, "sent": 0}\n']), out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert code == 2 and len(replies) == 1 and replies[0]["number"] == 0 and replies[0]["code"] == 2
    assert "sweep_settings.json" in replies[0]["error"] and (tmp_path / "trial-0" / "stderr.txt").exists()
