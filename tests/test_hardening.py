"""Inputs and faults that once escaped as tracebacks, hangs or silent wrong answers: each one line, exit 2, nothing left
half-written (docs/errors.md)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from siftcli.cli import app
from tests.conftest import make_text_rows, tiny_recipe_dict
from tests.test_errors import _one_line_error

runner = CliRunner()


def _recipe(tmp_path: Path, data: Path, **changes) -> str:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe_dict(data, **changes)))
    return str(path)


def _filter(tmp_path: Path, data: Path, *args: str, **changes) -> object:
    return runner.invoke(app, ["filter", _recipe(tmp_path, data, **changes), *args])


def test_a_null_text_in_a_jsonl_pool_is_one_line(tmp_path: Path) -> None:
    rows = [{"text": t, "label": y} for t, y in make_text_rows(60)]
    rows[5]["text"] = None
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    _one_line_error(_filter(tmp_path, data, "--dedup", "-o", str(tmp_path / "k.csv")),
                    "data: column 'text' must hold text; found NoneType (None)")
    assert not (tmp_path / "k.csv").exists()


@pytest.mark.parametrize("args,expected", [
    (["--keep", "0.5", "--similarity", "5"], "--similarity 5 sets what --dedup calls a near-copy; give --dedup too"),
    (["--dedup", "--similarity", "5"], "--similarity 5.0: expected a Jaccard similarity in (0, 1]"),
])
def test_similarity_is_checked_and_never_ignored(tmp_path: Path, text_csv: Path, args: list[str], expected: str) -> None:
    _one_line_error(_filter(tmp_path, text_csv, *args, "-o", str(tmp_path / "k.csv")), expected)


def test_an_output_folder_that_cannot_be_written_is_found_before_the_filter(tmp_path: Path, text_csv: Path) -> None:
    (tmp_path / "afile").write_text("x")
    _one_line_error(_filter(tmp_path, text_csv, "--dedup", "-o", str(tmp_path / "afile" / "k.csv")), "afile is a file, not a folder")
    _one_line_error(_filter(tmp_path, text_csv, "--dedup", "-o", "/proc/siftcli/k.csv"), "-o /proc/siftcli/k.csv: cannot write into /proc")
    ok = _filter(tmp_path, text_csv, "--dedup", "-o", str(tmp_path / "new" / "deeper" / "k.csv"))
    assert ok.exit_code == 0, ok.output  # a missing folder is made, as before
    assert (tmp_path / "new" / "deeper" / "k.csv").exists()


@pytest.mark.parametrize("name,content,expected", [
    ("dup.csv", b"text,label,text\n" + b"".join(f"{t},{y},x\n".encode() for t, y in make_text_rows(40)),
     "column 'text' appears twice in the header (columns 1 and 3); rename one"),
    ("latin.csv", b"text,label\n" + b"".join(f"{t},{y}\n".encode() for t, y in make_text_rows(40)) + b"caf\xe9 bad,0\n",
     "line 42 is not UTF-8 (byte 0xe9 at column 4); save the file as UTF-8"),
    ("bad.jsonl", b'{"text": "a", "label": 1}\n{"text": "b", label: 0}\n', "line 2 is not JSON ("),
    ("list.jsonl", b'{"text": "a", "label": 1}\n[1, 2]\n', "line 2 is a JSON list, not an object of columns"),
    ("bad.parquet", b"not parquet at all", "not a Parquet file (it does not begin and end with PAR1)"),
])
@pytest.mark.parametrize("command", ["filter", "validate"])
def test_an_unreadable_file_names_its_line_and_fix(tmp_path: Path, name: str, content: bytes, expected: str,
                                                    command: str) -> None:
    data = tmp_path / name
    data.write_bytes(content)
    args = ["--dedup", "-o", str(tmp_path / "k.csv")] if command == "filter" else []
    _one_line_error(runner.invoke(app, [command, _recipe(tmp_path, data), *args]), expected)


def _silent_server() -> tuple[socket.socket, int]:
    """A service that accepts and never speaks (as an HTTP server waiting for its request)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()
    return server, server.getsockname()[1]


