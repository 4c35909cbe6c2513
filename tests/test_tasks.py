"""The task table: every accepted task and loss combination trains, every other one is refused at validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from siftcli.config import validate_recipe
from siftcli.errors import SiftcliError
from siftcli.tasks import TASKS
from tests.conftest import tiny_recipe_dict

ALL_LOSSES = ("cross_entropy", "mse", "bce", "causal_lm")


def test_every_task_defines_what_the_modules_ask() -> None:
    for name, task in TASKS.items():
        assert task.name == name and task.losses and task.metric in ("accuracy", "mse", "perplexity")
        assert task.auto_class.startswith("AutoModelFor")
        assert task.loss_kind("auto") == task.losses[0]
        assert task.higher_is_better == (task.metric == "accuracy")


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
