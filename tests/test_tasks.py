"""The task table: every accepted task and loss combination trains, every other one is refused at validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from siftcli.errors import SiftcliError
from siftcli.recipe.schema import validate_recipe
from siftcli.tasks import METRICS, TASKS
from tests.conftest import tiny_recipe_dict

ALL_LOSSES = ("cross_entropy", "mse", "bce", "causal_lm")


def test_every_task_defines_what_the_modules_ask() -> None:
    for name, task in TASKS.items():
        assert task.name == name and task.losses and task.metric in METRICS
        assert task.auto_class.startswith("AutoModelFor")
        assert task.loss_kind("auto") == task.losses[0]


def test_no_module_but_the_table_names_a_metric() -> None:
    import re

    root = Path(__file__).resolve().parent.parent / "siftcli"
    for path in root.rglob("*.py"):
        if path.name in ("tasks.py", "config.py"):  # the table, and the schema's list of names a recipe may write
            continue
        loss_kinds = {loss for task in TASKS.values() for loss in task.losses}  # "mse" is a loss kind too
        for metric in (m for m in METRICS if m not in loss_kinds):
            assert not re.search(rf"[\"']{metric}[\"']", path.read_text()), f"{path.name} names the metric {metric!r}"


def test_a_metric_added_to_the_table_is_read_by_analysis_and_report(monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    from siftcli import tasks
    from siftcli.analysis.stats import compare_pair
    from siftcli.analysis.verdict import verdict
    from siftcli.report.tables import compare_view

    monkeypatch.setitem(tasks.METRICS, "f1", tasks.Metric("f1", True, scale=100.0, unit=" f1 points"))

    def run(arm: str, value: float) -> dict:
        return {"arm": arm, "metric": "f1", "higher_is_better": True, "final": {"f1": value, "loss": 0.3}, "train_seconds": 10.0,
                "total_seconds": 11.0, "optimizer_steps": 5, "samples_scored": 0, "samples_trained": 10, "raw_samples": 10,
                "phases": {}, "curve": [{"train_seconds": 10.0, "f1": value, "step": 5}]}

    pair = compare_pair({"baseline": run("baseline", 0.50), "sifted": run("sifted", 0.52), "equal-time": run("equal-time", 0.51)})
    assert pair["metric_delta"] == pytest.approx(2.0) and pair["vs"]["equal-time"]["diff"] == pytest.approx(1.0)
    assert "(+1.00 f1 points)" in verdict(pair, {"beta": 1.0})
    console = Console(width=200, record=True)
    console.print(compare_view({"runs": [{a: run(a, v) for a, v in (("baseline", 0.5), ("sifted", 0.52))}], "pairs": [pair],
                                "seeds_summary": None, "verdict": "v."}))
    assert "+2.00 f1 points" in console.export_text()


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("loss", ALL_LOSSES)
def test_a_loss_outside_the_table_is_refused_at_validation(task: str, loss: str, tmp_path: Path) -> None:
    raw = tiny_recipe_dict(tmp_path / "x.csv", task=task, loss=loss)
    if loss in TASKS[task].losses:
        assert validate_recipe(raw).loss == loss
    else:
        with pytest.raises(SiftcliError, match=f"loss '{loss}' does not fit task '{task}'"):
            validate_recipe(raw)


def test_bce_for_class_id_labels_is_refused_not_a_traceback(tmp_path: Path) -> None:
    with pytest.raises(SiftcliError, match="expected one of \\['auto', 'cross_entropy'\\]"):
        validate_recipe(tiny_recipe_dict(tmp_path / "x.csv", loss="bce"))


def test_label_noise_needs_class_labels(tmp_path: Path) -> None:
    with pytest.raises(SiftcliError, match="label_noise flips class labels"):
        validate_recipe(tiny_recipe_dict(tmp_path / "x.csv", task="regression", loss="mse", **{"data.label_noise": 0.2}))