def _talking_server() -> tuple[socket.socket, int]:
    """A service that greets first with text (as SSH does): its bytes are no Dask frame."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        conn, _ = server.accept()
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n" * 4)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


@pytest.mark.parametrize("kind", ["junk", "refused", "talking", "silent"])
def test_a_scheduler_address_without_a_dask_scheduler_is_one_line(tmp_path: Path, text_csv: Path, kind: str,
                                                                   monkeypatch) -> None:
    pytest.importorskip("distributed")
    from siftcli.curate import engines

    monkeypatch.setattr(engines, "CONNECT_SECONDS", 2)
    server = None
    if kind == "junk":
        address = "junk:::"
    elif kind == "refused":
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
        probe.close()
    else:
        server, port = _talking_server() if kind == "talking" else _silent_server()
        address = f"tcp://127.0.0.1:{port}"
    try:
        out = _filter(tmp_path, text_csv, "--dedup", "-o", str(tmp_path / "k.csv"), "--engine", "dask", "--scheduler", address)
    finally:
        if server is not None:
            server.close()
    _one_line_error(out, f"--scheduler {address}: no Dask scheduler answered there within 2 s")
    assert not (tmp_path / "k.csv").exists()


@pytest.mark.parametrize("arm,expected", [
    ("random-keep:colour=red", "random-keep takes no settings (got colour)"),
    ("baseline:colour=red", "baseline takes no settings (got colour)"),
    ("equal-time:steps=5", "equal-time takes no settings (got steps)"),
    ("target-only:x=1", "target-only takes no settings (got x)"),
    ("dedup:threshold=true", "threshold must be a similarity in (0, 1], got True"),
    ("dedup:colour=1", "dedup takes threshold=T only (got colour)"),
])
def test_an_arm_refuses_settings_it_does_not_read(tmp_path: Path, text_csv: Path, arm: str, expected: str) -> None:
    out = runner.invoke(app, ["compare", _recipe(tmp_path, text_csv), "--arm", "baseline", "--arm", arm, "-q",
                              "-o", str(tmp_path / "c")])
    _one_line_error(out, expected)
    assert not (tmp_path / "c").exists()


def _plan_recipe(tmp_path: Path, rows: int = 240, **changes) -> str:
    from tests.test_plan import _recipe as plan_recipe

    return str(plan_recipe(tmp_path, rows, **changes))


def test_a_plan_whose_budget_paid_for_the_baselines_only_says_it_compared_nothing() -> None:
    from siftcli.plan.record import Candidate, PlanRecord
    from siftcli.plan.verdict import conclude

    record = PlanRecord("running", "r", "accuracy", 1.5, 1, 2, baseline_seconds=100.0,
                        candidates=[Candidate("dedup:threshold=0.7", "dedup", "drop near-copies", None,
                                              outcome="over budget: predicted 40 s at the screen")])
    conclude(record)
    assert record.answer.startswith("train on everything, untested: the budget of 1.5 baseline runs paid for the "
                                    "baselines only")
    assert "within the tolerance" not in record.answer


def test_a_sigterm_between_a_plans_jobs_leaves_it_interrupted_and_resumable(tmp_path: Path, monkeypatch) -> None:
    import os
    import signal

    from siftcli.plan import phases as plan_phases

    real, calls = plan_phases.Plan._train, []

    def stopped(self, trial, index):  # noqa: ANN001, ANN202
        calls.append(index)
        if len(calls) == 2:  # after the first job finished, before the next trains: no training handler is installed
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, trial, index)

    monkeypatch.setattr(plan_phases.Plan, "_train", stopped)
    out = runner.invoke(app, ["plan", _plan_recipe(tmp_path), "--budget", "30", "--seeds", "2", "-q", "-o",
                              str(tmp_path / "p")])
    assert out.exit_code == 143, out.output
    assert "siftcli plan --resume" in out.output
    assert json.loads((tmp_path / "p" / "plan.json").read_text())["status"] == "interrupted"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the plan put the default handler back


@pytest.mark.parametrize("args,expected", [
    (["--budget", "0", "--seeds", "99", "--workers", "0", "-o", "elsewhere"],
     "--resume continues the plan with its saved settings; --budget, --workers, --output would be ignored"),
    (["--set", "epochs=1"], "--set would be ignored"),
])
def test_plan_resume_refuses_options_it_would_ignore(tmp_path: Path, args: list[str], expected: str) -> None:
    _one_line_error(runner.invoke(app, ["plan", "--resume", str(tmp_path), *args]), expected)


def _as_an_older_siftcli_started_it(folder: Path) -> None:
    """The plan's study as a siftcli without ``optim.warmup_fraction`` would have started it (its hash and dump)."""
    from siftcli import studies
    from siftcli.plan.study import DEFAULT_STUDY, PlanStudy

    ps = PlanStudy("", folder, DEFAULT_STUDY, True)
    dump = ps.study.user_attrs[studies.RECIPE_DUMP]
    del dump["optim"]["warmup_fraction"]
    ps.study.set_user_attr(studies.RECIPE_DUMP, dump)
    ps.study.set_user_attr(studies.RECIPE, studies.dump_sha256(dump))


