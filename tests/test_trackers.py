"""report_to: a comparison logged to TensorBoard, MLflow, W&B (offline) and trackio, each read back with the
library's own reader; a missing extra or a tracker failing mid-run is one line and the run goes on."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from typer.testing import CliRunner

from siftcli.cli import app
from siftcli.recipe.schema import validate_recipe
from siftcli.report import trackers
from tests.conftest import tiny_recipe_dict

runner = CliRunner()


def _wandb_records(path: Path) -> list:
    """The records of a W&B offline run file (LevelDB's log format: 32 KiB blocks of checksummed chunks, each a
    protobuf Record), read with W&B's own message types."""
    from wandb.proto import wandb_internal_pb2

    raw, block, pos, chunks, records = path.read_bytes(), 32768, 7, b"", []
    assert raw[:4] == b":W&B"
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, size, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        if size == 0 and kind == 0:
            pos += left
            continue
        data, pos = raw[pos + 7:pos + 7 + size], pos + 7 + size
        chunks = data if kind in (1, 2) else chunks + data
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            records.append(record)
    return records


@pytest.mark.slow
def test_a_comparison_round_trips_through_every_tracker(tiny_recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("tensorboard", "mlflow", "wandb", "trackio"):
        pytest.importorskip(name)
    monkeypatch.chdir(tmp_path)  # MLflow keeps artifacts in ./mlruns beside a database store
    monkeypatch.setenv("SIFTCLI_PLOTS", "1")  # the comparison's plots go to the trackers too
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    import trackio.sqlite_storage
    import trackio.utils

    monkeypatch.setattr(trackio.utils, "TRACKIO_DIR", tmp_path / "trackio")
    monkeypatch.setattr(trackio.sqlite_storage, "TRACKIO_DIR", tmp_path / "trackio", raising=False)
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(tiny_recipe()), "--quick", "-o", str(out), "--report-to", "all", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # trackers print nothing on stdout: --json stays one document
    arms = sorted(doc["runs"][0])
    assert arms == ["baseline", "sifted"]

    # TensorBoard: one log folder per arm under the comparison's, read with TensorBoard's own reader
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for arm in arms:
        events = EventAccumulator(str(out / "tensorboard" / arm)).Reload()
        tags = events.Tags()["scalars"]
        assert {"train/loss", "train/kept_fraction", "eval/accuracy", "phase/forward_backward", "summary/final/accuracy"} <= set(tags)
        steps = [e.step for e in events.Scalars("train/loss")]
        assert steps == sorted(steps) and len(steps) >= 3
        final = events.Scalars("summary/final/accuracy")[0].value
        assert final == pytest.approx(doc["runs"][0][arm]["final"]["accuracy"], abs=1e-6)
    assert EventAccumulator(str(out / "tensorboard" / "comparison")).Reload().Tags()["images"]  # the plots

    # MLflow: a parent run for the comparison, a nested run per arm, read back with MlflowClient
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("tiny").experiment_id])
    parent = next(r for r in runs if r.info.run_name == out.name)
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == arms
    sifted = children["sifted"]
    assert sifted.data.params["sift.beta"] == "1.0" and sifted.data.params["arm"] == "sifted"
    assert len(client.get_metric_history(sifted.info.run_id, "train/loss")) >= 3
    assert sifted.info.status == "FINISHED"
    assert {a.path for a in client.list_artifacts(sifted.info.run_id)} == {"metrics.json", "log.jsonl"}
    assert {"compare.json", "report.html"} <= {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert parent.data.tags["verdict"]

    # W&B: offline run folders, their records read back with W&B's protobuf types
    folders = sorted((out / "wandb").glob("offline-run-*"))
    assert len(folders) == 3  # two arms and the comparison
    seen = {}
    for folder in folders:
        records = _wandb_records(next(folder.glob("*.wandb")))
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        assert run.run_group == out.name
        history = [{i.key or "/".join(i.nested_key): i.value_json for i in r.history.item}
                   for r in records if r.WhichOneof("record_type") == "history"]
        seen[run.display_name] = (history, sorted(p.name for p in (folder / "files").iterdir()))
    assert set(seen) == {*arms, "comparison"}
    assert any("train/loss" in h for h in seen["sifted"][0]) and "metrics.json" in seen["sifted"][1]
    assert "compare.json" in seen["comparison"][1]

    # trackio: its SQLite store, read back with its storage API
    from trackio import SQLiteStorage

    assert set(SQLiteStorage.get_runs("tiny")) == {*arms, "comparison"}
    logs = SQLiteStorage.get_logs("tiny", "sifted")
    assert sum("train/loss" in row for row in logs) >= 3 and any("summary/final/accuracy" in row for row in logs)


def test_a_missing_extra_and_a_failing_tracker_are_one_line_and_the_run_goes_on(
        tiny_recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("tensorboard")
    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))

    def full_disk(self, values, step):  # noqa: ANN001, ANN202
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trackers._TensorBoard, "log", full_disk)
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_recipe()), "-o", str(out), "--report-to", "tensorboard,wandb", "-q"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("report_to")]
    assert len(lines) == 2, result.output
    assert "report_to wandb: not installed (pip install 'siftcli[wandb]')" in lines[0]
    assert "report_to tensorboard: OSError" in lines[1] and "the run goes on" in lines[1]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["status"] == "completed" and (out / "model").is_dir()  # nothing lost


