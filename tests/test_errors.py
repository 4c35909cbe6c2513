"""Every bad input gets one line naming what is wrong, exit code 2, no traceback (docs/errors.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from siftcli.cli import app
from tests.conftest import tiny_recipe_dict

runner = CliRunner()


def _one_line_error(result, expected: str) -> None:
    text = result.output.strip()
    assert result.exit_code == 2, text
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    assert text.startswith("siftcli: error:")
    assert expected in text, text


def _recipe(tmp_path: Path, text_csv: Path, **changes) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe_dict(text_csv, **changes)))
    return str(path)


RECIPE_CASES = [
    ({"batch_size": "big"}, "key 'batch_size': Input should be a valid integer"),
    ({"sift.beta": 0}, "key 'sift.beta'"),
    ({"sift.loss_history_length": 0}, "key 'sift.loss_history_length'"),
    ({"sift.sift_delay": -1}, "key 'sift.sift_delay'"),
    ({"optim.lr": 0}, "key 'optim.lr'"),
    ({"epochs": -1}, "key 'epochs'"),
    ({"loss": "mse"}, "loss 'mse' does not fit task 'text-classification'"),
    ({"metric": "perplexity"}, "metric 'perplexity' does not fit task"),
    ({"sift.sift_delay_fraction": 0.3}, "give sift_delay (steps) or sift_delay_fraction, not both"),
    ({"precision": "fp16", "device": "cpu"}, "fp16 needs device cuda"),
    ({"sift.precision": "fp16"}, "sift.precision fp16 needs device cuda"),
    ({"sift.precision": "int8"}, "key 'sift.precision'"),
    ({"sift.mode": "greedy"}, "key 'sift.mode'"),
    ({"sift": 5}, "key 'sift': expected a mapping"),
    ({"task": "translation"}, "key 'task'"),
    ({"sift.bta": 1}, "unknown key 'sift.bta'; did you mean 'sift.beta'?"),
    ({"epoch": 1}, "unknown key 'epoch'; did you mean 'epochs'?"),
    ({"data.text_column": "sentence"}, "column 'sentence' not found in the train data"),
    ({"data.label_names": ["neg"]}, "not a class id in 0..0"),
    ({"data.source": "nope/missing.csv"}, "file or folder 'nope/missing.csv' not found"),
    ({"model.source": "./no-such-model"}, "model folder './no-such-model' not found"),
    ({"model.source": "builtin:gpt5"}, "unknown built-in model"),
    ({"data.source": "builtin:imagenet"}, "unknown built-in 'builtin:imagenet'"),
    ({"model.source": "config:nosuchtype"}, "cannot build config 'nosuchtype'"),
    ({"loss": "no_such_module_xyz:fn"}, "cannot import module 'no_such_module_xyz'"),
    ({"loss": "json:no_such_fn"}, "module 'json' has no attribute 'no_such_fn'"),
    ({"model.source": "someone-offline/model-xyz", "model.tokenizer": "someone-offline/model-xyz"}, "HF_HUB_OFFLINE=1"),
    ({"data.source": "someone-offline/dataset-xyz"}, "cannot load hub dataset 'someone-offline/dataset-xyz'"),
    ({"data.max_train_samples": 0}, "key 'data.max_train_samples'"),
]


@pytest.mark.parametrize("changes,expected", RECIPE_CASES, ids=[c[1][:40] for c in RECIPE_CASES])
def test_bad_recipe_values(tmp_path: Path, text_csv: Path, changes: dict, expected: str) -> None:
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv, **changes), "-q", "-o", str(tmp_path / "o")]), expected)
    assert not (tmp_path / "o").exists(), "a failed run must not leave an empty run folder"


def test_missing_recipe_file(tmp_path: Path) -> None:
    _one_line_error(runner.invoke(app, ["train", str(tmp_path / "none.yaml")]), "none.yaml: recipe file not found")


def test_recipe_is_a_folder(tmp_path: Path) -> None:
    _one_line_error(runner.invoke(app, ["validate", str(tmp_path)]), "is a folder")


def test_yaml_syntax_error(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("sift:\n  beta: [1, 2\n")
    _one_line_error(runner.invoke(app, ["train", str(p)]), "bad.yaml: YAML syntax error at line")


def test_empty_recipe(tmp_path: Path) -> None:
    p = tmp_path / "empty.yaml"
    p.write_text("# nothing\n")
    _one_line_error(runner.invoke(app, ["validate", str(p)]), "recipe is empty")


def test_recipe_not_a_mapping(tmp_path: Path) -> None:
    p = tmp_path / "list.yaml"
    p.write_text("- a\n- b\n")
    _one_line_error(runner.invoke(app, ["validate", str(p)]), "must be a mapping of keys, got a list")


def test_cuda_asked_for_but_missing(tmp_path: Path, text_csv: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv, device="cuda"), "-q", "-o", str(tmp_path / "o")]),
                    "no CUDA GPU is available")
    assert not (tmp_path / "o").exists()


def test_fp16_scoring_on_a_cpu_picked_by_device_auto(tmp_path: Path, text_csv: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    recipe = _recipe(tmp_path, text_csv, device="auto", **{"sift.precision": "fp16"})
    _one_line_error(runner.invoke(app, ["train", recipe, "-q", "-o", str(tmp_path / "o")]),
                    "sift.precision: fp16 needs a CUDA GPU")
    assert not (tmp_path / "o").exists()


def test_output_is_a_file(tmp_path: Path, text_csv: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-o", str(f), "-q"]), "exists and is not a folder")


def test_output_not_writable(tmp_path: Path, text_csv: Path) -> None:
    import os

    if os.geteuid() == 0:
        target = "/proc/siftcli-out"  # root ignores permission bits; /proc refuses everyone
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = str(locked / "run")
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-o", target, "-q"]), "is not writable")


def test_empty_dataset(tmp_path: Path) -> None:
    data = tmp_path / "empty.csv"
    data.write_text("text,label\n")
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, data), "-q", "-o", str(tmp_path / "o")]), "has no data rows")


def test_label_not_in_mapping(tmp_path: Path) -> None:
    data = tmp_path / "str.csv"
    data.write_text("text,label\n" + "".join(f"w{i},{'pos' if i % 2 else 'neg'}\n" for i in range(20)) + "odd,maybe\n")
    recipe = _recipe(tmp_path, data, **{"data.label_names": ["neg", "pos"]})
    _one_line_error(runner.invoke(app, ["train", recipe, "-q", "-o", str(tmp_path / "o")]),
                    "label 'maybe'")


def test_regression_needs_numeric_labels(tmp_path: Path) -> None:
    data = tmp_path / "reg.csv"
    data.write_text("text,label\n" + "".join(f"w{i},high\n" for i in range(20)))
    recipe = _recipe(tmp_path, data, task="regression", loss="mse", metric="mse")
    _one_line_error(runner.invoke(app, ["train", recipe, "-q", "-o", str(tmp_path / "o")]),
                    "regression needs numeric labels")


def test_malformed_set(tmp_path: Path, text_csv: Path) -> None:
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "--set", "sift.beta"]), "expected key.sub=value")


def test_bad_betas(tmp_path: Path, text_csv: Path) -> None:
    _one_line_error(runner.invoke(app, ["sweep-beta", _recipe(tmp_path, text_csv), "--betas", "a,b"]), "expected comma-separated numbers")


def test_negative_beta_in_sweep(tmp_path: Path, text_csv: Path) -> None:
    _one_line_error(runner.invoke(app, ["sweep-beta", _recipe(tmp_path, text_csv), "--betas", "1,-2", "-q"]), "expected positive numbers")


def test_compare_too_many_arguments() -> None:
    _one_line_error(runner.invoke(app, ["compare", "a", "b", "c"]), "got 3 arguments")


def test_compare_run_folders_without_metrics(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _one_line_error(runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")]), "metrics.json: not found")


def test_compare_run_folder_missing(tmp_path: Path) -> None:
    _one_line_error(runner.invoke(app, ["compare", str(tmp_path / "x"), str(tmp_path / "y")]), "run folder not found")


def test_compare_zero_seeds(tmp_path: Path, text_csv: Path) -> None:
    _one_line_error(runner.invoke(app, ["compare", _recipe(tmp_path, text_csv), "--seeds", "0", "-q", "-o", str(tmp_path / "o")]),
                    "--seeds must be at least 1")


def test_corrupt_metrics_json(tmp_path: Path) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "metrics.json").write_text("{not json")
    _one_line_error(runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")]), "not valid JSON")


def test_resume_without_checkpoint(tmp_path: Path, text_csv: Path) -> None:
    (tmp_path / "run").mkdir()
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "--resume", str(tmp_path / "run"), "-q"]),
                    "no checkpoint.pt")


def test_nan_loss_stops_naming_the_step_and_keeps_results(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    (tmp_path / "nanloss.py").write_text(
        "import torch\n"
        "from siftcli.sift.losses import hf_loss\n"
        "calls = 0\n"
        "def loss(model, batch):\n"
        "    global calls\n"
        "    calls += 1\n"
        "    out = hf_loss(model, batch)\n"
        "    return out * float('nan') if calls > 3 and torch.is_grad_enabled() else out\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    recipe = _recipe(tmp_path, text_csv, loss="nanloss:loss", **{"sift.enabled": False})
    result = runner.invoke(app, ["train", recipe, "-o", str(out), "-q"])
    _one_line_error(result, "training loss became nan at step")
    assert json.loads((out / "metrics.json").read_text())["status"] == "failed"