def test_a_plan_resumed_after_its_recipe_was_edited_says_so(tmp_path: Path) -> None:
    out = runner.invoke(app, ["plan", _plan_recipe(tmp_path), "--budget", "1.5", "--seeds", "2", "-q", "-o",
                              str(tmp_path / "p")])
    assert out.exit_code == 0, out.output
    saved = tmp_path / "p" / "recipe.yaml"
    original = saved.read_text()
    _as_an_older_siftcli_started_it(tmp_path / "p")  # a field siftcli gained since, at its default: the same recipe
    out = runner.invoke(app, ["plan", "--resume", str(tmp_path / "p"), "-q"])
    assert out.exit_code == 0, out.output
    saved.write_text(original.replace("epochs: 2", "epochs: 3"))
    _one_line_error(runner.invoke(app, ["plan", "--resume", str(tmp_path / "p")]),
                    "recipe.yaml changed since the plan started")
    saved.write_text(original)  # plan.json edited instead: said as an edit of plan.json, not as another --study's clash
    record = tmp_path / "p" / "plan.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "seeds": 40, "tolerance": 0}))
    _one_line_error(runner.invoke(app, ["plan", "--resume", str(tmp_path / "p")]),
                    "plan.json says tolerance 0 (started with 1), seeds 40 (started with 2): it was edited since the plan "
                    "started")


def test_a_plan_with_too_few_evaluation_rows_leaves_no_folder(tmp_path: Path) -> None:
    out = runner.invoke(app, ["plan", _plan_recipe(tmp_path, rows=40, **{"data.eval_fraction": 0.05}), "-q", "-o",
                              str(tmp_path / "p")])
    _one_line_error(out, "the evaluation data has 2 rows; it needs at least 4")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("command", ["sweep-beta", "plan"])
def test_a_study_siftcli_did_not_start_is_refused_before_anything_trains(tmp_path: Path, text_csv: Path, command: str) -> None:
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = f"sqlite:///{tmp_path / 'foreign.db'}"
    name = "tiny-sweep" if command == "sweep-beta" else "siftcli-plan"
    foreign = optuna.create_study(storage=url, study_name=name, direction="maximize")
    foreign.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    extra = ["--betas", "1,2"] if command == "sweep-beta" else []
    out = runner.invoke(app, [command, _recipe(tmp_path, text_csv), "--storage", url, *extra, "-q", "-o", str(tmp_path / "s")])
    _one_line_error(out, f"--study {name}: {url} already holds a study of that name that siftcli did not start (2 trials")
    assert not (tmp_path / "s").exists()