def test_report_to_reads_as_the_trainer_spells_it(tmp_path: Path) -> None:
    def parsed(value):  # noqa: ANN001, ANN202
        return validate_recipe(tiny_recipe_dict(tmp_path / "d.csv", report_to=value)).report_to

    assert parsed("tensorboard, mlflow") == ["tensorboard", "mlflow"]
    assert parsed("none") == [] and parsed(None) == [] and parsed(["wandb"]) == ["wandb"]
    assert set(parsed("all")) <= set(trackers.TRACKERS)
    from siftcli.errors import SiftcliError

    with pytest.raises(SiftcliError, match="report_to"):
        parsed("comet")
    assert trackers.flatten({"sift": {"beta": 1, "reference": {"kind": "x"}}, "tags": [1, 2]}) == {
        "sift.beta": 1, "sift.reference.kind": "x", "tags": "[1, 2]"}


def test_an_interrupted_comparison_ends_its_tracker_runs_marked_so(tiny_recipe, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from tests.test_cli import _interrupt_after

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _interrupt_after(monkeypatch, 40)  # the baseline has 30 steps: this lands in the sifted arm
    out = tmp_path / "cmp"
    result = runner.invoke(app, ["compare", str(tiny_recipe()), "--quick", "-o", str(out), "-q", "--report-to", "mlflow"])
    assert result.exit_code == 130, result.output
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = {r.info.run_name: r.info.status for r in client.search_runs([client.get_experiment_by_name("tiny").experiment_id])}
    assert runs == {out.name: "KILLED", "baseline": "FINISHED", "sifted": "KILLED"}  # nothing left RUNNING


@pytest.mark.slow
def test_an_unreachable_mlflow_server_is_one_warning_soon_and_the_run_goes_on(tiny_recipe, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow's own client retries 7 times with doubling back-off (minutes of silence); the tracker gives up within
    about half a minute, says so in one line, and the run trains as if it had not been asked for."""
    import socket

    pytest.importorskip("mlflow")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    for key in trackers.MLFLOW_PATIENCE:
        monkeypatch.delenv(key, raising=False)
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_recipe()), "-o", str(out), "--report-to", "mlflow", "-q"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("report_to mlflow")]
    assert len(lines) == 1 and "the run goes on" in lines[0], result.output
    import os

    assert {k: os.environ.get(k) for k in trackers.MLFLOW_PATIENCE} == trackers.MLFLOW_PATIENCE  # MLflow's retries bounded
    assert json.loads((out / "metrics.json").read_text())["status"] == "completed"


def test_wandb_writes_where_wandb_dir_says(tiny_recipe, tmp_path: Path, monkeypatch) -> None:
    """``WANDB_DIR`` set by the user is where W&B's files go (they once went to the run folder whatever it said)."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wd"))
    (tmp_path / "wd").mkdir()
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_recipe(epochs=1)), "-o", str(out), "--report-to", "wandb", "-q"])
    assert result.exit_code == 0, result.output
    assert list((tmp_path / "wd" / "wandb").glob("offline-run-*")) and not (out / "wandb").exists()


def test_an_unreachable_mlflow_database_is_one_line_at_once_and_the_run_goes_on(tiny_recipe, tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow retries a tracking database it cannot reach about ten times with doubling sleeps (~100 s, a warning a
    try): one connection is tried first, and a refused one is one line naming the store (its password hidden)."""
    import socket

    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("psycopg")
    started: list[object] = []

    def client(*args: object, **kwargs: object) -> None:  # MLflow's own client: its store would start the retry loop
        started.append(args)
        raise RuntimeError("MLflow's client was started")

    monkeypatch.setattr(mlflow.tracking, "MlflowClient", client)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"postgresql+psycopg://u:secret@127.0.0.1:{port}/db")
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_recipe()), "-o", str(out), "--report-to", "mlflow", "-q"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("report_to mlflow")]
    assert len(lines) == 1 and f"127.0.0.1:{port}/db" in lines[0] and "the run goes on" in lines[0], result.output
    assert "secret" not in result.output and "retried" not in result.output
    assert started == []  # refused before MLflow's client, whose retries alone take ~100 s
    assert json.loads((out / "metrics.json").read_text())["status"] == "completed"


def test_an_unreachable_wandb_server_is_one_line_at_once_and_the_run_goes_on(tiny_recipe, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B's init waits about 90 s for a server it cannot reach: one connection is tried first, and a refused one is one
    line naming the server and the offline mode, the run trained as if W&B had not been asked for."""
    import socket

    wandb = pytest.importorskip("wandb")
    started: list[object] = []

    def init(*args: object, **kwargs: object) -> None:  # W&B's own init, which would wait ~90 s for the server
        started.append(kwargs)
        raise RuntimeError("wandb.init was called")

    monkeypatch.setattr(wandb, "init", init)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key in ("WANDB_MODE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", str(tiny_recipe(epochs=1)), "-o", str(out), "--report-to", "wandb", "-q"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("report_to wandb")]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "WANDB_MODE=offline" in lines[0], result.output
    assert started == []  # refused before W&B's init, which alone waits ~90 s
    assert json.loads((out / "metrics.json").read_text())["status"] == "completed"