def test_a_cached_reference_holding_nan_is_rebuilt_and_a_diverged_one_is_refused(text_csv: Path, monkeypatch) -> None:
    import torch

    from siftcli.arms import reference as reference_mod
    from siftcli.arms.reference import cache_dir, reference_for
    from siftcli.errors import SiftcliError
    from siftcli.recipe.schema import validate_recipe
    from siftcli.workload.build import build_workload

    recipe = validate_recipe(tiny_recipe_dict(text_csv, **{"sift.score": "reference", "sift.reference.kind": "holdout",
                                                            "sift.reference.holdout_fraction": 0.2}))
    workload = build_workload(recipe)
    built, _ = reference_for(workload, recipe)
    path = cache_dir() / "references" / f"{built.key}.pt"
    saved = torch.load(path, weights_only=True)
    saved["losses"][3] = float("nan")  # a corrupted entry
    torch.save(saved, path)
    again, runs = reference_for(workload, recipe)
    assert not again.cached and len(runs) == 1 and bool(torch.isfinite(again.losses).all())  # rebuilt over, not used
    path.unlink()
    real = reference_mod.holdout_reference

    def diverged(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        reference, runs = real(*args, **kwargs)
        reference.losses[:5] = float("nan")
        return reference, runs

    monkeypatch.setattr(reference_mod, "holdout_reference", diverged)
    with pytest.raises(SiftcliError, match="5 of 96 reference losses are not finite"):
        reference_for(workload, recipe)
    assert not path.exists()  # never cached


def test_a_study_being_founded_this_moment_is_not_taken_for_a_stranger(tmp_path: Path) -> None:
    """Machines started together: one has created the study but not yet its founder marker; the other must join it."""
    optuna = pytest.importorskip("optuna")
    from siftcli.studies import check_storage

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    optuna.create_study(storage=url, study_name="shared")  # no trial yet, no marker yet
    check_storage(url, "shared")  # no refusal


def _planted(folder: Path, tmp_path: Path, entry: str = "log.jsonl") -> Path:
    """``folder/entry`` made a link to a file outside it, which holds text a write through the link would destroy."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / entry).symlink_to(victim)
    return victim


@pytest.mark.parametrize("command", ["train", "compare", "plan", "sweep-beta"])
def test_an_output_folder_holding_a_link_out_of_it_is_refused_naming_the_link(tmp_path: Path, text_csv: Path,
                                                                              command: str) -> None:
    victim = _planted(tmp_path / "out", tmp_path)
    args = {"train": [], "compare": ["--quick"], "plan": ["--budget", "2"], "sweep-beta": ["--trials", "1"]}[command]
    result = runner.invoke(app, [command, _recipe(tmp_path, text_csv), "-o", str(tmp_path / "out"), *args])
    _one_line_error(result, f"--output {tmp_path / 'out'}: {tmp_path / 'out' / 'log.jsonl'} is a link to {victim}, outside")
    assert victim.read_text() == "precious\n"


def test_an_arm_folder_that_links_out_of_the_comparison_is_refused(tmp_path: Path, text_csv: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "baseline").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    result = runner.invoke(app, ["compare", _recipe(tmp_path, text_csv), "-o", str(tmp_path / "c"), "--quick"])
    _one_line_error(result, f"{tmp_path / 'c' / 'baseline'} is a link to {tmp_path / 'elsewhere'}, outside the folder")
    assert not any((tmp_path / "elsewhere").iterdir())


def test_a_resumed_run_holding_a_planted_link_is_refused_and_a_log_is_never_written_through_one(tmp_path: Path,
                                                                                             text_csv: Path) -> None:
    from siftcli.runio import JsonlLog

    run = tmp_path / "run"
    assert runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-o", str(run)]).exit_code == 0
    (run / "log.jsonl").unlink()
    victim = _planted(run, tmp_path)
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "--resume", str(run)]),
                    f"--resume {run}: {run / 'log.jsonl'} is a link to {victim}")
    with pytest.raises(OSError):  # below the folder check: the log itself never follows a link
        JsonlLog(run / "log.jsonl")
    assert victim.read_text() == "precious\n"


def test_filter_output_that_is_a_link_is_replaced_not_written_through(tmp_path: Path, text_csv: Path) -> None:
    victim = tmp_path / "victim.csv"
    victim.write_text("precious\n")
    (tmp_path / "kept.csv").symlink_to(victim)
    result = _filter(tmp_path, text_csv, "--dedup", "-o", str(tmp_path / "kept.csv"))
    assert result.exit_code == 0, result.output
    assert victim.read_text() == "precious\n" and not (tmp_path / "kept.csv").is_symlink()


def _interrupt_at(call: int, monkeypatch) -> object:  # noqa: ANN001
    """The loop's training step raises KeyboardInterrupt (a Ctrl-C) at its ``call``-th call; returns the real one."""
    from siftcli.training import loop

    step, calls = loop.train_step, []

    def interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return step(*args, **kwargs)

    monkeypatch.setattr(loop, "train_step", interrupted)
    return step


def test_a_run_resumed_on_a_changed_data_file_is_refused_naming_it_unless_trusted(tmp_path: Path, text_csv: Path,
                                                                                monkeypatch) -> None:
    from siftcli.training import loop

    step = _interrupt_at(3, monkeypatch)
    recipe, run = _recipe(tmp_path, text_csv), tmp_path / "run"
    assert runner.invoke(app, ["train", recipe, "-o", str(run)]).exit_code != 0  # interrupted
    monkeypatch.setattr(loop, "train_step", step)
    text_csv.write_text(text_csv.read_text().replace(",1\n", ",0\n", 3))  # three labels edited in place
    _one_line_error(runner.invoke(app, ["train", recipe, "--resume", str(run)]),
                    f"--resume {run}: data.source {text_csv.resolve()} changed")
    done = runner.invoke(app, ["train", recipe, "--resume", str(run), "--trust-data", "-q"])
    assert done.exit_code == 0, done.output
    _one_line_error(runner.invoke(app, ["train", recipe, "--trust-data"]), "--trust-data goes with --resume")


def test_a_plan_resumed_on_a_changed_data_file_is_refused_naming_it(tmp_path: Path, monkeypatch) -> None:
    import os
    import signal

    from siftcli.plan import phases as plan_phases

    real, calls = plan_phases.Plan._train, []

    def stopped(self, trial, index):  # noqa: ANN001, ANN202
        calls.append(index)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, trial, index)

    monkeypatch.setattr(plan_phases.Plan, "_train", stopped)
    recipe = _plan_recipe(tmp_path)
    out = runner.invoke(app, ["plan", recipe, "--budget", "30", "--seeds", "2", "-q", "-o", str(tmp_path / "p")])
    assert out.exit_code == 143, out.output
    source = Path(yaml.safe_load(Path(recipe).read_text())["data"]["source"])
    source.write_text(source.read_text() + source.read_text().splitlines()[1] + "\n")  # a row added
    _one_line_error(runner.invoke(app, ["plan", "--resume", str(tmp_path / "p")]),
                    f"--resume {tmp_path / 'p'}: data.source {source.resolve()} changed")


@pytest.mark.parametrize("content,expected", [
    ("{}", "plan.json is damaged (lacks 'candidates'"),
    ("[]", "plan.json is damaged (TypeError"),
])
def test_a_damaged_plan_folder_is_one_line(tmp_path: Path, content: str, expected: str) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "plan.json").write_text(content)
    _one_line_error(runner.invoke(app, ["plan", "--resume", str(tmp_path / "p")]), expected)


@pytest.mark.parametrize("keep,expected", [
    (0.0, "optuna.journal is empty, so the finished trials are lost"),
    (0.5, "optuna.journal is damaged at line 1"),
    (-1, "optuna.journal is not a file (a folder, or a link to none)"),
])
def test_a_damaged_sweep_journal_is_one_line(tmp_path: Path, text_csv: Path, keep: float, expected: str) -> None:
    out = runner.invoke(app, ["sweep-beta", _recipe(tmp_path, text_csv), "--trials", "1", "--jobs", "0", "-q", "-o",
                              str(tmp_path / "sw")])
    assert out.exit_code == 0, out.output
    journal = tmp_path / "sw" / "optuna.journal"
    whole = journal.read_bytes()
    if keep < 0:  # a folder where the journal was
        journal.unlink()
        journal.mkdir()
    else:
        journal.write_bytes(whole[:int(len(whole) * keep)])  # emptied, or cut in the middle of a line
    _one_line_error(runner.invoke(app, ["sweep-beta", "--resume", str(tmp_path / "sw")]), expected)
    assert "Traceback" not in runner.invoke(app, ["sweep-beta", "--resume", str(tmp_path / "sw")]).output


def test_the_printed_resume_command_resumes_with_every_set_given(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    import shlex

    from siftcli.training import loop

    step = _interrupt_at(4, monkeypatch)
    recipe = _recipe(tmp_path, text_csv)
    out = runner.invoke(app, ["train", recipe, "-o", str(tmp_path / "run"), "--set", "data.max_train_samples=100",
                              "--set", "optim.lr=0.002", "--no-sift"])
    assert out.exit_code == 130, out.output
    command = out.output.split("continue with: ")[1].strip()
    assert "--set data.max_train_samples=100" in command and "--no-sift" in command
    monkeypatch.setattr(loop, "train_step", step)
    words = shlex.split(command)
    assert words[:2] == ["siftcli", "train"]
    done = runner.invoke(app, words[1:] + ["-q"])
    assert done.exit_code == 0, done.output
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "completed"


def test_a_plan_says_when_its_jobs_were_too_short_to_time() -> None:
    from siftcli.plan.record import Candidate, PlanRecord, Trial
    from siftcli.plan.view import search_rows, short_note

    trial = Trial("train-less:fraction=0.35", 0.25, 0.4, 0.8, 0.8, 0.31, "complete", short=True)
    record = PlanRecord("completed", "r", "accuracy", 2, 1, 2, baseline_seconds=3.0,
                        candidates=[Candidate("train-less:fraction=0.35", "fewer-epochs", "train less", 0.35, trials=[trial])])
    assert "1 job(s) or their baselines ran under 2 s" in short_note(record)
    assert any("0.31 (short: noise)" in cell for row in search_rows(record) for cell in row)
    trial.short = False
    assert short_note(record) == ""


@pytest.mark.parametrize("arms,expected", [
    (["sifted:beta=1,beta=2"], "--arm 'sifted:beta=1,beta=2': beta is given twice"),
    (["train-less:fraction=0.5", "train-less:fraction=0.50"], "is --arm 'train-less:fraction=0.5' again"),
    (["sifted:keep_fraction=true"], "keep_fraction must be a number (a share of the samples), got True"),
])
def test_an_arm_given_twice_or_a_setting_of_the_wrong_kind_is_refused(tmp_path: Path, text_csv: Path, arms: list[str],
                                                                     expected: str) -> None:
    args = [a for arm in arms for a in ("--arm", arm)]
    _one_line_error(runner.invoke(app, ["compare", _recipe(tmp_path, text_csv), "-o", str(tmp_path / "c"), *args]),
                    expected)
    assert not (tmp_path / "c").exists()


def test_a_tolerance_out_of_range_says_the_range() -> None:
    _one_line_error(runner.invoke(app, ["plan", "--tolerance", "inf"]), "expected metric points from 0 to 100")


def test_a_comparison_folder_in_use_points_to_its_resume(tmp_path: Path, text_csv: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "compare.json").write_text("{}")
    result = runner.invoke(app, ["compare", _recipe(tmp_path, text_csv), "-o", str(tmp_path / "c"), "--quick"])
    _one_line_error(result, f"already holds a run (compare.json); choose another folder, or continue an interrupted one "
                            f"with --resume {tmp_path / 'c'}")


def test_an_interrupted_run_under_json_says_so_on_stdout(tmp_path: Path, text_csv: Path, monkeypatch) -> None:
    _interrupt_at(3, monkeypatch)
    out = runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-o", str(tmp_path / "run"), "--json"])
    assert out.exit_code == 130
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    assert doc["status"] == "interrupted" and doc["run_dir"] == str(tmp_path / "run")
    assert doc["resume"].startswith("siftcli train ") and f"--resume {tmp_path / 'run'}" in doc["resume"]


@pytest.mark.parametrize("target", ["missing", "loop"])
def test_an_output_that_is_a_dangling_or_looping_link_says_so(tmp_path: Path, text_csv: Path, target: str) -> None:
    link = tmp_path / "out"
    link.symlink_to(tmp_path / "nowhere" if target == "missing" else link)
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-o", str(link)]),
                    f"--output {link}: a link to")


def test_a_resume_folder_that_cannot_take_files_names_resume_not_output(tmp_path: Path, text_csv: Path) -> None:
    from siftcli.errors import SiftcliError
    from siftcli.runio import ensure_writable

    (tmp_path / "f").write_text("")
    with pytest.raises(SiftcliError, match=r"^--resume .*/f: exists and is not a folder"):
        ensure_writable(tmp_path / "f", "--resume")


def test_a_label_that_is_not_an_id_says_how_to_map_it(tmp_path: Path) -> None:
    rows = ["text,label"] + [f"{t},{'True' if y else 'False'}" for t, y in make_text_rows(40)]
    (tmp_path / "b.csv").write_text("\n".join(rows) + "\n")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, tmp_path / "b.csv")]), "data.label_names")


def test_more_bad_input_is_one_line_naming_what_to_do(tmp_path: Path, text_csv: Path) -> None:
    """Cases of the audit's list that were tracebacks in another's words, or silently accepted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": pa.array([], pa.string()), "label": pa.array([], pa.int64())}), tmp_path / "zero.parquet")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, tmp_path / "zero.parquet")]), "has no data rows")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, **{"model.config_overrides.num_labels": 5})]),
                    "model.config_overrides.num_labels 5: the data has 2 labels")
    same = {"sift.reference.kind": "ngram", "sift.reference.holdout_source": str(text_csv)}
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, **same)]), "holdout_source")
    recipe = _recipe(tmp_path, text_csv)
    _one_line_error(runner.invoke(app, ["compare", recipe, "-o", str(tmp_path / "c"), "--arm", "sifted:beta=[1,2]"]),
                    "beta takes one value, not a list")
    _one_line_error(runner.invoke(app, ["compare", recipe, str(tmp_path / "run1")]), "is a recipe, so")
    assert not (tmp_path / "run1").exists() and not (tmp_path / "c").exists()


def test_a_long_arm_name_gets_a_folder_name_a_file_system_takes() -> None:
    from siftcli.arms.run import FOLDER_NAME_MAX, folder_name

    long_a, long_b = "variant:name=" + "x" * 300, "variant:name=" + "x" * 299 + "y"
    assert len(folder_name(long_a)) <= FOLDER_NAME_MAX and folder_name(long_a) != folder_name(long_b)
    assert folder_name("sifted:beta=2") == "sifted-beta2"  # short names as before


def test_a_loader_over_unbatched_samples_says_to_give_a_batch_size() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from siftcli.sift import SiftConfig, SiftingDataLoader, cross_entropy_loss

    x = torch.randn(16, 4)
    loader = SiftingDataLoader(DataLoader(TensorDataset(x, (x[:, 0] > 0).long()), batch_size=None), torch.nn.Linear(4, 2),
                               cross_entropy_loss, SiftConfig(sift_delay=0), batch_size=4)
    with pytest.raises(ValueError, match="batch_size=None, so it hands over single samples.*give it a batch_size"):
        list(loader)


def test_a_config_override_the_config_lacks_is_named_with_the_likely_key(tmp_path: Path, text_csv: Path) -> None:
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, **{"model.config_overrides.hiden_size": 8})]),
                    "model.config_overrides.hiden_size: BertConfig has no such setting; did you mean hidden_size?")


def test_a_long_recipe_name_gets_a_run_folder_and_results_get_the_usual_modes(tmp_path: Path, text_csv: Path,
                                                                            monkeypatch) -> None:
    """A 300-character name made a run folder name the file system refused ("File name too long", blaming --output);
    the saved model's folder was 0700 and its weights 0600 under umask 022."""
    import os
    import stat

    from siftcli.runio import RUN_NAME_MAX

    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        result = runner.invoke(app, ["train", _recipe(tmp_path, text_csv, name="n" * 300, epochs=1), "-q"])
    finally:
        os.umask(old)
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs").iterdir()
    assert len(run.name) < RUN_NAME_MAX + 20
    model = run / "model"
    assert stat.S_IMODE(model.stat().st_mode) == 0o755
    assert {stat.S_IMODE(f.stat().st_mode) for f in model.iterdir()} == {0o644}


def test_too_few_or_one_class_evaluation_rows_are_said_and_a_plan_on_one_class_is_refused(tmp_path: Path) -> None:
    """A result from 3 evaluation rows, or from rows of one class, says what it cannot tell (it once read as a verdict);
    a plan, which could never decide on one class, is refused before its folder exists."""
    rows = make_text_rows(120)
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows[:100]))
    (tmp_path / "three.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows[100:103]))
    (tmp_path / "one.csv").write_text("text,label\n" + "".join(f"{t},0\n" for t, _ in rows[100:120]))
    three = _recipe(tmp_path, tmp_path / "train.csv", epochs=1, **{"data.eval_source": str(tmp_path / "three.csv")})
    out = runner.invoke(app, ["train", three, "-o", str(tmp_path / "t"), "--no-sift"])
    assert out.exit_code == 0 and "the evaluation has 3 rows: one row moves the metric by 33.3 points" in out.output
    one = _recipe(tmp_path, tmp_path / "train.csv", epochs=1, **{"data.eval_source": str(tmp_path / "one.csv"),
                                                                   "data.label_names": ["neg", "pos"]})
    _one_line_error(runner.invoke(app, ["plan", one, "-o", str(tmp_path / "p")]),
                    "the evaluation rows hold one class only (20 rows of label 'neg')")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("fraction,words", [(0.99, "leaves 1 to train on"), (0.01, "leaves 1 for the reference")])
def test_a_holdout_fraction_that_leaves_a_side_almost_empty_is_refused(tmp_path: Path, text_csv: Path, fraction: float,
                                                                       words: str) -> None:
    """A naive-Bayes holdout of 0.99 trained on 1 row, and 0.01 fitted a reference on 1 row: both completed without a
    word."""
    raw = {"sift.reference.kind": "naive-bayes", "sift.reference.holdout_fraction": fraction}
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, **raw)]), words)


def test_a_reference_whose_loss_breaks_names_the_references_learning_rate(tmp_path: Path, text_csv: Path) -> None:
    raw = {"sift.reference.kind": "holdout", "sift.reference.holdout_fraction": 0.25, "sift.reference.lr": 1e30,
           "sift.score": "reducible"}
    _one_line_error(runner.invoke(app, ["train", _recipe(tmp_path, text_csv, epochs=1, **raw), "-q", "-o", str(tmp_path / "o")]),
                    "the reference model's training loss became")
    assert "try a lower sift.reference.lr" in runner.invoke(
        app, ["train", _recipe(tmp_path, text_csv, epochs=1, **raw), "-q", "-o", str(tmp_path / "o2")]).output


def test_an_empty_source_and_a_broken_tokenizer_folder_are_named_as_what_they_are(tmp_path: Path, text_csv: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty data.source is refused as empty (it reached the imagefolder reader: "Instruction 'train' corresponds to
    no data!"); a local tokenizer folder whose config.json is broken names that file, not the hub's cache and
    HF_HUB_OFFLINE."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    _one_line_error(runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, **{"data.source": ""})]),
                    "key 'data.source': is empty: give a data file, a folder")
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "config.json").write_text("{not json")
    out = runner.invoke(app, ["train", _recipe(tmp_path, text_csv, **{"model.tokenizer": str(folder)}), "-q", "-o",
                              str(tmp_path / "run")])
    _one_line_error(out, f"model.tokenizer: cannot load tokenizer from folder '{folder}': It looks like the config file")
    assert "HF_HUB_OFFLINE" not in out.output


def test_a_data_file_this_user_may_not_read_is_an_input_error(tmp_path: Path, text_csv: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A data file without read permission is said as such, exit 2 (it surfaced as a write error, exit 1: "Permission
    denied (...); files already written are complete"). As root nothing is unreadable, so the open is refused here."""
    real = Path.open

    def refused(self: Path, *args: object, **kwargs: object):  # noqa: ANN202
        if self.name == text_csv.name:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refused)
    out = runner.invoke(app, ["train", _recipe(tmp_path, text_csv), "-q", "-o", str(tmp_path / "run")])
    _one_line_error(out, f"data.source: {text_csv}: cannot be read (Permission denied); siftcli only reads it")


@pytest.mark.parametrize("files", [[], ["sub/readme.txt"]])
def test_a_folder_with_no_images_is_named_as_such(tmp_path: Path, text_csv: Path, files: list[str]) -> None:
    """A folder with no image files was read as an image folder and failed in the library's words: a 600-character
    pattern resolver's repr (empty folder), or 'Instruction "train" corresponds to no data!'."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("x")
    out = runner.invoke(app, ["validate", _recipe(tmp_path, text_csv, **{"data.source": str(folder)})])
    _one_line_error(out, f"data.source: folder '{folder}' holds no image files (.png, .jpg and the other image kinds")
    assert len(out.output) < 400


def test_half_written_files_a_killed_process_left_are_removed_when_the_folder_is_taken_again(tmp_path: Path,
                                                                                              text_csv: Path) -> None:
    """A kill inside a checkpoint write left ``run/.checkpoint.pt.XXXXXXXX.tmp`` (up to a model's size) after the resume
    completed; the process that takes the folder next removes what atomic writes leave, and nothing of the user's."""
    recipe = _recipe(tmp_path, text_csv, epochs=1)
    run = tmp_path / "run"
    assert runner.invoke(app, ["train", recipe, "-q", "-o", str(run)]).exit_code == 0
    left = [run / ".checkpoint.pt.k2j4x9ab.tmp", run / ".metrics.json.0a1b2c3d.tmp"]
    for f in left:
        f.write_bytes(b"\0" * 512 * 1024)
    (run / ".model.q8w7e6r5").mkdir()
    (run / ".model.q8w7e6r5" / "model.safetensors").write_bytes(b"\0" * 1024)
    mine = [run / ".notes.keep", run / ".vscode.settings"]
    mine[0].write_text("mine")
    mine[1].mkdir()
    dead = subprocess.Popen(["true"])  # the killed process's lock: a pid that no longer runs
    dead.wait()
    (run / ".siftcli.lock").write_text(f"{dead.pid} {socket.gethostname()}")
    out = runner.invoke(app, ["train", recipe, "-q", "--resume", str(run)])
    assert out.exit_code == 0, out.output
    assert not any(f.exists() for f in left) and not (run / ".model.q8w7e6r5").exists()
    assert all(f.exists() for f in mine)


def test_a_reference_override_that_breaks_its_model_is_named_at_validate_and_leaves_no_folder(tmp_path: Path,
                                                                                               text_csv: Path) -> None:
    """``sift.reference.config_overrides`` that cannot build a model passed validate, then failed mid-run as
    ``model.source: cannot build config 'bert': ...`` (the learner's key) with a run folder left behind."""
    recipe = _recipe(tmp_path, text_csv, **{"sift.score": "reducible", "sift.reference": {
        "kind": "holdout", "holdout_fraction": 0.2, "config_overrides": {"hidden_size": 15, "num_attention_heads": 2}}})
    expected = "sift.reference.config_overrides {'hidden_size': 15, 'num_attention_heads': 2}: cannot build the reference model"
    _one_line_error(runner.invoke(app, ["validate", recipe]), expected)
    _one_line_error(runner.invoke(app, ["train", recipe, "-q", "-o", str(tmp_path / "run")]), expected)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["train", "compare", "filter"])
def test_an_output_name_no_file_system_takes_is_one_short_line(tmp_path: Path, text_csv: Path, command: str) -> None:
    """A 900 KB folder name came back whole in "File name too long (runs/xxxx...)", exit 1; a name over 255 bytes is
    now refused before any work, the path cut, exit 2."""
    long = "x" * 5000
    args = {"train": ["-o", f"runs/{long}", "-q"], "compare": ["-o", f"runs/{long}", "-q"],
            "filter": ["--dedup", "-o", f"{long}.csv"]}[command]
    out = runner.invoke(app, [command, _recipe(tmp_path, text_csv), *args])
    _one_line_error(out, "a name of 5,00")
    assert "a file system takes at most 255 a name" in out.output and len(out.output) < 400
